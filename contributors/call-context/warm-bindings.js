// Warms componentize-js's bindings at build time, so that no call pays for
// it. Import it once from the contributor's module: `import
// './warm-bindings.js';`. Without it the component works the same, slower.
//
// componentize-js runs its generated bindings (they lift each call's
// arguments and lower its result) in a realm of their own, and snapshots the
// engine before any export has run. SpiderMonkey builds a realm's standard
// classes (Promise, DataView, typed arrays, errors), self-hosted functions
// and object shapes on first use, and the host runs every call in a fresh
// instance of that snapshot: so every call built them again, about half of
// its time. This runs, once and at build time, what the bindings run for
// `resolve`, in their realm, without calling into the component.
//
// The bindings' realm is reached through the `Function` of a function it
// made (`config.get`): code made by a realm's `Function` runs in that realm
// and sees its top-level names. Those names are componentize-js 0.23.0's;
// if another version lacks one, the build fails and says so.
import { get } from 'dsh:env/config@0.1.0';

const bindings = `
  // Strings in: UTF-8 decoded from a view of the guest's memory.
  const bytes = new Uint8Array(64);
  const { written } = TEXT_ENCODER_UTF8.encodeInto('warm', bytes);
  TEXT_DECODER_UTF8.decode(new Uint8Array(bytes.buffer, 0, written));
  new Uint8Array($memory.buffer, 0, 0);
  dataView($memory).getUint32(0, true);
  // The records, as the bindings build them.
  const agent = { sessionId: '', cwd: '', parentSessionId: undefined, depth: 0 >>> 0 };
  const execution = { callId: '', rootCallId: '', tool: '', mode: 'foreground', agent };
  // The call: an async function awaiting the contributor's value.
  (async () => { await execution; })();
  // The result out: tags, pairs, and strings measured and encoded.
  const ret = { tag: 'ok', val: [['DSH_WARM', 'warm']] };
  hasOwnProperty.call(ret, 'payload');
  for (const pair of ret.val) {
    const [key, value] = pair;
    key.charCodeAt(0);
    const encoded = { ptr: 1, len: value.length, codepoints: value.length };
    const scratch = new DataView(bytes.buffer);
    scratch.setInt8(0, 0, true);
    scratch.setUint32(4, encoded.len, true);
  }
  try {
    throw new TypeError('warm');
  } catch (e) {
    e instanceof Error;
  }
  _debugLog('warm');
`;

try {
  new get.constructor(bindings)();
} catch (e) {
  throw new Error(
    `warm-bindings.js does not fit this componentize-js's bindings (${e}): update it, or remove its import`,
  );
}
