// @dsh-env/node: per-call DSH_* environments from sandboxed WebAssembly
// contributors, for TypeScript agent harnesses.

/**
 * The reference harness's `SessionHeader` (`@deepseek-ai/dsh-session`):
 * `id`, `cwd`, `parentSession` and `delegationDepth` are read; the others
 * pass quietly.
 */
export interface SessionHeader {
  readonly version?: number;
  readonly id: string;
  readonly createdAt?: number;
  /** Absolute; absent when the session has no working directory. */
  readonly cwd?: string;
  /** The session this one was spawned or forked from. */
  readonly parentSession?: string;
  readonly seedLength?: number;
  readonly origin?: 'subagent';
  /** Absent (0) for a top-level session, parent depth + 1 for a child. */
  readonly delegationDepth?: number;
  readonly agentPreset?: string;
}

/**
 * One tool call, in the reference harness's `ToolExecution` shape
 * (`@deepseek-ai/dsh-tools`), live or as plain data: only `callId`,
 * `rootCallId`, `name`, `agent.session.header` and the bash tool's
 * `arguments.run_in_background` are read.
 */
export interface ToolExecution {
  readonly callId: string;
  readonly rootCallId?: string;
  /** The tool's name, e.g. `bash`. */
  readonly name: string;
  readonly arguments?: unknown;
  /** dsh-env's own: run as `mode: background` (as `run_in_background: true` does). */
  readonly background?: boolean;
  readonly agent?: { readonly session: { readonly header: SessionHeader } };
  /** The reference harness's other fields (`token`, `parent`, `signal`) pass quietly. */
  readonly [field: string]: unknown;
}

export interface OpenOptions {
  /** The harness home (default: $DSH_HOME, then ~/.dsh). */
  home?: string;
  /** The `dsh-env-compile` helper (default: $DSH_ENV_COMPILER, then the one beside the addon, then PATH). */
  compiler?: string;
  /** What `exec`'s commands inherit: a manifest's `[environment]`, in camelCase. */
  environment?: EnvironmentPolicy;
  /**
   * Whose signatures are trusted: a manifest's `[trust]`, in camelCase. Every
   * registration passes it.
   */
  trust?: TrustPolicy;
  /**
   * A manifest whose `[trust]` (and `home`, after the `home` option, and
   * `hooks`, after the `hooks` option) the registry takes, so that
   * `registerManifest` can register it.
   */
  manifest?: string;
  /**
   * Hooks whose `PreToolUse` and `PostToolUse` commands run around every
   * `exec`: a hooks.json file (Claude Code's format; relative to the
   * process's cwd) or its document. Checked at once, as the CLI checks one.
   */
  hooks?: string | HooksDocument;
}

/** A hooks.json document, as Claude Code writes one; any other key is refused, naming it. */
export interface HooksDocument {
  /** A plugin's hooks.json may describe itself; not read. */
  description?: string;
  hooks: Partial<
    Record<
      'SessionStart' | 'PreToolUse' | 'PostToolUse',
      Array<{
        /** A tool name, `A|B`, a regular expression, or absent/`*` for all. */
        matcher?: string;
        hooks: Array<{
          type: 'command';
          command: string;
          /** Seconds, 1 to 86400 (default 60). */
          timeout?: number;
          /** Shown by Claude Code and Codex while the hook runs; not read here. */
          statusMessage?: string;
          /** Codex's command for Windows; not read here. */
          commandWindows?: string;
        }>;
      }>
    >
  >;
}

/** A manifest's `[trust]`: the minisign keys trusted to sign contributors. */
export interface TrustPolicy {
  /** Public keys, each the base64 line of a minisign `.pub` file. */
  keys?: string[];
  /** Refuse an unsigned contributor (needs at least one key). */
  requireSignature?: boolean;
}

/**
 * A manifest's `[environment]`, after Codex's `shell_environment_policy`.
 * The credential and `DSH_*` scrubs always apply after it.
 */
