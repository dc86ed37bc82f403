// What the tests share: the guests the workspace build made, the compile
// helper, and a registry in a fresh home.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import assert from 'node:assert/strict';

import dshEnv from '../index.js';

const here = fileURLToPath(new URL('.', import.meta.url));
export const target = process.env.CARGO_TARGET_DIR ?? resolve(here, '../../../target');

/** A guest built by `cargo test` (tests/artifacts), by file name. */
export const guest = (name) => join(target, 'wasm32-wasip2/guest', `${name}.wasm`);

/** A Python, JavaScript or C example built by `cargo test` (tests/artifacts), by file name. */
export const polyglot = (name) => join(target, 'polyglot', `${name}.wasm`);

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

/** A fresh directory for a test's files. */
export const scratch = () => mkdtempSync(join(tmpdir(), 'dsh-env-node-files-'));

/** Runs the real `minisign` (installed by scripts/setup-polyglot) with `args`. */
function minisign(args) {
  const run = spawnSync('minisign', args, { encoding: 'utf8' });
  assert.equal(run.status, 0, `minisign ${args.join(' ')}: ${run.error ?? run.stderr}`);
}

/**
 * A minisign key pair in `dir`, as an author makes one: `public` is the base64
 * line of its `.pub` (what a trust's `keys` hold), `sign(file)` writes
 * `<file>.minisig`.
 */
export function signingKey(dir, name) {
  const [pub, key] = [join(dir, `${name}.pub`), join(dir, `${name}.key`)];
  minisign(['-G', '-W', '-f', '-p', pub, '-s', key]);
  const publicKey = readFileSync(pub, 'utf8').split('\n')[1];
  return { public: publicKey, sign: (file) => minisign(['-S', '-s', key, '-m', file]) };
}

/** A copy of the guest `name` in `dir`, to sign or leave unsigned. */
export function guestCopy(name, dir) {
  const path = join(dir, `${name}.wasm`);
  copyFileSync(guest(name), path);
  return path;
}

export { dshEnv };
