// @dsh-env/node/deepseek-harness: sandboxed WebAssembly env contributors in
// DeepSeek Harness's `ctx.shellEnv`.
import type { Grants, Limits } from './index.js';

/** The plugin's name. */
export declare const name = 'dsh-env';
/** It registers into `ctx.shellEnv` (`@deepseek-ai/dsh-shell-env`). */
export declare const inject: string[];

/** One contributor, as a manifest's `[[contributor]]` entry, in camelCase. */
export interface ContributorConfig {
  /** The component (.wasm), relative to the harness's working directory. */
  path: string;
  /** The SHA-256 (hex) its bytes must have. */
  sha256?: string;
  /** Its minisign signature file (default: `<path>.minisig`). */
  signature?: string;
  /** Static values served by `config.get`. */
  config?: Record<string, string>;
  limits?: Limits;
  grants?: Grants;
  /** `fail` (default): the tool call fails; `omit`: its keys are left out. */
  onError?: 'fail' | 'omit';
}

/** The plugin's configuration: a manifest, contributors, or both. */
export interface Config {
  /** A dsh-env manifest: its contributors, pins, grants, limits and `[trust]`. */
  manifest?: string;
  /** Contributors listed here rather than in a manifest. */
  contributors?: ContributorConfig[];
  /** The dsh-env home (compile cache, store); default `$DSH_HOME`, then `~/.dsh`. */
  home?: string;
  /** The `dsh-env-compile` helper; default `$DSH_ENV_COMPILER`, then the one beside the addon, then `PATH`. */
  compiler?: string;
}

/** The plugin's configuration schema (schemastery). */
export declare const Config: unknown;

/**
 * Registers every configured contributor into `ctx.shellEnv`, all or
 * nothing; unloading the plugin disposes them.
 */
export declare function apply(ctx: { shellEnv: unknown; effect: unknown }, config?: Config): Promise<void>;
