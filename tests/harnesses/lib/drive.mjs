// Runs inside the network namespace (see offline.mjs): starts the scripted
// model server on loopback, runs one harness process against it, and prints
// `{code, signal, stdout, stderr, ms}` as JSON when the harness exits.
//   node drive.mjs SPEC.json
// SPEC: {port, commands, log, argv, env, cwd, timeoutMs}

import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createModelServer } from './model-server.mjs';

const spec = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const server = createModelServer({ commands: spec.commands, log: spec.log });
await new Promise((resolve) => server.listen(spec.port, '127.0.0.1', resolve));

const started = process.hrtime.bigint();
const child = spawn(spec.argv[0], spec.argv.slice(1), {
  cwd: spec.cwd,
  env: spec.env,
  stdio: ['ignore', 'pipe', 'pipe'],
  detached: true,
});
const out = [];
const err = [];
child.stdout.on('data', (c) => out.push(c));
child.stderr.on('data', (c) => err.push(c));
// A guard against a harness that hangs, not a measurement: the test fails
// on the missing answer, with what the harness printed.
const guard = setTimeout(() => process.kill(-child.pid, 'SIGKILL'), spec.timeoutMs);
const [code, signal] = await new Promise((resolve) => child.on('close', (c, s) => resolve([c, s])));
clearTimeout(guard);
const ms = Number((process.hrtime.bigint() - started) / 1_000_000n);
server.closeAllConnections();
server.close();
process.stdout.write(JSON.stringify({
  code, signal, ms,
  stdout: Buffer.concat(out).toString('utf8'),
  stderr: Buffer.concat(err).toString('utf8'),
}));
