// `call-context`: how this tool call runs, for scripts that behave
// differently in the background or want to group nested calls.
//
// DSH_CALL_MODE is `foreground` or `background`; DSH_ROOT_CALL_ID is the id of
// the outermost call this one is nested in (its own id when not nested). Both
// are always present.
//
// The WIT world's exports are this module's exports. Records arrive as objects
// with camelCase fields, enums as their case names, tuples as arrays; returning
// a list from `resolve` means `ok`, and throwing means `err`.

// Builds, at build time, what every call would otherwise build first.
import './warm-bindings.js';

export function declare() {
  return {
    name: 'call-context',
    keys: [
      { key: 'DSH_CALL_MODE', description: 'How the tool call runs: foreground or background.' },
      { key: 'DSH_ROOT_CALL_ID', description: 'Id of the outermost tool call this one is nested in.' },
    ],
  };
}

export function resolve(execution) {
  return [
    ['DSH_CALL_MODE', execution.mode],
    ['DSH_ROOT_CALL_ID', execution.rootCallId],
  ];
}
