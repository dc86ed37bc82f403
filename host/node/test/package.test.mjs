// The npm package stands alone: the package and its platform package
// (holding the addon and, beside it, the compile helper), as
// `scripts/npm-package` packs them, installed from those tarballs alone into
// a fresh project outside the repository, with a fresh HOME and no PATH
// change, register, collect and exec every example contributor, from
// `require` and from `import`. It packs the test command's own build
// (`--profile dev`, no second build: the default `perf` would build wasmtime
// again, about 10 minutes of both cores).
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { guest, polyglot } from './fixture.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const pkg = resolve(here, '..');

// As contributors/examples.toml registers them.
const examples = [
  [guest('agent_lineage'), {}],
  [guest('call_trace'), {}],
  [guest('git_context'), { grants: { cwd: 'read' } }],
  [polyglot('session_url'), { config: { base_url: 'https://agents.example.test/sessions' } }],
  [polyglot('call_context'), {}],
  [polyglot('workspace_id'), {}],
];

// The consumer's program; `IMPORT` becomes a `require` or an `import`.
const program = `IMPORT
const execution = {
  callId: 'c1', rootCallId: 'root', name: 'bash', arguments: { command: 'true' },
  agent: { session: { header: { version: 1, id: 'child-1', createdAt: 0, cwd: process.cwd(), parentSession: 'parent-1', delegationDepth: 1 } } },
};
(async () => {
  const registry = Registry.open({ home: process.env.DSH_HOME });
  for (const [path, options] of JSON.parse(process.env.EXAMPLES)) await registry.register(path, options);
  const { overlay } = await registry.collect(execution);
  const ran = await registry.exec(execution, 'echo "$DSH_PARENT_SESSION_ID $DSH_CALL_MODE"');
  console.log(JSON.stringify({ overlay, stdout: ran.stdout, exitCode: ran.exitCode }));
})().catch((error) => { console.error(error); process.exit(1); });
`;

test('the packed package, installed alone, registers, collects and execs the examples', () => {
  const dir = mkdtempSync(join(tmpdir(), 'dsh-env-npm-'));
  try {
    const home = join(dir, 'home');
    mkdirSync(home);
    // npm itself needs node on PATH; the consumer's programs get no more
    // than the system's PATH, so the helper is not found there.
    const npmEnv = { HOME: home, PATH: `${dirname(process.execPath)}:/usr/bin:/bin`, npm_config_cache: join(dir, 'npm-cache'), npm_config_update_notifier: 'false' };
    const npm = (cwd, args) => execFileSync('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'], { cwd, env: npmEnv, encoding: 'utf8' });

    const packed = join(dir, 'packed');
    execFileSync(join(pkg, '../../scripts/npm-package'), ['--profile', 'dev', packed], {
      env: { ...process.env, npm_config_cache: npmEnv.npm_config_cache, npm_config_update_notifier: 'false' },
      encoding: 'utf8',
    });
    const tarballs = readdirSync(packed).sort();
    assert.deepEqual(tarballs, ['dsh-env-node-0.1.0.tgz', 'dsh-env-node-linux-x64-gnu-0.1.0.tgz']);
    const listing = (name) => execFileSync('tar', ['tzf', join(packed, name)], { encoding: 'utf8' }).split('\n').filter(Boolean).sort();
    assert.deepEqual(listing(tarballs[1]), ['package/README.md', 'package/dsh-env-compile', 'package/dsh-env.linux-x64-gnu.node', 'package/package.json']);
    assert.ok(!listing(tarballs[0]).some((f) => f.endsWith('.node') || f.endsWith('dsh-env-compile')), 'the main package carries no binary');
    // A user's package carries no test-only code: the workspace's test
    // contract (dsh-env's `test-contract` feature) is in test builds only.
    const addon = execFileSync('tar', ['xzOf', join(packed, tarballs[1]), 'package/dsh-env.linux-x64-gnu.node'], { maxBuffer: 1 << 30 });
    assert.ok(!addon.includes('0.2.0-test'), 'the addon binds the test contract');

    const project = join(dir, 'project');
    mkdirSync(project);
    writeFileSync(join(project, 'package.json'), '{ "name": "consumer", "private": true }\n');
    npm(project, ['install', '--offline', ...tarballs.map((t) => join(packed, t))]);

    const dshHome = join(dir, 'dsh-home');
    for (const [file, line] of [
      ['require.cjs', "const { Registry } = require('@dsh-env/node');"],
      ['import.mjs', "import { Registry } from '@dsh-env/node';"],
    ]) {
      writeFileSync(join(project, file), program.replace('IMPORT', line));
      const ran = spawnSync(process.execPath, [file], {
        cwd: project,
        env: { HOME: home, PATH: '/usr/bin:/bin', DSH_HOME: dshHome, EXAMPLES: JSON.stringify(examples) },
        encoding: 'utf8',
      });
      assert.equal(ran.status, 0, `${file}: ${ran.stderr}`);
      const { overlay, stdout, exitCode } = JSON.parse(ran.stdout);
      for (const key of ['DSH_PARENT_SESSION_ID', 'DSH_TRACEPARENT', 'DSH_SESSION_URL', 'DSH_CALL_MODE', 'DSH_WORKSPACE_ID']) {
        assert.ok(overlay[key], `${file}: ${key} in ${JSON.stringify(overlay)}`);
      }
      assert.equal(exitCode, 0, file);
      assert.equal(stdout, 'parent-1 foreground\n', file);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
