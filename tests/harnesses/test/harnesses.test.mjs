// The four agent harnesses, installed from tests/harnesses' lockfile, each
// wired to dsh-env by `dsh-env setup` and driven offline (a network
// namespace with only loopback) by a scripted model that calls the shell
// tool. What each command saw comes back to the model as the tool result,
// which the model server logs: that is what these tests check.
//
// Needs the dsh-env binary (`cargo build`; DSH_ENV_BIN overrides) and the
// guests (`cargo test --test all --no-run` builds them under the target dir).
// KEEP=1 keeps the scratch directory (each run's logs, homes and requests).

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { HARNESSES } from '../lib/harnesses.mjs';
import { readLog } from '../lib/model-server.mjs';
import { runOffline } from '../lib/offline.mjs';

const repo = new URL('../../..', import.meta.url).pathname;
const target = process.env.CARGO_TARGET_DIR ?? join(repo, 'target');
const dshEnv = process.env.DSH_ENV_BIN ?? join(target, 'debug/dsh-env');
const puppet = join(target, 'wasm32-wasip2/guest/puppet.wasm');

const scratch = mkdtempSync(join(tmpdir(), 'dsh-harness-e2e-'));
// One dsh-env home for every run: the contributors compile once.
const dshHome = join(scratch, 'dsh-home');

/** What the command prints: the DSH_* variables and two it must not see, between markers. */
const PROBE = 'echo BEGIN; env | grep ^DSH_ | sort; echo MY_API_TOKEN=${MY_API_TOKEN-unset}; echo GEMINI_API_KEY=${GEMINI_API_KEY-unset}; echo END';

/** A value with every kind of shell syntax, each part of which would leave a file behind if it ran. */
const hostile = (dir) =>
  `it's "quoted" $(touch ${dir}/ran-dollar) \`touch ${dir}/ran-backtick\`; touch ${dir}/ran-semicolon`;

/** contributors/examples.toml with absolute paths, then `extra`. */
function manifest(path, extra) {
  const examples = readFileSync(join(repo, 'contributors/examples.toml'), 'utf8').replaceAll('"../target/', `"${target}/`);
  writeFileSync(path, `${examples}\n${extra}`);
  return path;
}

/** A puppet contributor entry (tests/guests/puppet) with this config. */
const puppetEntry = (config) =>
  `[[contributor]]\npath = ${JSON.stringify(puppet)}\n[contributor.config]\n` +
  Object.entries(config).map(([k, v]) => `${k} = ${JSON.stringify(v)}\n`).join('');

/**
 * The environment a harness runs with: its own, HOME, PATH, a TMPDIR in the
 * scratch dir (OpenCode leaves a 5 MB library in it per run), and the stale
 * and secret names.
 */
function environment(home, own) {
  const tmp = join(home, '..', 'tmp');
  mkdirSync(tmp, { recursive: true });
  return { PATH: process.env.PATH, HOME: home, TMPDIR: tmp, LANG: 'C.UTF-8', DSH_STALE: '1', MY_API_TOKEN: 'x', ...own };
}

/** Runs `dsh-env setup <harness> ...args` as the user whose environment is `env`. */
function setup(harness, env, ...args) {
  return execFileSync(dshEnv, ['setup', harness.name, ...args], { env, encoding: 'utf8' });
}

/** Every file under `dir` (symlinks as their target), with its bytes' digest. */
function snapshot(dir) {
  const files = {};
  const walk = (path, rel) => {
    for (const name of readdirSync(path).sort()) {
      const full = join(path, name);
      const stat = lstatSync(full);
      if (stat.isSymbolicLink()) files[join(rel, name)] = `-> ${readlinkSync(full)}`;
      else if (stat.isDirectory()) walk(full, join(rel, name));
      else files[join(rel, name)] = createHash('sha256').update(readFileSync(full)).digest('hex');
    }
  };
  walk(dir, '');
  return files;
}

/** The `NAME=value` lines each command printed between its markers. */
function printed(result) {
  const block = result.match(/BEGIN\n([\s\S]*?)\nEND/);
  assert.ok(block, `a tool result without the probe's output:\n${result}`);
  return Object.fromEntries(block[1].split('\n').map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]));
}

/** What to show when an assertion about a run fails. */
const explain = (run) =>
  `exit ${run.code} (${run.signal ?? 'no signal'})\n--- stdout\n${run.stdout.slice(-3000)}\n--- stderr\n${run.stderr.slice(-3000)}`;

// The compiled contributors alone are about 100 MB.
after(() => { if (!process.env.KEEP) rmSync(scratch, { recursive: true, force: true }); });

// Compiles every contributor into the shared home before any harness runs,
// so that no first call spends a harness's hook timeout on compiling.
before(() => {
  const warm = manifest(join(scratch, 'warm.toml'), puppetEntry({}));
  const started = Date.now();
  execFileSync(dshEnv, ['run', '--manifest', warm, '--home', dshHome, '--', 'true']);
  console.log(`contributors compiled in ${Date.now() - started} ms`);
});

