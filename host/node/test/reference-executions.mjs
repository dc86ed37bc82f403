// @ts-check
// Tool executions made with the reference harness's own types (checked by
// `tsc -p examples`, which runs in `npm test`), in the form the harness
// serializes them: the live agent reduced to its session's header, and no
// signal, token or parent. tests/fixtures/executions/*.json must be these.

/** @typedef {import('@deepseek-ai/dsh-session').SessionHeader} SessionHeader */
/** @typedef {import('@deepseek-ai/dsh-session').SessionId} SessionId */
/** @typedef {import('@deepseek-ai/dsh-llm').CallId} CallId */
/**
 * @typedef {Omit<import('@deepseek-ai/dsh-tools').ToolExecution, 'agent' | 'signal' | 'token' | 'parent'>
 *   & { agent?: { session: { header: SessionHeader } } }} SerializedExecution
 */

const createdAt = 1764748800000;
const call = (/** @type {string} */ id) => /** @type {CallId} */ (id);
const session = (/** @type {string} */ id) => /** @type {SessionId} */ (id);

/** @type {SessionHeader} */
const parentHeader = { version: 1, id: session('sess-parent'), createdAt, cwd: '/tmp' };

/** @type {Record<string, SerializedExecution>} */
export const executions = {
  'top-level': {
    callId: call('call-1'),
    rootCallId: call('call-1'),
    name: 'bash',
    arguments: { command: 'make test', description: 'run the tests' },
    agent: { session: { header: parentHeader } },
  },
  child: {
    callId: call('call-2'),
    rootCallId: call('call-1'),
    name: 'bash',
    arguments: { command: 'make test', description: 'run the tests', run_in_background: true },
    agent: {
      session: {
        header: {
          version: 1,
          id: session('sess-child'),
          createdAt,
          cwd: '/tmp',
          parentSession: parentHeader.id,
          seedLength: 0,
          origin: 'subagent',
          delegationDepth: 1,
          agentPreset: 'coder',
        },
      },
    },
  },
  'no-cwd': {
    callId: call('call-3'),
    rootCallId: call('call-3'),
    name: 'bash',
    arguments: { command: 'true', description: 'nothing' },
    agent: { session: { header: { version: 1, id: session('sess-nowhere'), createdAt } } },
  },
};
