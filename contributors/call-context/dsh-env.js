// What a contributor's `resolve` gives, made into what the contract carries.
// `dsh-env new --lang js` writes this same file; import it, and wrap
// `resolve`:
//
//   import { checked } from './dsh-env.js';
//   export const resolve = checked((execution) => [['DSH_MY_KEY', 'value']]);
//
// componentize-js turns only a thrown string into the call's `err`: an
// `Error` (a `TypeError` from a typo included) reaches the host as
// "expected a string", its message lost, and a result that is not a list
// of pairs becomes no keys at all, silently. `checked` makes the first the
// error's message and the second an error naming what was returned.

/** `resolve`, with a thrown value made its message and its result checked. */
export function checked(resolve) {
  return (execution) => {
    let result;
    try {
      result = resolve(execution);
    } catch (e) {
      throw messageOf(e);
    }
    return pairs(result);
  };
}

/** The text an `err` carries for a thrown value. */
function messageOf(thrown) {
  if (typeof thrown === 'string') return thrown;
  if (thrown instanceof Error) {
    const message = thrown.message || 'an error without a message';
    return thrown.name && thrown.name !== 'Error' ? `${thrown.name}: ${message}` : message;
  }
  return `threw ${describe(thrown)}`;
}

/** `result` if it is an array of [key, value] string pairs; else throws, naming what is wrong. */
function pairs(result) {
  if (!Array.isArray(result)) {
    throw `resolve returned ${describe(result)}, not a list of [key, value] pairs`;
  }
  result.forEach((pair, i) => {
    if (!Array.isArray(pair) || pair.length !== 2 || typeof pair[0] !== 'string') {
      throw `resolve's pair ${i} is ${describe(pair)}, not a [key, value] pair of strings`;
    }
    if (typeof pair[1] !== 'string') {
      throw `resolve's value for ${pair[0]} is ${describe(pair[1])}, not a string`;
    }
  });
  return result;
}

/** A short description of any value, which never throws. */
function describe(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return `an array of ${value.length}`;
  switch (typeof value) {
    case 'undefined':
      return 'nothing (undefined)';
    case 'string':
      return `the string ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`;
    case 'object':
      return isThenable(value) ? 'a Promise (resolve must not be async)' : 'an object';
    default:
      return `a ${typeof value}`;
  }
}

/** Whether `value` has a `then` method; a `then` getter that throws (a Proxy's) says no. */
function isThenable(value) {
  try {
    return typeof value.then === 'function';
  } catch {
    return false;
  }
}