/** The sockets of the hook servers in the shared home. */
function hookServers() {
  const run = join(dshHome, 'run');
  return existsSync(run) ? readdirSync(run).filter((name) => name.endsWith('.sock')) : [];
}

test('the harnesses run where only loopback exists and no name resolves', async () => {
  const run = await runOffline({
    argv: ['bash', '-c', 'ip -o link show | cut -d: -f2; cat /etc/resolv.conf'],
    env: { PATH: process.env.PATH }, cwd: scratch, commands: [], log: join(scratch, 'netns.jsonl'),
  });
  assert.equal(run.stdout, ' lo\nnameserver 127.0.0.1\n', explain(run));
});

for (const harness of HARNESSES) {
  describe(harness.name, () => {
    const dir = join(scratch, harness.name);
    const home = join(dir, 'home');
    const work = join(dir, 'work');
    let env;
    let main; // two probe calls: {run, log, env: [printed per call]}
    let blocked; // one call that a contributor's undeclared key blocks

    before(async () => {
      mkdirSync(work, { recursive: true });
      execFileSync('git', ['init', '-q', '-b', 'harness-e2e', work]);
      env = environment(home, harness.configure(home, work));

      const examples = manifest(join(dir, 'examples.toml'), puppetEntry({
        name: 'quoted',
        keys: 'DSH_QUOTED=a value full of shell syntax',
        pairs: `DSH_QUOTED=${hostile(dir)}`,
      }));
      setup(harness, env, '--manifest', examples, '--home', dshHome);
      const log = join(dir, 'main.jsonl');
      const before = hookServers();
      const run = await runOffline({ argv: harness.argv('Run the probe twice.'), env, cwd: work, commands: [PROBE, PROBE], log });
      const { issued, results } = readLog(readFileSync(log, 'utf8'));
      main = { run, issued, results, servers: hookServers().filter((s) => !before.includes(s)) };
      console.log(`${harness.name}: two calls in ${run.ms} ms`);

      const sneaky = manifest(join(dir, 'sneaky.toml'), puppetEntry({
        name: 'sneaky',
        keys: 'DSH_DECLARED=declared',
        pairs: 'DSH_DECLARED=1|DSH_UNDECLARED=2',
      }));
      setup(harness, env, '--manifest', sneaky, '--home', dshHome);
      const blockedLog = join(dir, 'blocked.jsonl');
      const blockedRun = await runOffline({
        argv: harness.argv('Run it.'), env, cwd: work, commands: [`echo ran > ${dir}/ran-blocked; printf '%s-%s\\n' BLOCKED-CALL RAN`], log: blockedLog,
      });
      blocked = { run: blockedRun, ...readLog(readFileSync(blockedLog, 'utf8')) };
      console.log(`${harness.name}: a blocked call in ${blockedRun.ms} ms`);
    });

    test('each call sees DSH_HOME, DSH_SHELL, the session id and the examples\' keys', () => {
      assert.equal(main.run.code, 0, explain(main.run));
      assert.equal(main.results.length, 2, explain(main.run));
      const session = harness.sessionId(main.run.stdout);
      assert.ok(session, `no session id in the harness's output\n${explain(main.run)}`);
      main.results.forEach((result, i) => {
        const seen = printed(result);
        assert.equal(seen.DSH_HOME, dshHome, result);
        assert.equal(seen.DSH_SHELL, '1', result);
        assert.equal(seen.DSH_SESSION_ID, session, result);
        assert.match(seen.DSH_TRACEPARENT ?? '', /^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/, result);
        assert.equal(seen.DSH_GIT_BRANCH, 'harness-e2e', result);
        assert.equal(seen.DSH_SESSION_URL, `https://agents.example.test/sessions/${session}`, result);
        assert.equal(seen.DSH_CALL_MODE, 'foreground', result);
        assert.equal(seen.DSH_AGENT_DEPTH, '0', result);
        assert.match(seen.DSH_WORKSPACE_ID ?? '', /^[0-9a-f]+$/, result);
        if (harness.callIds) assert.equal(seen.DSH_ROOT_CALL_ID, main.issued[i], result);
        // Gemini CLI gives no call id: the adapter makes a UUID v7 per call.
        else assert.match(seen.DSH_ROOT_CALL_ID ?? '', /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, result);
      });
    });

    // A per-call hook's first call starts a hook server for the next
    // (README): it starts under the real harness too, and only one, as the
    // harness gives its hook the same environment at every call (the
    // server's socket is named by it).
    test('the hook\'s first call starts one hook server', { skip: harness.name === 'opencode' && 'a plugin, no hook' }, () => {
      assert.equal(main.servers.length, 1, `hook servers started: ${main.servers}`);
    });

    test('two calls in one session: the same session id, different per-call values', () => {
      assert.equal(main.results.length, 2, explain(main.run));
      const [first, second] = main.results.map(printed);
      assert.equal(first.DSH_SESSION_ID, second.DSH_SESSION_ID);
      assert.notEqual(first.DSH_TRACEPARENT, second.DSH_TRACEPARENT);
      assert.notEqual(first.DSH_ROOT_CALL_ID, second.DSH_ROOT_CALL_ID);
    });

    test('the harness\'s own DSH_* and credential-shaped variables do not reach the command', () => {
      assert.equal(main.results.length, 2, explain(main.run));
      for (const result of main.results) {
        const seen = printed(result);
        assert.equal(seen.DSH_STALE, undefined, result);
        assert.equal(seen.MY_API_TOKEN, 'unset', result);
        assert.equal(seen.GEMINI_API_KEY, 'unset', result);
      }
    });

    test('a value with quotes, $(…), a backtick and ; reaches the command byte for byte and runs nothing', () => {
      assert.equal(main.results.length, 2, explain(main.run));
      for (const result of main.results) assert.equal(printed(result).DSH_QUOTED, hostile(dir), result);
      for (const ran of ['ran-dollar', 'ran-backtick', 'ran-semicolon']) assert.ok(!existsSync(join(dir, ran)), `${ran} exists`);
    });

    test('a contributor that returns an undeclared key blocks the call, and the model receives why', () => {
      assert.ok(!existsSync(join(dir, 'ran-blocked')), `the blocked command ran\n${explain(blocked.run)}`);
      assert.equal(blocked.results.length, 1, explain(blocked.run));
      const [reason] = blocked.results;
      // The harness may quote the command; only its output has the dash.
      assert.doesNotMatch(reason, /BLOCKED-CALL-RAN/);
      assert.match(reason, /dsh-env/);
      assert.match(reason, /sneaky/);
      assert.match(reason, /undeclared key `DSH_UNDECLARED`/);
    });
  });
}

