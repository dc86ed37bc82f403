// The addon's cost on a TypeScript harness's path, in one Node process:
//   floor    an empty async function awaited (the Promise round trip);
//   builtin  collect() through the addon with no contributor (built-ins only);
//   addon    collect() through the addon with 1 Rust contributor (agent-lineage),
//            its instance made ahead (untimed, as while a harness's command
//            runs between calls: the Rust bench's caller's path);
//   addon-b2b the same back to back, making the instance on the caller's
//            path when the background preparation has not finished;
//   js       a plain in-process JavaScript resolver computing the same keys,
//            unsandboxed (the reference harness's way);
//   hook     a hook process per call printing the same keys (sh -c).
// Ratios are against `js` and `hook` in the same run; never a timed assertion.
// Run after `npm run build`: `node bench/collect.mjs [--json]`.
import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

import { execution, guest, openRegistry } from '../test/fixture.mjs';

const run = promisify(execFile);

/** p50 and p99 of `call`, timed; `between` runs untimed after each call. */
async function measure(name, iterations, call, between = async () => {}) {
  for (let i = 0; i < Math.min(200, iterations); i++) {
    await call(i);
    await between();
  }
  const samples = [];
  for (let i = 0; i < iterations; i++) {
    const start = process.hrtime.bigint();
    await call(i);
    samples.push(Number(process.hrtime.bigint() - start) / 1000);
    await between();
  }
  samples.sort((a, b) => a - b);
  const at = (q) => samples[Math.min(samples.length - 1, Math.floor(q * samples.length))];
  return { name, iterations, p50: at(0.5), p99: at(0.99) };
}

// Made before timing, as a harness has its execution before it collects
// (`execution` reads os.tmpdir(), five syscalls, which is not collect's cost).
const made = Array.from({ length: 20200 }, (_, i) => execution(`call-${i}`, 'child', 'parent'));
const calls = (i) => made[i];
const empty = openRegistry();
const registry = openRegistry();
await registry.register(guest('agent_lineage'));

/** The keys agent-lineage computes, in plain JavaScript. */
async function jsResolver(call) {
  const header = call.agent?.session.header;
  const pairs = { DSH_AGENT_DEPTH: String(call.agent?.depth ?? 0) };
  if (header?.parentId) pairs.DSH_PARENT_SESSION_ID = header.parentId;
  return pairs;
}

/** Waits until `registry`'s contributors have their next instances. */
async function prepared(registry, contributors) {
  for (let turn = 0; registry.prepared() < contributors; turn++) {
    if (turn > 100000) throw new Error('the background preparation never finished');
    await new Promise((resolve) => setImmediate(resolve));
  }
}

const rows = [
  await measure('floor', 20000, async () => {}),
  await measure('builtin', 5000, (i) => empty.collect(calls(i))),
  await measure('addon', 5000, (i) => registry.collect(calls(i)), () => prepared(registry, 1)),
  await measure('addon-b2b', 5000, (i) => registry.collect(calls(i))),
  await measure('js', 20000, (i) => jsResolver(calls(i))),
  await measure('hook', 200, () =>
    run('/bin/sh', ['-c', 'printf "DSH_PARENT_SESSION_ID=%s\\nDSH_AGENT_DEPTH=1\\n" parent'], {
      cwd: mkdtempSync(join(tmpdir(), 'dsh-hook-')),
    }),
  ),
];
const by = Object.fromEntries(rows.map((row) => [row.name, row]));
const verdict = {
  addon_p50_us: by.addon.p50,
  addon_within_50us: by.addon.p50 <= 50,
  hook_over_addon: by.hook.p50 / by.addon.p50,
  addon_20x_faster_than_hook: by.hook.p50 / by.addon.p50 >= 20,
  addon_over_js: by.addon.p50 / by.js.p50,
  addon_over_floor: by.addon.p50 / by.floor.p50,
  addon_b2b_p50_us: by['addon-b2b'].p50,
};
if (process.argv.includes('--json')) {
  console.log(JSON.stringify({ rows, verdict }));
} else {
  console.log('| row | iterations | p50 µs | p99 µs |');
  console.log('|---|---|---|---|');
  for (const row of rows) console.log(`| ${row.name} | ${row.iterations} | ${row.p50.toFixed(1)} | ${row.p99.toFixed(1)} |`);
  console.log(verdict);
}
