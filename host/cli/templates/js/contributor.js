// `{{name}}`: a dsh-env contributor. `declare` names every key it may set;
// `resolve` returns their values for one tool call, in a fresh sandboxed
// instance each time.
//
// The contract's records arrive as objects with camelCase fields, enums as
// their case names, tuples as arrays. Returning a list of [key, value]
// pairs from `resolve` means `ok`; throwing fails the call with the message
// (`throw new Error('why')` or `throw 'why'`): `checked`, from dsh-env.js,
// carries it, and names a result that is not a list of pairs.

// Builds, at build time, what every call would otherwise build first.
import './warm-bindings.js';
import { checked } from './dsh-env.js';

const KEY = '{{key}}';

export function declare() {
  return {
    name: '{{name}}',
    keys: [{ key: KEY, description: 'The tool this call runs, e.g. bash.' }],
  };
}

// A key left out is absent for this call.
export const resolve = checked((execution) => [[KEY, execution.tool]]);
