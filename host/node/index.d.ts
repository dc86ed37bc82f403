// @dsh-env/node: per-call DSH_* environments from sandboxed WebAssembly
// contributors, for TypeScript agent harnesses.

/** One tool call, in the reference harness's `ToolExecution` shape. */
export interface ToolExecution {
  callId: string;
  rootCallId?: string;
  /** The tool's name, e.g. `bash`. */
  name: string;
  arguments?: unknown;
  background?: boolean;
  agent?: {
    session: { header: { id: string; cwd: string; parentId?: string | null } };
    depth: number;
  };
  /** The reference harness's other fields (e.g. `token`) pass quietly. */
  [field: string]: unknown;
}

export interface OpenOptions {
  /** The harness home (default: $DSH_HOME, then ~/.dsh). */
  home?: string;
  /** The `dsh-env-compile` helper (default: $DSH_ENV_COMPILER, then PATH). */
  compiler?: string;
  /** What `exec`'s commands inherit: a manifest's `[environment]`, in camelCase. */
  environment?: EnvironmentPolicy;
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
}

export interface Collection {
  /** `DSH_*` key to value, sorted by key: the child's managed environment. */
  overlay: Record<string, string>;
  /** Contributors left out under `onError: 'omit'`, each saying why. */
  omitted: string[];
}

export interface Explanation {
  keys: Array<{ key: string; value: string; owner: string; description: string }>;
  contributors: ContributorListing[];
  omitted: string[];
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
}

export interface ExecResult {
  /** `null` when a signal ended it. */
  exitCode: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  truncated: boolean;
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
  | 'DSH_EXEC';

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

/** A contributor registered in a Registry, until `dispose()`. */
export class Registration {
  readonly name: string;
  /** Unregisters it; executions already collecting keep it. Idempotent. */
  dispose(): void;
}

/** Contributors, and the DSH_* overlay they build for each execution. */
export class Registry {
  static open(options?: OpenOptions): Registry;
  register(path: string, options?: RegisterOptions): Promise<Registration>;
  list(): KeyListing[];
  contributors(): ContributorListing[];
  /**
   * How many contributors have an instance made ahead of their next call.
   * `collect` starts making them in the background when it ends.
   */
  prepared(): number;
  collect(execution: ToolExecution): Promise<Collection>;
  explain(execution: ToolExecution): Promise<Explanation>;
  exec(execution: ToolExecution, command: string, options?: ExecOptions): Promise<ExecResult>;
}