export interface EnvironmentPolicy {
  /** `all` (default), `core` (HOME, PATH, USER, ...) or `none`. */
  inherit?: 'all' | 'core' | 'none';
  /** Inherited names removed, by pattern (`*`, `?`; any case). */
  exclude?: string[];
  /** Variables every command gets (never a `DSH_*` name). */
  set?: Record<string, string>;
  /** When not empty, only inherited names matching one of these are kept. */
  includeOnly?: string[];
}

/** A manifest's `[contributor.limits]`, in camelCase. */
export interface Limits {
  deadlineMs?: number;
  memoryMib?: number;
  fuel?: number;
  maxKeys?: number;
  maxPairs?: number;
  maxValueBytes?: number;
  maxOutputBytes?: number;
  maxErrorBytes?: number;
  maxLogBytes?: number;
  maxHandles?: number;
  compileTimeoutMs?: number;
  compileCpuMs?: number;
  compileMemoryMib?: number;
}

/** What a contributor may see; nothing by default. */
export interface Grants {
  /** Static key/values served by `config.get`. */
  config?: Record<string, string>;
  /** Host environment variables copied into the guest, by name. */
  env?: string[];
  /** The agent's cwd, read-only. */
  cwd?: 'read';
}

export interface RegisterOptions {
  config?: Record<string, string>;
  limits?: Limits;
  grants?: Grants;
  /** `fail` (default): the execution fails; `omit`: its keys are left out. */
  onError?: 'fail' | 'omit';
  /** The SHA-256 (hex) the component's bytes must have. */
  sha256?: string;
  /** Its minisign signature file (default: its path plus `.minisig`). */
  signature?: string;
  /** The digest of the grants and config reviewed, as `dsh-env add` pins it; others are refused. */
  grantsSha256?: string;
}

export interface KeyListing {
  key: string;
  /** A contributor's name, or `dsh-env` for the built-ins. */
  owner: string;
  description: string;
}

export type Signer =
  | { status: 'trusted'; key_id: string; trusted_comment: string }
  | { status: 'unverified'; key_id: string | null }
  | { status: 'unsigned' };

export interface ContributorListing {
  name: string;
  origin: string;
  sha256: string | null;
  signer: Signer;
  env_grants: string[];
  cwd_read: boolean;
  on_error: 'fail' | 'omit';
  /** Where its manifest entry is, `manifest.toml:LINE`, if it came from one. */
  declared_at: string | null;
}

/** A contributor whose declared keys are absent, and what its call showed. */
export interface Absence {
  contributor: string;
  /** Its declared keys with no value for this execution. */
  keys: string[];
  /** Its grants in words: `none`, or e.g. `env REGION, cwd (read)`. */
  grants: string;
  declared_at: string | null;
  /** The end of what it wrote to stderr during the call, control sequences stripped. */
  stderr_tail: string | null;
  /** What it looked for without a grant (the cwd, its environment), and the grant that gives it. */
  hints: string[];
}

export interface Collection {
  /** `DSH_*` key to value, sorted by key: the child's managed environment. */
  overlay: Record<string, string>;
  /** Contributors left out under `onError: 'omit'`, each saying why. */
  omitted: string[];
}

export interface Explanation {
  /** The harness home: its cache and store. */
  home: { path: string };
  keys: Array<{ key: string; value: string; owner: string; description: string }>;
  /** Declared keys with no value for this execution. */
  absent: Array<{ key: string; owner: string; description: string }>;
  contributors: ContributorListing[];
  omitted: string[];
  /** Why the absent keys are absent, by contributor, as far as their calls showed. */
  why_absent: Absence[];
  /** What `exec` removes from this process's environment: names and rules, never values. */
  scrubbed: Array<{ name: string; rule: string; reason: string }>;
}

