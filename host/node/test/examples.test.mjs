// Every shipped example runs: bash-tool.ts, compiled by the package's own
// TypeScript, against a real component, several times (its child's stdin
// once broke with EPIPE when the command exited before reading it).
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { guest, target } from './fixture.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const pkg = resolve(here, '..');

test('examples/bash-tool.ts runs and prints the child\'s parent session', () => {
  // Inside the package, so that `@dsh-env/node` resolves to it.
  const out = mkdtempSync(join(pkg, '.examples-'));
  try {
    execFileSync(join(pkg, 'node_modules/.bin/tsc'), ['-p', 'examples', '--noEmit', 'false', '--rootDir', '.', '--outDir', out], { cwd: pkg });
    const env = { ...process.env, DSH_HOME: mkdtempSync(join(tmpdir(), 'dsh-env-example-')), DSH_ENV_COMPILER: join(target, 'debug/dsh-env-compile') };
    for (let run = 0; run < 6; run++) {
      const ran = spawnSync(process.execPath, [join(out, 'examples/bash-tool.js'), guest('agent_lineage')], { env, encoding: 'utf8' });
      assert.equal(ran.status, 0, `run ${run}: ${ran.stderr}`);
      assert.equal(ran.stdout, 'parent-1\n');
    }
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
