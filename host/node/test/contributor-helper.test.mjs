// The JavaScript contributors' helper (`dsh-env new --lang js` writes it;
// the call-context example uses the same file) run in Node as it is:
// `checked` turns whatever `resolve` does wrong into a message naming it.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { checked } from '../../cli/templates/js/dsh-env.js';

/** What `checked(resolve)` throws for one call, which must be a string. */
function thrown(resolve) {
  try {
    checked(resolve)({ tool: 'bash' });
  } catch (message) {
    assert.equal(typeof message, 'string', String(message));
    return message;
  }
  assert.fail('it did not throw');
}

test('checked passes pairs through and names what is wrong with anything else', () => {
  assert.deepEqual(checked((e) => [['DSH_TOOL', e.tool]])({ tool: 'bash' }), [['DSH_TOOL', 'bash']]);
  assert.equal(thrown(() => { throw new TypeError('x is undefined'); }), 'TypeError: x is undefined');
  assert.equal(thrown(() => ({ DSH_TOOL: 'bash' })), 'resolve returned an object, not a list of [key, value] pairs');
  assert.equal(thrown(async () => []), 'resolve returned a Promise (resolve must not be async), not a list of [key, value] pairs');
  assert.equal(thrown(() => [['DSH_N', 1]]), "resolve's value for DSH_N is a number, not a string");
});

test('a result whose `then` throws when read is still described, not thrown past checked', () => {
  const hostile = new Proxy({}, { get() { throw new Error('read me not'); } });
  assert.equal(thrown(() => hostile), 'resolve returned an object, not a list of [key, value] pairs');
  assert.equal(thrown(() => [hostile]), "resolve's pair 0 is an object, not a [key, value] pair of strings");
});
