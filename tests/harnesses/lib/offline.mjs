// Runs a harness offline: the harness and the scripted model server run in
// a new network namespace that has only loopback (`unshare --net`), so
// nothing they do can reach another machine, and with a resolv.conf naming
// 127.0.0.1 bound over /etc/resolv.conf (a new mount namespace), so a name
// look-up fails at once instead of waiting out a timeout. Each run has its
// own loopback, so the model server takes the same port every time.

import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';

/** The model server's port, on each run's own loopback. */
export const PORT = 8765;

const drive = new URL('./drive.mjs', import.meta.url).pathname;

const SETUP = 'set -e; ip link set lo up; mount --bind "$0" /etc/resolv.conf; exec "$@"';

/**
 * Runs `argv` in `cwd` with exactly `env`, against a model server that calls
 * the shell tool with each of `commands` in turn and logs every request to
 * `log` (the run's other files go beside it). Resolves to
 * `{code, signal, stdout, stderr, ms}`.
 */
export async function runOffline({ argv, env, cwd, commands, log, timeoutMs = 120_000 }) {
  const resolv = join(dirname(log), 'resolv.conf');
  writeFileSync(resolv, 'nameserver 127.0.0.1\n');
  const spec = `${log}.spec.json`;
  writeFileSync(spec, JSON.stringify({ port: PORT, argv, env, cwd, commands, log, timeoutMs }));
  const { stdout } = await promisify(execFile)(
    'unshare',
    ['--net', '--mount', '--map-root-user', 'bash', '-c', SETUP, resolv, process.execPath, drive, spec],
    { maxBuffer: 64 << 20 },
  );
  return JSON.parse(stdout);
}