describe('claude-code permissions', () => {
  // Claude Code's hook output can carry a permission decision; dsh-env's
  // leaves it to the user's rules, which then judge the rewritten command.
  const harness = HARNESSES.find((h) => h.name === 'claude-code');
  const dir = join(scratch, 'claude-permissions');
  const home = join(dir, 'home');
  let env;

  before(() => {
    mkdirSync(dir, { recursive: true });
    env = environment(home, harness.configure(home, dir));
    const settings = join(home, '.claude/settings.json');
    writeFileSync(settings, JSON.stringify({ permissions: { deny: ['Bash(touch:*)'] } }));
    setup(harness, env, '--manifest', manifest(join(dir, 'examples.toml'), ''), '--home', dshHome);
  });

  test('a call the user\'s settings deny stays denied', async () => {
    const log = join(dir, 'denied.jsonl');
    const run = await runOffline({ argv: harness.argv('Touch it.'), env, cwd: dir, commands: [`touch ${dir}/denied`], log });
    assert.equal(readLog(readFileSync(log, 'utf8')).results.length, 1, explain(run));
    assert.ok(!existsSync(join(dir, 'denied')), `the denied command ran\n${explain(run)}`);
  });

  test('a call no rule allows is not approved by the hook (print mode cannot ask, so it is refused)', async () => {
    const log = join(dir, 'asked.jsonl');
    const argv = harness.argv('Run it.').filter((a) => a !== '--allowedTools' && a !== 'Bash');
    const run = await runOffline({ argv, env, cwd: dir, commands: [`echo ran > ${dir}/asked`], log });
    assert.equal(readLog(readFileSync(log, 'utf8')).results.length, 1, explain(run));
    assert.ok(!existsSync(join(dir, 'asked')), `a command no rule allows ran\n${explain(run)}`);
  });
});

describe('setup --remove', () => {
  for (const harness of HARNESSES) {
    for (const [state, configured] of [['with the user\'s own configuration', true], ['from nothing', false]]) {
      test(`${harness.name}, ${state}: leaves every file as it was before setup`, () => {
        const dir = mkdtempSync(join(scratch, `remove-${harness.name}-`));
        const home = join(dir, 'home');
        const work = join(dir, 'work');
        mkdirSync(home);
        mkdirSync(work);
        const own = harness.configure(home, work);
        const env = environment(home, own);
        if (!configured) {
          for (const name of readdirSync(home)) execFileSync('rm', ['-r', join(home, name)]);
          if (own.CODEX_HOME) mkdirSync(own.CODEX_HOME);
        }
        const examples = manifest(join(dir, 'examples.toml'), '');
        const before = snapshot(home);
        setup(harness, env, '--manifest', examples, '--home', dshHome);
        assert.notDeepEqual(snapshot(home), before, 'setup changed nothing');
        setup(harness, env, '--manifest', examples, '--home', dshHome, '--remove');
        assert.deepEqual(snapshot(home), before);
      });
    }
  }
});
