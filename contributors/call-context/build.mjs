// Builds call-context.js into a component:  node build.mjs OUT.wasm
// (`npm run build` writes call-context.wasm here). Uses componentize-js's JS
// API; its `jco componentize` CLI fails on this machine kind.
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
  sourcePath: join(here, 'call-context.js'),
  // The frozen contract the guest SDK carries.
  witPath: join(here, '..', '..', 'guest-sdk', 'wit', 'since_v0.1.0'),
  worldName: 'contributor',
  // No WASI features beyond what the engine itself needs: a contributor has
  // no use for clocks, randomness or HTTP (and the host grants none). Stdio
  // stays: the host captures it, and an uncaught error's message printed
  // there becomes the trap's last words.
  disableFeatures: ['random', 'clocks', 'http', 'fetch-event'],
});
await writeFile(out, component);
