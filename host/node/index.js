'use strict';
// @dsh-env/node: the public API over the native addon. It turns the addon's
// errors into DshEnvError subclasses and accepts options in JavaScript's
// camelCase.

const { existsSync } = require('node:fs');
const { dirname, join } = require('node:path');

/**
 * The addon for this platform and the directory it is in, found as napi-rs's
 * loaders find it: `./dsh-env.<platform>-<arch>[-<libc>].node` beside this
 * file (a local build: `npm run build`, or `scripts/test`'s copy), else the
 * platform package `@dsh-env/node-<platform>-<arch>[-<libc>]`, an optional
 * dependency that npm installs only where it fits.
 */
function loadBinding() {
  let libc = '';
  if (process.platform === 'linux') {
    libc = process.report?.getReport()?.header?.glibcVersionRuntime ? '-gnu' : '-musl';
  }
  const triple = `${process.platform}-${process.arch}${libc}`;
  const local = join(__dirname, `dsh-env.${triple}.node`);
  if (existsSync(local)) return { binding: require(local), dir: __dirname };
  const pkg = `@dsh-env/node-${triple}`;
  let main;
  try {
    main = require.resolve(pkg);
  } catch (error) {
    if (error?.code !== 'MODULE_NOT_FOUND') throw error;
    throw new Error(`@dsh-env/node: no addon for ${triple}: its package ${pkg} is not installed (published: linux-x64-gnu, linux-arm64-gnu)`);
  }
  return { binding: require(main), dir: dirname(main) };
}

const { binding, dir: addonDir } = loadBinding();

/**
 * The compile helper that travels beside the addon (in the platform
 * package), unless $DSH_ENV_COMPILER names one: the addon itself lives in
 * Node's process, so without this it would look beside `node` and on PATH.
 */
function defaultCompiler() {
  if (process.env.DSH_ENV_COMPILER) return undefined;
  const beside = join(addonDir, 'dsh-env-compile');
  return existsSync(beside) ? beside : undefined;
}

/** A dsh-env failure, with a stable `code` and what it names. */
class DshEnvError extends Error {
  constructor(data) {
    super(data.message);
    this.name = new.target.name;
    this.code = data.code;
    for (const field of ['contributor', 'key', 'file', 'limit']) {
      if (data[field] !== undefined) this[field] = data[field];
    }
  }
}
/** A registration was refused: the component, its signature or its declaration. */
class RegistrationError extends DshEnvError {}
/** A contributor failed an execution (a trap, a limit, or output breaking a rule). */
class ContributorError extends DshEnvError {}
/** The command could not be run. */
class ExecError extends DshEnvError {}
/** A PreToolUse hook kept the command from running; the message has its reasons. */
class HookBlockedError extends DshEnvError {}

const classes = {
  DSH_CONTRIBUTOR: ContributorError,
  DSH_EXEC: ExecError,
  DSH_LOAD: RegistrationError,
  DSH_DECLARATION: RegistrationError,
  DSH_CHANGED: RegistrationError,
  DSH_SIGNATURE: RegistrationError,
  DSH_MANIFEST: RegistrationError,
  DSH_DISPOSED: ContributorError,
  DSH_HOOK_BLOCKED: HookBlockedError,
};

/** Characters that could reorder, hide or break a line a person reads: escaped wherever a caller's text is shown. */
const HIDDEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;
const ESCAPES = { '\0': '\\0', '\t': '\\t', '\n': '\\n', '\r': '\\r' };

/** `text` with each such character escaped as the core escapes it (`\n`, `\u{1b}`, `\u{202e}`). */
function escapeControls(text) {
  return text.replace(HIDDEN, (c) => ESCAPES[c] ?? `\\u{${c.codePointAt(0).toString(16)}}`);
}

/**
 * Refuses a key of the options object `options` that `known` does not list,
 * naming it (escaped) and the known ones: a typo would be dropped in silence.
 * Absent options pass; options that are not an object are refused.
 */
function refuseUnknown(what, options, known) {
  if (options === undefined || options === null) return;
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw new DshEnvError({ message: `${what}: expected an object`, code: 'DSH_INVALID_ARGUMENT' });
  }
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) {
      const message = `${what}: unknown option \`${escapeControls(key)}\` (known: ${known.join(', ')})`;
      throw new DshEnvError({ message, code: 'DSH_INVALID_ARGUMENT' });
    }
  }
}

// Each options object, as index.d.ts types it: camelCase, as a caller writes it.
const OPEN_OPTIONS = ['home', 'compiler', 'environment', 'trust', 'manifest', 'hooks'];
const ENVIRONMENT_OPTIONS = ['inherit', 'exclude', 'set', 'includeOnly'];
const TRUST_OPTIONS = ['keys', 'requireSignature'];
const REGISTER_OPTIONS = ['config', 'limits', 'grants', 'onError', 'sha256', 'signature', 'grantsSha256'];
const LIMIT_OPTIONS = [
  'deadlineMs', 'memoryMib', 'fuel', 'maxKeys', 'maxPairs', 'maxValueBytes', 'maxOutputBytes',
  'maxErrorBytes', 'maxLogBytes', 'maxHandles', 'compileTimeoutMs', 'compileCpuMs', 'compileMemoryMib',
];
const GRANT_OPTIONS = ['config', 'env', 'cwd'];
const EXEC_OPTIONS = ['env', 'stdin', 'timeoutMs', 'permissionMode'];

