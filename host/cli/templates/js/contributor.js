// `{{name}}`: a dsh-env contributor. `declare` names every key it may set;
// `resolve` returns their values for one tool call, in a fresh sandboxed
// instance each time.
//
// The contract's records arrive as objects with camelCase fields, enums as
// their case names, tuples as arrays. Returning a list from `resolve` means
// `ok`; throwing a string (`throw 'why'`) fails the call with it, while
// throwing an Error object is a trap.

// Builds, at build time, what every call would otherwise build first.
import './warm-bindings.js';

const KEY = '{{key}}';

export function declare() {
  return {
    name: '{{name}}',
    keys: [{ key: KEY, description: 'The tool this call runs, e.g. bash.' }],
  };
}

export function resolve(execution) {
  // A key left out is absent for this call.
  return [[KEY, execution.tool]];
}
