// Builds a JavaScript contributor into a component:
//   node build.mjs OUT.wasm [SOURCE.js [WIT_DIR]]
// SOURCE.js and WIT_DIR are relative to this file, by default
// `contributor.js` and `wit/` as `dsh-env new --lang js` lays a project out.
// One file serves that template and the call-context example. It uses
// componentize-js's JS API (its `jco componentize` CLI fails on some
// machines).
import { writeFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { componentize } from '@bytecodealliance/componentize-js';

const here = dirname(fileURLToPath(import.meta.url));
const [out, source = 'contributor.js', wit = 'wit'] = process.argv.slice(2);
if (!out) {
  console.error('usage: node build.mjs OUT.wasm [SOURCE.js [WIT_DIR]]');
  process.exit(2);
}

const { component } = await componentize({
  sourcePath: resolve(here, source),
  // The contract, dsh:env@0.1.0: the copy `dsh-env new` wrote, or the
  // frozen snapshot the guest SDK carries.
  witPath: resolve(here, wit),
  worldName: 'contributor',
  // No WASI features a contributor has no use for (the host grants none).
  // Stdio stays: the host captures it, and an uncaught error's message
  // printed there is what the host reports when the call fails.
  disableFeatures: ['random', 'clocks', 'http', 'fetch-event'],
});
await writeFile(out, component);
