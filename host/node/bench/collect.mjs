// The addon's cost on a TypeScript harness's path, in one Node process:
//   floor    an empty async function awaited (the Promise round trip);
//   builtin  collect() through the addon with no contributor (built-ins only);
//   addon    collect() through the addon with 1 Rust contributor (agent-lineage),
//            its instance made ahead (untimed, as while a harness's command
//            runs between calls: the Rust bench's caller's path);
//   addon-b2b the same back to back, making the instance on the caller's
//            path when the background preparation has not finished;
//   js       a plain in-process JavaScript resolver computing the same keys,
//            unsandboxed (the reference harness's way);
//   hook     a hook process per call printing the same keys (sh -c);
//   harness-ts  the reference harness's registry (`ctx.shellEnv.collect`,
//            synchronous) with a native TypeScript contributor computing
//            agent-lineage's keys;
//   harness-wasm the same registry with agent-lineage through the
//            @dsh-env/node/deepseek-harness plugin (`resolveSync`);
//   harness-ts-git the same registry with a TypeScript contributor
//            computing git-context's key (DSH_GIT_BRANCH, from the cwd's
//            .git/HEAD);
//   harness-six the same registry with the six example contributors
//            (contributors/examples.toml: Rust, Python, JS, C) through the
//            plugin;
//   tool-none / tool-six / tool-wasm-8 a real bash tool call through the
//            reference's tool runtime, bash tool and local executor, with no
//            plugin contributor, with the six examples, and with 8 Rust
//            contributors (agent-lineage and 7 echo guests) through the
//            plugin;
//   hook-claude-code / hook-codex / hook-gemini  the agent CLIs' per-call
//            hook with the six examples: the command `dsh-env setup <harness>`
//            wrote, started as the harness starts it (`sh -c`, the hook input
//            on stdin), from process start to its answer: answered by the
//            hook server the first call started (the six kept loaded);
//   hook-claude-code-alone  the same with DSH_ENV_HOOK_SERVER=off: each
//            hook process opens the manifest and loads the six itself;
//   opencode-plugin  the plugin `dsh-env setup opencode` wrote, imported and
//            called as OpenCode calls its `shell.env` hook: one `dsh-env serve`
//            kept alive across calls.
// The harness-* rows wait 1 ms (untimed) between calls, as a harness runs
// its command between two collects: the next call's instances are made then.
// Ratios are against `js` and `hook` in the same run; never a timed assertion.
// Run after `npm run build`: `node bench/collect.mjs [--json] [--profile perf] [--agent-clis]`
// (`--agent-clis`: only the agent CLIs' rows, first in a full run too)
// (`--profile`: the cargo profile whose `dsh-env` and compile helper it
// uses, as the addon beside index.js was built; default `debug`).
import { execFile, execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { Context } from '@deepseek-ai/cordis';
import { LocalBashExecutor } from '@deepseek-ai/dsh-bash-local';
import * as ShellEnv from '@deepseek-ai/dsh-shell-env';
import { LocalSubprocessRuntime } from '@deepseek-ai/dsh-subprocess-local';
import { SystemPrompt } from '@deepseek-ai/dsh-system-prompt';
import * as ToolBash from '@deepseek-ai/dsh-tool-bash';
import { ToolRuntime } from '@deepseek-ai/dsh-tools';

import * as DshEnv from '../deepseek-harness.mjs';
import { execution, guest, openRegistry, target } from '../test/fixture.mjs';

const run = promisify(execFile);
const profile = process.argv.includes('--profile') ? process.argv[process.argv.indexOf('--profile') + 1] : 'debug';
/** The agent CLIs whose per-call hook is a command `dsh-env setup` writes. */
const hookHarnesses = ['claude-code', 'codex', 'gemini'];
const examples = resolve(fileURLToPath(new URL('.', import.meta.url)), '../../../contributors/examples.toml');

/** p50 and p99 of `call`, timed; `between` runs untimed after each call. */
async function measure(name, iterations, call, between = async () => {}) {
  for (let i = 0; i < Math.min(200, iterations); i++) {
    await call(i);
    await between();
  }
  const samples = [];
  for (let i = 0; i < iterations; i++) {
    const start = process.hrtime.bigint();
    await call(i);
    samples.push(Number(process.hrtime.bigint() - start) / 1000);
    await between();
  }
  samples.sort((a, b) => a - b);
  const at = (q) => samples[Math.min(samples.length - 1, Math.floor(q * samples.length))];
  return { name, iterations, p50: at(0.5), p99: at(0.99) };
}

// Made before timing, as a harness has its execution before it collects
// (`execution` reads os.tmpdir(), five syscalls, which is not collect's cost).
// One home whose cache holds Cranelift's code for the guests, as a harness's
// has after its first minutes: a fresh home would time Winch's code (the
// addon's registries tier up in the background) for as long as Cranelift
// takes, which made runs differ by 2x. `dsh-env check` compiles with Cranelift.
const home = mkdtempSync(join(tmpdir(), 'dsh-env-bench-'));
for (const name of ['agent_lineage', 'echo']) {
  execFileSync(join(target, profile, 'dsh-env'), ['check', guest(name), '--home', home], { stdio: 'ignore' });
}
execFileSync(join(target, profile, 'dsh-env'), ['list', '--manifest', examples, '--home', home], { stdio: 'ignore' });

// The agent CLIs' rows first, while this process is small: the harness's
// own cost of starting a process (a fork of a big process is slower) is
// not the hook's, and this process holds registries' reservations later.
const agentRows = await agentCliRows();
if (process.argv.includes('--agent-clis')) {
  for (const row of agentRows) console.log(`| ${row.name} | ${row.iterations} | ${row.p50.toFixed(1)} | ${row.p99.toFixed(1)} |`);
  process.exit(0);
}

const made = Array.from({ length: 20200 }, (_, i) => execution(`call-${i}`, 'child', 'parent'));
const calls = (i) => made[i];
const empty = openRegistry({ home });
const registry = openRegistry({ home });
await registry.register(guest('agent_lineage'));

/** The keys agent-lineage computes, in plain JavaScript. */
async function jsResolver(call) {
  const header = call.agent?.session.header;
  const pairs = { DSH_AGENT_DEPTH: String(header?.delegationDepth ?? 0) };
  if (header?.parentSession) pairs.DSH_PARENT_SESSION_ID = header.parentSession;
  return pairs;
}

/** Waits until `registry`'s contributors have their next instances. */
async function prepared(registry, contributors) {
  for (let turn = 0; registry.prepared() < contributors; turn++) {
    if (turn > 100000) throw new Error('the background preparation never finished');
    await new Promise((resolve) => setImmediate(resolve));
  }
}

const rows = [
  await measure('floor', 20000, async () => {}),
  await measure('builtin', 5000, (i) => empty.collect(calls(i))),
  await measure('addon', 5000, (i) => registry.collect(calls(i)), () => prepared(registry, 1)),
  await measure('addon-b2b', 5000, (i) => registry.collect(calls(i))),
  await measure('js', 20000, (i) => jsResolver(calls(i))),
  await measure('hook', 200, () =>
    run('/bin/sh', ['-c', 'printf "DSH_PARENT_SESSION_ID=%s\\nDSH_AGENT_DEPTH=1\\n" parent'], {
      cwd: mkdtempSync(join(tmpdir(), 'dsh-hook-')),
    }),
  ),
];
rows.push(...(await harnessRows()));
rows.push(...agentRows);
const by = Object.fromEntries(rows.map((row) => [row.name, row]));
const verdict = {
  addon_p50_us: by.addon.p50,
  addon_within_50us: by.addon.p50 <= 50,
  hook_over_addon: by.hook.p50 / by.addon.p50,
  addon_20x_faster_than_hook: by.hook.p50 / by.addon.p50 >= 20,
  addon_over_js: by.addon.p50 / by.js.p50,
  addon_over_floor: by.addon.p50 / by.floor.p50,
  addon_b2b_p50_us: by['addon-b2b'].p50,
  harness_wasm_over_ts: by['harness-wasm'].p50 / by['harness-ts'].p50,
  sync_path_own_p50_us: by['harness-wasm'].p50 - by['harness-ts'].p50,
  sync_path_within_15us: by['harness-wasm'].p50 - by['harness-ts'].p50 <= 15,
  harness_six_over_ts_git: by['harness-six'].p50 / by['harness-ts-git'].p50,
  harness_six_within_3x_ts_git: by['harness-six'].p50 / by['harness-ts-git'].p50 <= 3,
  tool_six_over_none: by['tool-six'].p50 / by['tool-none'].p50,
  tool_six_within_1_05: by['tool-six'].p50 / by['tool-none'].p50 <= 1.05,
  tool_wasm_8_over_none: by['tool-wasm-8'].p50 / by['tool-none'].p50,
  tool_wasm_8_within_1_05: by['tool-wasm-8'].p50 / by['tool-none'].p50 <= 1.05,
  hook_p50_ms: Object.fromEntries(hookHarnesses.map((h) => [h, by[`hook-${h}`].p50 / 1000])),
  hooks_within_10ms: hookHarnesses.every((h) => by[`hook-${h}`].p50 <= 10_000),
  hook_alone_over_server: by['hook-claude-code-alone'].p50 / by['hook-claude-code'].p50,
  opencode_plugin_p50_ms: by['opencode-plugin'].p50 / 1000,
  opencode_plugin_within_10ms: by['opencode-plugin'].p50 <= 10_000,
};
if (process.argv.includes('--json')) {
  console.log(JSON.stringify({ rows, verdict }));
} else {
  console.log('| row | iterations | p50 µs | p99 µs |');
  console.log('|---|---|---|---|');
  for (const row of rows) console.log(`| ${row.name} | ${row.iterations} | ${row.p50.toFixed(1)} | ${row.p99.toFixed(1)} |`);
  console.log(verdict);
}

/** A context wired as the reference harness wires bash tool calls, with no model. */
async function harness(home) {
  const ctx = new Context();
  ctx.plugin(SystemPrompt);
  ctx.plugin(ToolRuntime);
  ctx.plugin(LocalSubprocessRuntime);
  ctx.plugin(ShellEnv, { dshHome: home });
  ctx.plugin(LocalBashExecutor, { timeoutMs: 30_000 });
  ctx.plugin(ToolBash);
  await ctx.plugin({ name: 'ready', inject: ['tools', 'shellEnv'], apply() {} });
  return ctx;
}

/** The reference harness's rows: its synchronous registry, and whole bash tool calls. */
async function harnessRows() {
  const compiler = join(target, profile, 'dsh-env-compile');
  const lineage = { path: guest('agent_lineage') };
  const echoes = Array.from({ length: 7 }, (_, i) => ({ path: guest('echo'), config: { name: `echo-${i}`, key: `DSH_ECHO_${i}` } }));
  // The agent works in a git checkout on `feature-x`, for git-context.
  const workdir = mkdtempSync(join(tmpdir(), 'dsh-env-bench-work-'));
  mkdirSync(join(workdir, '.git'));
  writeFileSync(join(workdir, '.git/HEAD'), 'ref: refs/heads/feature-x\n');
  const live = (call) => {
    const header = { ...call.agent.session.header, cwd: workdir };
    return { ...call, agent: { session: { header } }, signal: new AbortController().signal };
  };

  const ts = await harness(home);
  ts.shellEnv.register({
    name: 'agent-lineage-ts',
    variables: { DSH_PARENT_SESSION_ID: { description: 'parent' }, DSH_AGENT_DEPTH: { description: 'depth' } },
    resolve(call) {
      const header = call.agent?.session.header;
      const pairs = { DSH_AGENT_DEPTH: String(header?.delegationDepth ?? 0) };
      if (header?.parentSession) pairs.DSH_PARENT_SESSION_ID = header.parentSession;
      return pairs;
    },
  });
  const tsGit = await harness(home);
  tsGit.shellEnv.register({
    name: 'git-context-ts',
    variables: { DSH_GIT_BRANCH: { description: 'branch' } },
    resolve(call) {
      const cwd = call.agent?.session.header.cwd;
      if (cwd === undefined) return {};
      let head;
      try {
        head = readFileSync(join(cwd, '.git/HEAD'), 'utf8');
      } catch {
        return {};
      }
      const branch = head.trim().startsWith('ref: refs/heads/') ? head.trim().slice('ref: refs/heads/'.length) : '';
      return branch ? { DSH_GIT_BRANCH: branch } : {};
    },
  });
  const wasm = await harness(home);
  await wasm.plugin(DshEnv, { home, compiler, contributors: [lineage] });
  const sixCtx = await harness(home);
  await sixCtx.plugin(DshEnv, { home, compiler, manifest: examples });
  const synced = Array.from({ length: 5200 }, (_, i) => live(execution(`sync-${i}`, 'child', 'parent')));
  const seen = sixCtx.shellEnv.collect(synced[0]);
  for (const key of ['DSH_PARENT_SESSION_ID', 'DSH_TRACEPARENT', 'DSH_GIT_BRANCH', 'DSH_SESSION_URL', 'DSH_CALL_MODE', 'DSH_WORKSPACE_ID']) {
    if (!seen[key]) throw new Error(`the six examples gave no ${key}: ${JSON.stringify(seen)}`);
  }
  // Untimed between calls: the next call's instances are made while a
  // harness's command runs.
  const settle = () => new Promise((resolve) => setTimeout(resolve, 1));

  const none = await harness(home);
  const six = await harness(home);
  await six.plugin(DshEnv, { home, compiler, manifest: examples });
  const eight = await harness(home);
  await eight.plugin(DshEnv, { home, compiler, contributors: [lineage, ...echoes] });
  const tool = (ctx) => (i) =>
    ctx.tools.execute({
      ...live(execution(`tool-${i}`, 'child', 'parent')),
      name: 'bash',
      arguments: { command: 'true', description: 'bench' },
    });
  // Alternated, so that every row sees the same machine.
  const toolRows = { none: [], six: [], eight: [] };
  for (let round = 0; round < 5; round++) {
    toolRows.none.push(await measure('tool-none', 200, tool(none), settle));
    toolRows.six.push(await measure('tool-six', 200, tool(six), settle));
    toolRows.eight.push(await measure('tool-wasm-8', 200, tool(eight), settle));
  }
  const median = (list) => {
    const sorted = [...list].sort((a, b) => a.p50 - b.p50);
    return sorted[Math.floor(sorted.length / 2)];
  };
  return [
    await measure('harness-ts', 5000, (i) => ts.shellEnv.collect(synced[i]), settle),
    await measure('harness-wasm', 5000, (i) => wasm.shellEnv.collect(synced[i]), settle),
    await measure('harness-ts-git', 5000, (i) => tsGit.shellEnv.collect(synced[i]), settle),
    await measure('harness-six', 5000, (i) => sixCtx.shellEnv.collect(synced[i]), settle),
    median(toolRows.none),
    median(toolRows.six),
    median(toolRows.eight),
  ];
}

/**
 * The agent CLIs' rows: each harness's configuration written by `dsh-env
 * setup` into a scratch home, then the hook it names run per call as the
 * harness runs it. The six examples, their code compiled (warm cache).
 */
async function agentCliRows() {
  const dshEnv = join(target, profile, 'dsh-env');
  const user = mkdtempSync(join(tmpdir(), 'dsh-env-bench-user-'));
  const env = { ...process.env, HOME: user, CODEX_HOME: join(user, '.codex'), XDG_CONFIG_HOME: join(user, '.config') };
  const setup = (harness) =>
    execFileSync(dshEnv, ['setup', harness, '--manifest', examples, '--home', home], { env, stdio: ['ignore', 'ignore', 'inherit'] });
  const configs = {
    'claude-code': join(user, '.claude/settings.json'),
    codex: join(user, '.codex/hooks.json'),
    gemini: join(user, '.gemini/settings.json'),
  };
  const workdir = mkdtempSync(join(tmpdir(), 'dsh-env-bench-cli-'));
  const inputs = {
    'claude-code': (i) => ({
      session_id: 'bench-claude', transcript_path: '/t.jsonl', cwd: workdir, hook_event_name: 'PreToolUse',
      tool_name: 'Bash', tool_input: { command: 'true', description: 'bench' }, tool_use_id: `toolu_${i}`,
    }),
    codex: (i) => ({
      session_id: 'bench-codex', turn_id: 't', transcript_path: null, cwd: workdir, hook_event_name: 'PreToolUse',
      model: 'm', permission_mode: 'default', tool_name: 'Bash', tool_input: { command: 'true' }, tool_use_id: `call_${i}`,
    }),
    gemini: () => ({
      session_id: 'bench-gemini', transcript_path: '/t', cwd: workdir, hook_event_name: 'BeforeTool',
      timestamp: '2026-12-05T00:00:00Z', tool_name: 'run_shell_command', tool_input: { command: 'true', dir_path: '.' },
    }),
  };
  const rows = [];
  for (const harness of hookHarnesses) {
    setup(harness);
    const command = hookCommand(JSON.parse(readFileSync(configs[harness], 'utf8')));
    const once = async (i) => {
      const answer = await spawnWithInput('/bin/sh', ['-c', command], JSON.stringify(inputs[harness](i)), { env, cwd: workdir });
      if (!answer.includes('DSH_TRACEPARENT')) throw new Error(`${harness}'s hook gave no overlay: ${answer}`);
    };
    rows.push(await measure(`hook-${harness}`, 200, once));
  }
  {
    const command = hookCommand(JSON.parse(readFileSync(configs['claude-code'], 'utf8')));
    const alone = { ...env, DSH_ENV_HOOK_SERVER: 'off' };
    const input = inputs['claude-code'];
    rows.push(
      await measure('hook-claude-code-alone', 200, async (i) => {
        const answer = await spawnWithInput('/bin/sh', ['-c', command], JSON.stringify(input(i)), { env: alone, cwd: workdir });
        if (!answer.includes('DSH_TRACEPARENT')) throw new Error(`the hook gave no overlay: ${answer}`);
      }),
    );
  }
  // The hook servers exit when their socket goes.
  rmSync(join(home, 'run'), { recursive: true, force: true });

  setup('opencode');
  const { DshEnv: plugin } = await import(join(user, '.config/opencode/plugin/dsh-env.js'));
  const hooks = await plugin();
  // The plugin unrefs its server, as OpenCode's exit must not wait for it:
  // this keeps the bench's process alive while it waits for an answer.
  const alive = setInterval(() => {}, 1000);
  const shellEnv = async (i) => {
    const output = { env: {} };
    await hooks['shell.env']({ sessionID: 'bench-opencode', callID: `call_${i}`, cwd: workdir }, output);
    if (!output.env.DSH_TRACEPARENT) throw new Error(`the OpenCode plugin gave no overlay: ${JSON.stringify(output)}`);
  };
  rows.push(await measure('opencode-plugin', 2000, shellEnv));
  await hooks.dispose();
  clearInterval(alive);
  return rows;
}

/** The `dsh-env hook` command in a harness's configuration document. */
function hookCommand(document) {
  if (typeof document === 'string') return document.includes(' hook ') ? document : undefined;
  if (document === null || typeof document !== 'object') return undefined;
  for (const value of Object.values(document)) {
    const found = hookCommand(value);
    if (found) return found;
  }
  return undefined;
}

/** Runs `file` with `input` on its stdin; resolves to its stdout, rejects on a failure. */
function spawnWithInput(file, args, input, options) {
  return new Promise((resolve, reject) => {
    const child = execFile(file, args, options, (error, stdout, stderr) =>
      error ? reject(new Error(`${error.message}${stderr}`)) : resolve(stdout),
    );
    child.stdin.end(input);
  });
}
