// The reference harness's execution shape, made with its own types
// (reference-executions.mjs), through every way in: the addon, the CLI's
// `--execution` and `serve`'s `collect` give the same overlay. (The Rust
// API reads the same files in tests/tests/all/executions.rs.)
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { dshEnv, guest, target } from './fixture.mjs';
import { executions } from './reference-executions.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const fixtures = resolve(here, '../../../tests/fixtures/executions');
const binary = join(target, 'debug/dsh-env');
const home = mkdtempSync(join(tmpdir(), 'dsh-env-shape-'));
const shape = { name: 'shape', keys: 'DSH_MODE=the mode|DSH_CWD=the cwd', pairs: 'DSH_MODE={mode}|DSH_CWD={cwd}' };
const manifest = join(home, 'manifest.toml');
writeFileSync(
  manifest,
  `[[contributor]]\npath = ${JSON.stringify(guest('agent_lineage'))}\n\n` +
    `[[contributor]]\npath = ${JSON.stringify(guest('puppet'))}\n[contributor.config]\n` +
    Object.entries(shape).map(([key, value]) => `${key} = ${JSON.stringify(value)}\n`).join(''),
);

/** What each fixture must give, beside DSH_HOME and DSH_SHELL. */
const expected = {
  'top-level': { DSH_SESSION_ID: 'sess-parent', DSH_AGENT_DEPTH: '0', DSH_MODE: 'foreground', DSH_CWD: '/tmp' },
  child: {
    DSH_SESSION_ID: 'sess-child',
    DSH_PARENT_SESSION_ID: 'sess-parent',
    DSH_AGENT_DEPTH: '1',
    DSH_MODE: 'background',
    DSH_CWD: '/tmp',
  },
  // A contract 0.2 guest sees the absent cwd as absent.
  'no-cwd': { DSH_SESSION_ID: 'sess-nowhere', DSH_AGENT_DEPTH: '0', DSH_MODE: 'foreground', DSH_CWD: 'none' },
};

test('the fixtures are what the reference harness\'s types make', () => {
  for (const [name, execution] of Object.entries(executions)) {
    const file = JSON.parse(readFileSync(join(fixtures, `${name}.json`), 'utf8'));
    assert.deepEqual(file, JSON.parse(JSON.stringify(execution)), name);
  }
});

/** `serve`'s answer to `collect` for each execution, in one server. */
async function served(names) {
  const server = spawn(binary, ['serve', '--manifest', manifest, '--home', home], { stdio: ['pipe', 'pipe', 'pipe'] });
  const lines = createInterface({ input: server.stdout });
  const answers = new Map();
  const done = new Promise((resolve) => {
    lines.on('line', (line) => {
      const message = JSON.parse(line);
      answers.set(message.id, message);
      if (answers.size === names.length) resolve();
    });
  });
  names.forEach((name, id) => {
    const execution = JSON.parse(readFileSync(join(fixtures, `${name}.json`), 'utf8'));
    server.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id, method: 'collect', params: { execution } })}\n`);
  });
  await done;
  server.stdin.end();
  return names.map((_, id) => {
    const answer = answers.get(id);
    assert.equal(answer.error, undefined, JSON.stringify(answer.error));
    return answer.result.overlay;
  });
}

test('the CLI, serve and the addon give each fixture the same overlay, quietly', async () => {
  const names = Object.keys(expected);
  const registry = dshEnv.Registry.open({ home, compiler: join(target, 'debug/dsh-env-compile') });
  await registry.registerManifest(manifest);
  const fromServe = await served(names);
  for (const [i, name] of names.entries()) {
    const file = join(fixtures, `${name}.json`);
    const cli = spawnSync(binary, ['resolve', '--manifest', manifest, '--home', home, '--execution', file, '--json'], {
      encoding: 'utf8',
    });
    assert.equal(cli.status, 0, cli.stderr);
    assert.equal(cli.stderr, '', `${name}: no warning for the reference's own fields`);
    const fromCli = JSON.parse(cli.stdout).overlay;
    const fromAddon = (await registry.collect(JSON.parse(readFileSync(file, 'utf8')))).overlay;
    assert.deepEqual(fromCli, { DSH_HOME: home, DSH_SHELL: '1', ...expected[name] }, `${name} through the CLI`);
    assert.deepEqual(fromServe[i], fromCli, `${name} through serve`);
    assert.deepEqual(fromAddon, fromCli, `${name} through the addon`);
  }
});

test('the old field names are refused, naming the reference harness\'s', async () => {
  const registry = dshEnv.Registry.open({ home });
  const child = JSON.parse(readFileSync(join(fixtures, 'child.json'), 'utf8'));
  const { parentSession, ...header } = child.agent.session.header;
  const old = { ...child, agent: { session: { header: { ...header, parentId: parentSession } } } };
  await assert.rejects(registry.collect(old), /`agent\.session\.header\.parentId` is not the reference harness's; it is `agent\.session\.header\.parentSession`/);
  const file = join(home, 'old.json');
  writeFileSync(file, JSON.stringify({ ...child, agent: { ...child.agent, depth: 1 } }));
  const cli = spawnSync(binary, ['resolve', '--manifest', manifest, '--home', home, '--execution', file], { encoding: 'utf8' });
  assert.equal(cli.status, 2);
  assert.match(cli.stderr, /`agent\.depth` is not the reference harness's; it is `agent\.session\.header\.delegationDepth`/);
});
