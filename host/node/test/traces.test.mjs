// The library's spans through the addon: with $DSH_ENV_LOG set, a collect
// and each contributor's call are printed on stderr as they close; without
// it, nothing.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';

const fixture = new URL('./fixture.mjs', import.meta.url).href;

/** Runs, in `env`, a child Node.js process that registers agent-lineage and collects call `traced-1`. */
function collectIn(env) {
  const script = `
    import { execution, guest, openRegistry } from ${JSON.stringify(fixture)};
    const registry = openRegistry();
    await registry.register(guest('agent_lineage'));
    await registry.collect(execution('traced-1', 'child-1', 'parent-1'));
  `;
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    env,
    encoding: 'utf8',
  });
  assert.equal(run.status, 0, run.stderr);
  return run.stderr;
}

test('DSH_ENV_LOG prints the collect and contributor spans on stderr', () => {
  const { DSH_ENV_LOG: _, ...quiet } = process.env;
  const stderr = collectIn({ ...quiet, DSH_ENV_LOG: 'dsh_env=info' });
  const closed = (needles) => stderr.split('\n').find((line) => line.includes('close') && needles.every((n) => line.includes(n)));
  const call = closed(['contributor{', 'contributor="agent-lineage"', 'phase=resolve']);
  assert.ok(call, stderr);
  for (const field of ['call_id="traced-1"', 'outcome="ok"', 'tier=']) assert.ok(call.includes(field), call);
  const collect = closed(['collect{', 'call_id="traced-1"', 'outcome="ok"']);
  assert.ok(collect, stderr);

  assert.equal(collectIn(quiet).includes('collect{'), false);
});
