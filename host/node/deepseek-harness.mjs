// @dsh-env/node/deepseek-harness: a DeepSeek Harness (Cordis) plugin that
// registers sandboxed WebAssembly env contributors into the reference
// harness's own `ctx.shellEnv`, so its bash tool gives each command their
// `DSH_*` keys beside the TypeScript contributors'.
//
// The reference's registry is synchronous: its bash tool calls
// `ctx.shellEnv.collect(execution)`, which calls each contributor's
// `resolve(execution)` in turn without awaiting. The first WASM
// contributor's `resolve` in a collect runs every one of this plugin's
// contributors while the calling thread waits (on it, and on a helper
// thread of the addon's when two of them are slow), each in its instance
// made ahead and bounded by its deadline (`Registry.resolveEachSync`: the
// execution crosses into the addon once), and each `resolve` takes its own
// answer.

import { createRequire } from 'node:module';

import z from '@deepseek-ai/schemastery';

const require = createRequire(import.meta.url);
const { Registry, refuseUnknown } = require('./index.js');

/**
 * What `registry`'s contributors resolved for one collect, asked once: each
 * answer is taken once, by its contributor's `resolve`. A `resolve` that
 * finds no answer for its execution (a new collect, or the same execution
 * collected again) asks for a new round.
 */
function answers(registry) {
  let round;
  return (execution, name) => {
    if (round?.execution !== execution || !round.each.has(name)) {
      const made = { execution, each: registry.resolveEachSync(execution) };
      round = made;
      // A collect cut short by a failure leaves answers no one takes.
      queueMicrotask(() => {
        if (round === made) round = undefined;
      });
    }
    const answer = round.each.get(name);
    round.each.delete(name);
    return answer;
  };
}

/** The plugin's name, as the harness's configuration and logs show it. */
export const name = 'dsh-env';

/** It registers into the reference's shell environment registry. */
export const inject = ['shellEnv'];

const Limits = z.object({
  deadlineMs: z.natural(),
  memoryMib: z.natural(),
  fuel: z.natural(),
  maxKeys: z.natural(),
  maxPairs: z.natural(),
  maxValueBytes: z.natural(),
  maxOutputBytes: z.natural(),
  maxErrorBytes: z.natural(),
  maxLogBytes: z.natural(),
  maxHandles: z.natural(),
  compileTimeoutMs: z.natural(),
  compileCpuMs: z.natural(),
  compileMemoryMib: z.natural(),
});

const Contributor = z.object({
  path: z.string().required().description('The component (.wasm), relative to the harness\'s working directory.'),
  sha256: z.string().description('The SHA-256 (hex) its bytes must have, as `dsh-env add` pins it.'),
  signature: z.string().description('Its minisign signature file (default: <path>.minisig).'),
  config: z.dict(z.string()).description('Static values served by `config.get`.'),
  limits: Limits.description('Its limits (deadline, memory, fuel, output caps).'),
  grants: z.object({
    env: z.array(z.string()).description('Host environment variables copied into the guest, by name.'),
    cwd: z.union(['read']).description('The agent\'s cwd, read-only.'),
  }).description('What it may see; nothing by default.'),
  onError: z.union(['fail', 'omit']).description('`fail` (default): the tool call fails; `omit`: its keys are left out.'),
});

/** The plugin's configuration: a manifest, contributors, or both. */
export const Config = z.object({
  manifest: z.string().description('A dsh-env manifest (TOML): its contributors, pins, grants, limits and [trust].'),
  contributors: z.array(Contributor).description('Contributors listed here rather than in a manifest.'),
  home: z.string().description('The dsh-env home (compile cache, store); default $DSH_HOME, then ~/.dsh.'),
  compiler: z.string().description('The `dsh-env-compile` helper; default $DSH_ENV_COMPILER, then the one beside the addon, then PATH.'),
});

/**
 * Refuses, anywhere in `value`, a key that `schema` (an object of this
 * plugin's, or an array of them) does not declare, naming it, where it is
 * and the known ones. Schemastery keeps an unknown key, and nothing reads
 * it: a misspelt `contributor:` would load no contributor, in silence. A
 * dict (`config`) is the user's names, open.
 */
function refuseUnknownKeys(schema, value, path = '') {
  if (schema.type === 'object') {
    refuseUnknown(path ? `dsh-env config: ${path}` : 'dsh-env config', value, Object.keys(schema.dict));
    for (const [key, inner] of Object.entries(schema.dict)) {
      if (value?.[key] !== undefined) refuseUnknownKeys(inner, value[key], path ? `${path}.${key}` : key);
    }
  } else if (schema.type === 'array' && Array.isArray(value)) {
    value.forEach((item, index) => refuseUnknownKeys(schema.inner, item, `${path}[${index}]`));
  }
}

/**
 * Registers every configured contributor, all or nothing, into
 * `ctx.shellEnv` with its declared keys and descriptions. Unloading the
 * plugin disposes every registration, in dsh-env and in `ctx.shellEnv`.
 */
export async function apply(ctx, config = {}) {
  refuseUnknownKeys(Config, config);
  const registry = Registry.open({ home: config.home, compiler: config.compiler, manifest: config.manifest });
  const registrations = [];
  ctx.effect(() => () => {
    for (const registration of registrations) registration.dispose();
  }, 'dsh-env registrations');
  if (config.manifest !== undefined) registrations.push(...(await registry.registerManifest(config.manifest)));
  for (const { path, ...options } of config.contributors ?? []) {
    registrations.push(await registry.register(path, options));
  }
  const keys = registry.list();
  const answer = answers(registry);
  for (const registration of registrations) {
    const variables = Object.fromEntries(
      keys.filter((row) => row.owner === registration.name).map((row) => [row.key, { description: row.description }]),
    );
    ctx.shellEnv.register({
      name: registration.name,
      variables,
      resolve(execution) {
        // None when it is no longer registered in dsh-env: resolveSync says so.
        const { overlay, omitted, error } = answer(execution, registration.name) ?? registration.resolveSync(execution);
        if (error !== undefined) throw error;
        for (const message of omitted) process.emitWarning(message, 'DshEnvOmitted');
        return overlay;
      },
    });
  }
}
