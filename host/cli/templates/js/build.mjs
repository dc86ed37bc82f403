// Builds contributor.js into a component:  node build.mjs OUT.wasm
// with componentize-js's JS API (its `jco componentize` CLI fails on some
// machines).
import { writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { componentize } from '@bytecodealliance/componentize-js';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2];
if (!out) {
  console.error('usage: node build.mjs OUT.wasm');
  process.exit(2);
}

const { component } = await componentize({
  sourcePath: join(here, 'contributor.js'),
  // The contract, dsh:env@0.1.0, as `dsh-env new` wrote it.
  witPath: join(here, 'wit'),
  worldName: 'contributor',
  // No WASI features a contributor has no use for (the host grants none).
  // Stdio stays: the host captures it, and an uncaught error's message
  // printed there is what the host reports when the call fails.
  disableFeatures: ['random', 'clocks', 'http', 'fetch-event'],
});
await writeFile(out, component);