export interface ExecOptions {
  /** Ordinary variables for the child; no `DSH_*` name. */
  env?: Record<string, string>;
  stdin?: string;
  /**
   * Kill the command's process group after this long: whole milliseconds
   * from 1 to 86400000 (a day), default 120000; any other number is refused.
   */
  timeoutMs?: number;
  /** Claude Code's permission mode, sent to hooks as `permission_mode` (absent without it). */
  permissionMode?: 'default' | 'plan' | 'acceptEdits' | 'dontAsk' | 'bypassPermissions';
}

export interface ExecResult {
  /** `null` when a signal ended it. */
  exitCode: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  truncated: boolean;
  /** With hooks: what they said (`additionalContext`; PostToolUse block reasons as feedback). */
  hooks?: { context: string[]; feedback: string[] };
}

export type ErrorCode =
  | 'DSH_INVALID_ARGUMENT'
  | 'DSH_HOME'
  | 'DSH_RUNTIME'
  | 'DSH_LOAD'
  | 'DSH_DECLARATION'
  | 'DSH_CHANGED'
  | 'DSH_SIGNATURE'
  | 'DSH_MANIFEST'
  | 'DSH_CONTRIBUTOR'
  | 'DSH_DISPOSED'
  | 'DSH_EXEC'
  | 'DSH_HOOK_BLOCKED';

/** A dsh-env failure, with a stable `code` and what it names. */
export class DshEnvError extends Error {
  readonly code: ErrorCode;
  readonly contributor?: string;
  readonly key?: string;
  readonly file?: string;
  /** The limit reached, as its manifest field (e.g. `deadline_ms`). */
  readonly limit?: string;
}
/** A registration was refused: the component, its signature or its declaration. */
export class RegistrationError extends DshEnvError {}
/** A contributor failed an execution. */
export class ContributorError extends DshEnvError {}
/** The command could not be run. */
export class ExecError extends DshEnvError {}
/** A PreToolUse hook kept the command from running; the message has its reasons. */
export class HookBlockedError extends DshEnvError {}

/** A contributor registered in a Registry, until `dispose()`. */
export class Registration {
  readonly name: string;
  /**
   * This contributor alone, synchronously (it holds the event loop for the
   * call, at most the contributor's deadline): its keys, no built-ins. The
   * execution may come as `executionJson`'s string, made once for many.
   */
  resolveSync(execution: ToolExecution | string): Collection;
  /** Unregisters it; executions already collecting keep it. Idempotent. */
  dispose(): void;
}

/** Contributors, and the DSH_* overlay they build for each execution. */
export class Registry {
  static open(options?: OpenOptions): Registry;
  register(path: string, options?: RegisterOptions): Promise<Registration>;
  /**
   * Every contributor of a manifest, all or nothing, by its pins and grants;
   * its `[trust]` must be the registry's (open it with `manifest`).
   */
  registerManifest(path: string): Promise<Registration[]>;
  /** Makes the next call's instances in the background, after the current task. */
  prepareSoon(): void;
  /** The harness home: where the compile cache and the store are kept. */
  readonly home: string;
  list(): KeyListing[];
  contributors(): ContributorListing[];
  /**
   * How many contributors have an instance made ahead of their next call.
   * `collect` starts making them in the background when it ends.
   */
  prepared(): number;
  /**
   * Every contributor alone, synchronously, by name: what `resolveSync`
   * gives each, or the ContributorError it failed with (the others still
   * run). The execution crosses once for all: for a registry that asks each
   * contributor in turn within one collect (the reference harness's).
   */
  resolveEachSync(execution: ToolExecution | string): Map<string, Collection | { error: ContributorError }>;
  collect(execution: ToolExecution): Promise<Collection>;
  explain(execution: ToolExecution): Promise<Explanation>;
  exec(execution: ToolExecution, command: string, options?: ExecOptions): Promise<ExecResult>;
}

/** The JSON the addon reads for `execution` (its read fields only). */
export function executionJson(execution: ToolExecution): string;
