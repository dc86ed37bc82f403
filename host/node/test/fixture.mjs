// What the tests share: the guests the workspace build made, the compile
// helper, and a registry in a fresh home.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import dshEnv from '../index.js';

const here = fileURLToPath(new URL('.', import.meta.url));
export const target = process.env.CARGO_TARGET_DIR ?? resolve(here, '../../../target');

/** A guest built by `cargo test` (tests/artifacts), by file name. */
export const guest = (name) => join(target, 'wasm32-wasip2/guest', `${name}.wasm`);

/** A registry in a fresh home, with `options` for `Registry.open`. */
export function openRegistry(options = {}) {
  const home = mkdtempSync(join(tmpdir(), 'dsh-env-node-'));
  return dshEnv.Registry.open({ home, compiler: join(target, 'debug/dsh-env-compile'), ...options });
}

/** The `puppet` test guest, its role given by `config` (see tests/guests/puppet). */
export const puppet = (registry, config, options = {}) =>
  registry.register(guest('puppet'), { ...options, config });

/**
 * A call by the agent `session` (a spawned child of `parent`, if given), in
 * the reference harness's `ToolExecution` shape.
 */
export function execution(callId, session, parent) {
  const header = { version: 1, id: session, createdAt: Date.now(), cwd: tmpdir() };
  if (parent !== undefined) Object.assign(header, { parentSession: parent, origin: 'subagent', delegationDepth: 1 });
  return {
    callId,
    rootCallId: 'root',
    name: 'bash',
    arguments: { command: 'true', description: 'nothing' },
    agent: { session: { header } },
  };
}

export { dshEnv };
