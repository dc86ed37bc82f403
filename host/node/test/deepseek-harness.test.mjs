// The DeepSeek Harness plugin (@dsh-env/node/deepseek-harness) inside the
// reference harness itself: the published @deepseek-ai packages, wired as
// the harness wires them, running real `bash` tool calls.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { execFileSync } from 'node:child_process';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { Context } from '@deepseek-ai/cordis';
import { load as loadYaml } from 'js-yaml';
import { LocalBashExecutor } from '@deepseek-ai/dsh-bash-local';
import * as ShellEnv from '@deepseek-ai/dsh-shell-env';
import { LocalSubprocessRuntime } from '@deepseek-ai/dsh-subprocess-local';
import { SystemPrompt } from '@deepseek-ai/dsh-system-prompt';
import * as ToolBash from '@deepseek-ai/dsh-tool-bash';
import { ToolRuntime } from '@deepseek-ai/dsh-tools';

import * as DshEnv from '@dsh-env/node/deepseek-harness';

import { guest, target } from './fixture.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const examples = resolve(here, '../../../contributors/examples.toml');
const compiler = join(target, 'debug/dsh-env-compile');
// One home for the file: the examples compile once, then map from its cache.
const home = mkdtempSync(join(tmpdir(), 'dsh-env-harness-'));

// A session's working directory: a git checkout on `feature-x`, for git-context.
const workdir = mkdtempSync(join(tmpdir(), 'dsh-env-harness-work-'));
mkdirSync(join(workdir, '.git'));
writeFileSync(join(workdir, '.git/HEAD'), 'ref: refs/heads/feature-x\n');

/** A harness context as the reference wires one for bash tool calls, with no model. */
async function harness() {
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

/** The reference's `SessionHeader`: a top-level session, or a spawned child of `parent`. */
function header(id, parent) {
  const made = { version: 1, id, createdAt: Date.now(), cwd: workdir };
  return parent === undefined ? made : { ...made, parentSession: parent, origin: 'subagent', delegationDepth: 1 };
}

/** A live agent as the reference hands one to tools: not plain data. */
function agent(sessionHeader) {
  const live = { id: sessionHeader.id, session: { header: sessionHeader } };
  live.session.agent = live;
  return live;
}

let calls = 0;
/** Runs `command` through the reference's bash tool; its stdout, or the tool's error. */
async function bash(ctx, command, sessionHeader, extra = {}) {
  const result = await ctx.tools.execute({
    callId: `call-${++calls}`,
    name: 'bash',
    arguments: { command, description: 'test', ...extra },
    ...(sessionHeader ? { agent: agent(sessionHeader) } : {}),
    signal: new AbortController().signal,
  });
  const text = result.content.map((part) => part.text ?? '').join('');
  return { error: result.isError, text, stdout: result.value?.stdout?.text ?? text };
}

/** `KEY=value` lines as an object. */
const envOf = (text) => Object.fromEntries(text.trim().split('\n').filter(Boolean).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));

const stale = { DSH_STALE_AMBIENT: 'stale', DSH_PARENT_SESSION_ID: 'stale-parent' };
before(() => Object.assign(process.env, stale));
after(() => {
  for (const key of Object.keys(stale)) delete process.env[key];
});