/** The DshEnvError a binding error's `dshEnv` data describes. */
function errorOf(data) {
  const Class = classes[data.code] ?? DshEnvError;
  return new Class(data);
}

/** Rethrows a binding error as the DshEnvError it carries. */
function rethrow(error) {
  if (error instanceof Error && error.message.startsWith('{"dshEnv":')) {
    let data;
    try {
      data = JSON.parse(error.message).dshEnv;
    } catch {
      throw error;
    }
    throw errorOf(data);
  }
  throw error;
}

function guard(call) {
  try {
    const result = call();
    return result instanceof Promise ? result.catch(rethrow) : result;
  } catch (error) {
    rethrow(error);
  }
}

/** `deadlineMs` as a manifest writes it: `deadline_ms`. */
function snakeName(key) {
  return key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/** `{ deadlineMs: 1 }` as a manifest writes it: `{ deadline_ms: 1 }`. */
function snakeCase(object) {
  if (object === undefined || object === null) return object;
  return Object.fromEntries(Object.entries(object).map(([key, value]) => [snakeName(key), value]));
}

/**
 * `execution` as the JSON the addon reads, or a DSH_INVALID_ARGUMENT naming
 * why not. It takes the reference harness's `ToolExecution` as the harness
 * holds it (a live `agent` is not plain data: only its session's header is
 * read; of `arguments`, only the bash tool's `run_in_background`), or the
 * same fields as plain data.
 */
function executionJson(execution) {
  const refuse = (why) => new DshEnvError({ message: `execution: ${why}`, code: 'DSH_INVALID_ARGUMENT' });
  if (typeof execution !== 'object' || execution === null || Array.isArray(execution)) {
    throw refuse(`expected an object, got ${execution === null ? 'null' : Array.isArray(execution) ? 'an array' : typeof execution}`);
  }
  const { callId, rootCallId, name, background, agent } = execution;
  const plain = { callId, rootCallId, name, background };
  const args = execution.arguments;
  if (typeof args === 'object' && args !== null && args.run_in_background === true) {
    plain.arguments = { run_in_background: true };
  }
  if (agent !== undefined && agent !== null) {
    plain.agent = { session: { header: agent.session?.header } };
    // dsh-env's old name, passed on so that the refusal names the new one.
    if (agent.depth !== undefined) plain.agent.depth = agent.depth;
  }
  try {
    return JSON.stringify(plain);
  } catch (error) {
    throw refuse(error.message);
  }
}

/** A contributor registered in a Registry, until dispose(). */
class Registration {
  #native;
  #registry;
  constructor(native, registry) {
    this.#native = native;
    this.#registry = registry;
  }
  /** The contributor's declared name. */
  get name() {
    return this.#native.name;
  }
  /**
   * This contributor alone, synchronously, for one execution: its keys (no
   * built-ins) and its omission under `onError: 'omit'`. It holds the event
   * loop for the call: microseconds for a Rust contributor with an instance
   * made ahead, at most its deadline for one that spins.
   */
  resolveSync(execution) {
    const json = typeof execution === 'string' ? execution : executionJson(execution);
    const result = JSON.parse(guard(() => this.#native.resolveSync(json)));
    this.#registry.prepareSoon();
    return result;
  }
  /** Unregisters it; executions already collecting keep it. Idempotent. */
  dispose() {
    this.#native.dispose();
  }
}

/** Contributors, and the DSH_* overlay they build for each execution. */
class Registry {
  #native;
  /** Whether a preparation is scheduled for after the current answers. */
  #preparing = false;
  constructor(native) {
    this.#native = native;
  }

  /** Opens a registry; `home` defaults to a `manifest`'s, then $DSH_HOME, then ~/.dsh. */
  static open(options = {}) {
    refuseUnknown('open options', options, OPEN_OPTIONS);
    refuseUnknown('environment', options.environment, ENVIRONMENT_OPTIONS);
    refuseUnknown('trust', options.trust, TRUST_OPTIONS);
    const environment = snakeCase(options.environment);
    const trust = snakeCase(options.trust);
    return new Registry(
      guard(() =>
        binding.Registry.open(options.home, options.compiler ?? defaultCompiler(), environment, trust, options.manifest, options.hooks),
      ),
    );
  }

  /** Loads, declares (checked) and registers the component at `path`. */
  async register(path, options = {}) {
    // Named here as the caller wrote them, in camelCase (the addon, which
    // reads them in a manifest's snake_case, refuses an unknown one too).
    refuseUnknown('register options', options, REGISTER_OPTIONS);
    refuseUnknown('register options: limits', options.limits, LIMIT_OPTIONS);
    refuseUnknown('register options: grants', options.grants, GRANT_OPTIONS);
    // NaN and Infinity would cross as null, which reads as "not given": refuse
    // them here; the addon checks the rest (whole, in range).
    for (const [key, value] of Object.entries(options.limits ?? {})) {
      if (value !== undefined && !Number.isFinite(value)) {
        throw new DshEnvError({
          message: `limits.${key} must be a finite number, not ${String(value)}`,
          code: 'DSH_INVALID_ARGUMENT',
          limit: snakeName(key),
        });
      }
    }
    const entry = snakeCase({ ...options, limits: snakeCase(options.limits) });
    for (const key of Object.keys(entry)) if (entry[key] === undefined) delete entry[key];
    return new Registration(await guard(() => this.#native.register(path, entry)), this);
  }

  /** Registers every contributor of a manifest, all or nothing, by its rules. */
  async registerManifest(path) {
    const natives = await guard(() => this.#native.registerManifest(path));
    return natives.map((native) => new Registration(native, this));
  }

  /**
   * Makes the next call's instances in the background, once the caller has
   * gone on with its answer (waking the preparing thread now would cost the
   * caller's thread the microseconds its command is about to use).
   */
  prepareSoon() {
    if (this.#preparing) return;
    this.#preparing = true;
    setImmediate(() => {
      this.#preparing = false;
      this.#native.prepareInBackground();
    });
  }

  /** The harness home: where the compile cache and the store are kept. */
  get home() {
    return this.#native.home;
  }

  /** Every key with its owner and description, sorted; runs no contributor. */
  list() {
    return guard(() => this.#native.list());
  }

  /** Every registered contributor: origin, sha256, signer, grants, on_error. */
  contributors() {
    return guard(() => this.#native.contributors());
  }

  /** How many contributors have an instance made ahead of their next call. */
  prepared() {
    return this.#native.prepared();
  }

  /**
   * Every contributor alone, synchronously, for one execution, as
   * `Registration.resolveSync` gives each: a Map from each contributor's
   * name to `{ overlay, omitted }`, or to `{ error }` (a ContributorError;
   * one contributor's failure does not stop the others). The execution
   * crosses once for all of them: for a registry that asks each contributor
   * in turn within one synchronous collect (the reference harness's
   * `ctx.shellEnv`, through `@dsh-env/node/deepseek-harness`). The next
   * call's instances are made in the background afterwards.
   */
  resolveEachSync(execution) {
    const json = typeof execution === 'string' ? execution : executionJson(execution);
    const each = new Map(Object.entries(JSON.parse(guard(() => this.#native.resolveEach(json)))));
    this.prepareSoon();
    for (const [name, result] of each) {
      if (result.error !== undefined) each.set(name, { error: errorOf(result.error) });
    }
    return each;
  }

  /** The overlay for one execution, and the contributors omitted from it. */
  async collect(execution) {
    // The addon answers at once when nothing had to wait, else with a
    // Promise. After an answer at once, the next call's instances are made
    // in the background, once the caller has gone on with its answer.
    const json = executionJson(execution);
    const result = guard(() => this.#native.collect(json));
    if (typeof result === 'string') {
      this.prepareSoon();
      return JSON.parse(result);
    }
    return JSON.parse(await result);
  }

  /**
   * What the CLI's `explain --json` gives: the overlay with each key's owner
   * and description, the declared keys absent for this execution, the
   * contributors, the omissions, the home, and what `exec` scrubs from this
   * process's environment (names and rules, never values).
   */
  async explain(execution) {
    const json = executionJson(execution);
    const { overlay, omitted, why_absent } = JSON.parse(await guard(() => this.#native.explain(json)));
    const listing = this.list();
    const owned = new Map(listing.map((row) => [row.key, row]));
    const keys = Object.entries(overlay).map(([key, value]) => ({
      key,
      value,
      owner: owned.get(key)?.owner ?? '',
      description: owned.get(key)?.description ?? '',
    }));
    const absent = listing.filter((row) => !Object.hasOwn(overlay, row.key));
    return {
      home: { path: this.#native.home },
      keys,
      absent,
      contributors: this.contributors(),
      omitted,
      why_absent,
      scrubbed: this.#native.scrubbed(),
    };
  }

  /** Collects, then runs `command` with bash in the agent's cwd with the overlay. */
  async exec(execution, command, options = {}) {
    refuseUnknown('exec options', options, EXEC_OPTIONS);
    const json = executionJson(execution);
    const report = await guard(() =>
      this.#native.exec(json, command, options.env, options.stdin, options.timeoutMs, options.permissionMode),
    );
    const result = {
      exitCode: report.exit_code,
      stdout: report.stdout,
      stderr: report.stderr,
      timedOut: report.timed_out,
      truncated: report.truncated,
    };
    if (report.hooks !== undefined) result.hooks = report.hooks;
    return result;
  }
}

module.exports = {
  Registry,
  Registration,
  DshEnvError,
  RegistrationError,
  ContributorError,
  ExecError,
  HookBlockedError,
  executionJson,
  // For the DeepSeek Harness plugin's configuration: the same refusal, worded the same.
  refuseUnknown,
};
