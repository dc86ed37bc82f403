// `call-context`: how this tool call runs, for scripts that behave
// differently in the background or want to group nested calls.
//
// DSH_CALL_MODE is `foreground` or `background`; DSH_ROOT_CALL_ID is the id of
// the outermost call this one is nested in (its own id when not nested). Both
// are always present.
//
// The WIT world's exports are this module's exports. Records arrive as objects
// with camelCase fields, enums as their case names, tuples as arrays; returning
// a list of pairs from `resolve` means `ok`; throwing means `err`, with the
// message (`checked`, from dsh-env.js, makes an Error's message the `err`
// and names a result that is not a list of pairs).

// Builds, at build time, what every call would otherwise build first.
import './warm-bindings.js';
import { checked } from './dsh-env.js';

export function declare() {
  return {
    name: 'call-context',
    keys: [
      { key: 'DSH_CALL_MODE', description: 'How the tool call runs: foreground or background.' },
      { key: 'DSH_ROOT_CALL_ID', description: 'Id of the outermost tool call this one is nested in.' },
    ],
  };
}

export const resolve = checked((execution) => [
  ['DSH_CALL_MODE', execution.mode],
  ['DSH_ROOT_CALL_ID', execution.rootCallId],
]);