test('every example contributor, in every language, reaches a parent and a spawned child bash call', async () => {
  const ctx = await harness();
  await ctx.plugin(DshEnv, { manifest: examples, home, compiler });
  const owners = Object.fromEntries(ctx.shellEnv.list().map((row) => [row.key, row.contributor]));
  for (const [key, owner] of Object.entries({
    DSH_PARENT_SESSION_ID: 'agent-lineage',
    DSH_AGENT_DEPTH: 'agent-lineage',
    DSH_TRACEPARENT: 'call-trace',
    DSH_GIT_BRANCH: 'git-context',
    DSH_SESSION_URL: 'session-url',
    DSH_CALL_MODE: 'call-context',
    DSH_ROOT_CALL_ID: 'call-context',
    DSH_WORKSPACE_ID: 'workspace-id',
  })) {
    assert.equal(owners[key], owner, `${key} in list()`);
  }

  const parent = header('parent-session');
  const child = header('child-session', parent.id);
  const [seenByParent, seenByChild] = await Promise.all([
    bash(ctx, 'env | grep ^DSH_ | sort', parent),
    bash(ctx, 'env | grep ^DSH_ | sort', child),
  ]);
  assert.equal(seenByParent.error, false, seenByParent.text);
  assert.equal(seenByChild.error, false, seenByChild.text);
  const [p, c] = [envOf(seenByParent.stdout), envOf(seenByChild.stdout)];

  assert.equal(p.DSH_SESSION_ID, 'parent-session');
  assert.equal(p.DSH_AGENT_DEPTH, '0');
  assert.equal(p.DSH_PARENT_SESSION_ID, undefined, 'a top-level agent has no parent, and no stale one');
  assert.equal(c.DSH_SESSION_ID, 'child-session');
  assert.equal(c.DSH_PARENT_SESSION_ID, 'parent-session');
  assert.equal(c.DSH_AGENT_DEPTH, '1');
  for (const seen of [p, c]) {
    assert.equal(seen.DSH_HOME, home);
    assert.equal(seen.DSH_SHELL, '1');
    assert.equal(seen.DSH_GIT_BRANCH, 'feature-x');
    assert.match(seen.DSH_TRACEPARENT, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    assert.equal(seen.DSH_SESSION_URL, `https://agents.example.test/sessions/${seen.DSH_SESSION_ID}`);
    assert.equal(seen.DSH_CALL_MODE, 'foreground');
    assert.ok(seen.DSH_ROOT_CALL_ID?.startsWith('call-'), seen.DSH_ROOT_CALL_ID);
    assert.match(seen.DSH_WORKSPACE_ID, /\S/);
    assert.equal(seen.DSH_STALE_AMBIENT, undefined);
  }

  // The bash tool's run_in_background is what a contributor sees as the mode.
  const background = ctx.shellEnv.collect({
    callId: 'bg-1',
    rootCallId: 'bg-1',
    name: 'bash',
    arguments: { command: 'sleep 1', description: 'bg', run_in_background: true },
    agent: agent(parent),
    signal: new AbortController().signal,
  });
  assert.equal(background.DSH_CALL_MODE, 'background');

  // A header without cwd (the reference makes it optional) still resolves.
  const { cwd: _, ...noCwd } = parent;
  const collected = ctx.shellEnv.collect({ callId: 'c', rootCallId: 'c', name: 'bash', arguments: {}, agent: agent(noCwd), signal: new AbortController().signal });
  assert.equal(collected.DSH_SESSION_ID, 'parent-session');
  assert.equal(collected.DSH_GIT_BRANCH, undefined);
  // workspace-id (C) targets contract 0.1, whose cwd is a string: it is
  // told "", and hashes that (FNV-1a 64 of no bytes).
  assert.equal(collected.DSH_WORKSPACE_ID, 'cbf29ce48422');
  await ctx.dispose?.();
});

test('the reference\'s rules hold through the plugin: undeclared keys and failures fail the call', async () => {
  const ctx = await harness();
  await ctx.plugin(DshEnv, {
    home,
    compiler,
    contributors: [
      { path: guest('puppet'), config: { name: 'liar', keys: 'DSH_SAID=what it says', pairs: 'DSH_UNDECLARED=x' } },
    ],
  });
  const lied = await bash(ctx, 'echo ran', header('s1'));
  assert.equal(lied.error, true);
  assert.match(lied.text, /liar/);
  assert.match(lied.text, /DSH_UNDECLARED/);
  assert.doesNotMatch(lied.text, /^ran$/m, 'the command must not run');

  const failing = await harness();
  await failing.plugin(DshEnv, {
    home,
    compiler,
    contributors: [{ path: guest('puppet'), config: { name: 'crasher', keys: 'DSH_CRASH=never', resolve: 'trap:boom' } }],
  });
  const crashed = await bash(failing, 'echo ran', header('s1'));
  assert.equal(crashed.error, true);
  assert.match(crashed.text, /crasher/);
  assert.match(crashed.text, /boom/);

  // The same failure through the registry's collect is an Error naming contributor and key.
  assert.throws(
    () => ctx.shellEnv.collect({ callId: 'c', rootCallId: 'c', name: 'bash', arguments: {}, signal: new AbortController().signal }),
    (error) => error instanceof Error && error.contributor === 'liar' && error.key === 'DSH_UNDECLARED',
  );
});

test('a key the plugin does not know fails the load, naming it and the known ones, and registers nothing', async () => {
  const lineage = guest('agent_lineage');
  const manifest = join(mkdtempSync(join(tmpdir(), 'dsh-env-harness-keys-')), 'dsh-env.toml');
  writeFileSync(manifest, `[[contributor]]\npath = ${JSON.stringify(lineage)}\n`);
  const top = 'known: manifest, contributors, home, compiler';
  for (const [config, why] of [
    [{ contributor: [{ path: lineage }] }, `dsh-env config: unknown option \`contributor\` (${top})`],
    [{ manifests: manifest }, `dsh-env config: unknown option \`manifests\` (${top})`],
    [
      { manifest, contributors: [{ path: lineage, limits: { deadline: 5 } }] },
      'dsh-env config: contributors[0].limits: unknown option `deadline` (known: deadlineMs, memoryMib, ',
    ],
    [
      { contributors: [{ path: lineage, grant: { cwd: 'read' } }] },
      'dsh-env config: contributors[0]: unknown option `grant` (known: path, sha256, signature, config, limits, grants, onError)',
    ],
    [{ 'home\u202e': home }, `dsh-env config: unknown option \`home\\u{202e}\` (${top})`],
  ]) {
    const ctx = await harness();
    const load = ctx.plugin(DshEnv, { home, compiler, ...config });
    await assert.rejects(async () => await load, (error) => {
      assert.equal(error.code, 'DSH_INVALID_ARGUMENT', String(error));
      assert.ok(error.message.startsWith(why), `${error.message}\n  does not start with\n${why}`);
      return true;
    });
    assert.equal(ctx.shellEnv.list().some((row) => row.contributor === 'agent-lineage'), false);
  }
  // Its contributors' own names stay open: `config` is theirs.
  const ctx = await harness();
  await ctx.plugin(DshEnv, { home, compiler, contributors: [{ path: lineage, config: { anyName: 'x' } }] });
  assert.ok(ctx.shellEnv.list().some((row) => row.contributor === 'agent-lineage'));
});

test('a key a TypeScript contributor owns is refused at load, and unloading removes every key', async () => {
  const ctx = await harness();
  ctx.shellEnv.register({
    name: 'native-depth',
    variables: { DSH_AGENT_DEPTH: { description: 'owned by TypeScript' } },
    resolve: () => ({ DSH_AGENT_DEPTH: 'ts' }),
  });
  const refused = ctx.plugin(DshEnv, { home, compiler, contributors: [{ path: guest('agent_lineage') }] });
  await assert.rejects(async () => await refused, /DSH_AGENT_DEPTH.*native-depth|native-depth.*DSH_AGENT_DEPTH/);
  assert.deepEqual(
    ctx.shellEnv.list().map((row) => row.contributor).filter((name) => name !== 'session-persistence'),
    ['native-depth'],
  );

  const fresh = await harness();
  const plugin = fresh.plugin(DshEnv, { home, compiler, contributors: [{ path: guest('agent_lineage') }] });
  await plugin;
  const child = header('child', 'parent');
  assert.equal(envOf((await bash(fresh, 'env | grep ^DSH_', child)).stdout).DSH_PARENT_SESSION_ID, 'parent');
  await plugin.dispose();
  assert.equal(fresh.shellEnv.list().some((row) => row.contributor === 'agent-lineage'), false);
  const after = envOf((await bash(fresh, 'env | grep ^DSH_', child)).stdout);
  assert.equal(after.DSH_PARENT_SESSION_ID, undefined);
  assert.equal(after.DSH_SESSION_ID, 'child');
});

test('the README\'s harness configuration loads the plugin as written', async () => {
  const example = readFileSync(resolve(here, '../examples/deepseek-harness.cordis.yml'), 'utf8');
  const readme = readFileSync(resolve(here, '../../../README.md'), 'utf8');
  assert.ok(readme.includes(`\`\`\`yaml\n${example}\`\`\``), 'README shows examples/deepseek-harness.cordis.yml as it is');
  // The harness's working directory, holding the manifest the example names.
  const cwd = mkdtempSync(join(tmpdir(), 'dsh-env-harness-cwd-'));
  const lineage = guest('agent_lineage');
  writeFileSync(join(cwd, 'dsh-env.toml'), `[[contributor]]\npath = ${JSON.stringify(lineage)}\n`);
  const was = { cwd: process.cwd(), home: process.env.DSH_HOME, compiler: process.env.DSH_ENV_COMPILER };
  process.chdir(cwd);
  Object.assign(process.env, { DSH_HOME: home, DSH_ENV_COMPILER: compiler });
  try {
    const ctx = await harness();
    for (const entry of loadYaml(example)) {
      await ctx.plugin(await import(entry.name), entry.config);
    }
    const child = header('child', 'parent');
    const seen = envOf((await bash(ctx, 'env | grep ^DSH_', child)).stdout);
    assert.equal(seen.DSH_PARENT_SESSION_ID, 'parent');
    assert.equal(seen.DSH_AGENT_DEPTH, '1');
  } finally {
    process.chdir(was.cwd);
    for (const [key, value] of [['DSH_HOME', was.home], ['DSH_ENV_COMPILER', was.compiler]]) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
  }
});

test('a manifest\'s [trust] holds through the plugin: an unsigned contributor is refused at load', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'dsh-env-harness-trust-'));
  execFileSync('minisign', ['-G', '-W', '-p', join(dir, 'k.pub'), '-s', join(dir, 'k.key')], { stdio: 'ignore' });
  const key = readFileSync(join(dir, 'k.pub'), 'utf8').split('\n')[1];
  const manifest = join(dir, 'dsh-env.toml');
  writeFileSync(
    manifest,
    `[trust]\nkeys = [${JSON.stringify(key)}]\nrequire_signature = true\n\n` +
      `[[contributor]]\npath = ${JSON.stringify(guest('agent_lineage'))}\n`,
  );
  const ctx = await harness();
  const refused = ctx.plugin(DshEnv, { manifest, home, compiler });
  await assert.rejects(async () => await refused, /agent_lineage\.wasm.*(unsigned|signature)/i);
  assert.equal(ctx.shellEnv.list().some((row) => row.contributor === 'agent-lineage'), false);
});
