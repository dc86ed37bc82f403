// The addon through its documented API: registry rules, isolation of
// concurrent executions, the scrub, and dispose during collection.
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import {
  dshEnv,
  execution,
  guest,
  guestCopy,
  openRegistry,
  polyglot,
  puppet,
  scratch,
  signingKey,
} from './fixture.mjs';

test('a child execution gets its parent from agent-lineage', async () => {
  const registry = openRegistry();
  const lineage = await registry.register(guest('agent_lineage'));
  assert.equal(lineage.name, 'agent-lineage');
  const { overlay, omitted } = await registry.collect(execution('c1', 'child-1', 'parent-1'));
  assert.equal(overlay.DSH_PARENT_SESSION_ID, 'parent-1');
  assert.equal(overlay.DSH_SESSION_ID, 'child-1');
  assert.equal(overlay.DSH_SHELL, '1');
  assert.deepEqual(Object.keys(overlay), Object.keys(overlay).sort());
  assert.deepEqual(omitted, []);
  const keys = registry.list().map((row) => `${row.key}:${row.owner}`);
  assert.ok(keys.includes('DSH_PARENT_SESSION_ID:agent-lineage'), keys.join());
});

test('declarations are checked, naming contributor and key', async () => {
  const registry = openRegistry();
  await registry.register(guest('agent_lineage'));
  await assert.rejects(registry.register(guest('agent_lineage')), (error) => {
    assert.ok(error instanceof dshEnv.RegistrationError, String(error));
    assert.ok(error instanceof dshEnv.DshEnvError);
    assert.equal(error.code, 'DSH_DECLARATION');
    assert.equal(error.contributor, 'agent-lineage');
    return true;
  });
  await assert.rejects(puppet(registry, { name: 'sneaky', keys: 'DSH_HOME=mine' }), (error) => {
    assert.equal(error.code, 'DSH_DECLARATION');
    assert.equal(error.contributor, 'sneaky');
    assert.equal(error.key, 'DSH_HOME');
    return true;
  });
  await assert.rejects(registry.register('/nonexistent/c.wasm'), (error) => {
    assert.equal(error.code, 'DSH_LOAD');
    assert.equal(error.file, '/nonexistent/c.wasm');
    return true;
  });
  await assert.rejects(registry.register(guest('puppet'), { limits: { deadlineMs: 0 } }), (error) => {
    assert.equal(error.code, 'DSH_INVALID_ARGUMENT');
    assert.match(error.message, /limits\.deadline_ms must be at least 1/);
    assert.equal(error.limit, 'deadline_ms');
    return true;
  });
});

test('a bad execution is refused, naming what is wrong', async () => {
  const registry = openRegistry();
  const call = execution('c1', 'child-1', 'parent-1');
  call.agent.session.header.cwd = 'relative/dir';
  const circular = execution('c2', 'child-1');
  circular.agent.session.header.self = circular;
  for (const [bad, why] of [
    [call, /cwd.*absolute|absolute.*cwd/],
    [circular, /circular/],
    [undefined, /expected an object, got undefined/],
    [{ callId: 'c3' }, /rootCallId|missing field/],
  ]) {
    for (const call of [() => registry.collect(bad), () => registry.exec(bad, 'true')]) {
      await assert.rejects(call(), (error) => {
        assert.ok(error instanceof dshEnv.DshEnvError, String(error));
        assert.equal(error.code, 'DSH_INVALID_ARGUMENT');
        assert.match(error.message, why);
        return true;
      });
    }
  }
});

test('after a collection or an exec, the next call\'s instance is made in the background', async () => {
  const registry = openRegistry();
  await registry.register(guest('agent_lineage'));
  for (let call = 0; call < 4; call++) {
    const made = execution(`c${call}`, 'child-1', 'parent-1');
    if (call % 2 === 0) {
      const { overlay } = await registry.collect(made);
      assert.equal(overlay.DSH_PARENT_SESSION_ID, 'parent-1');
    } else {
      const { stdout } = await registry.exec(made, 'printf %s "$DSH_PARENT_SESSION_ID"');
      assert.equal(stdout, 'parent-1');
    }
    for (let turn = 0; registry.prepared() < 1; turn++) {
      assert.ok(turn < 3000, 'no instance was made ahead of the next call');
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
  }
});

test('the next call\'s instances are made on a thread below the event loop\'s priority', async () => {
  // Woken on a runtime worker, a preparation preempted the event loop that
  // asked for it (BENCHMARKS.md): the host makes them on a thread of its
  // own, niced by 10.
  const registry = openRegistry();
  await registry.register(guest('agent_lineage'));
  await registry.collect(execution('c0', 'child-1', 'parent-1'));
  for (let turn = 0; registry.prepared() < 1; turn++) {
    assert.ok(turn < 3000, 'no instance was made ahead of the next call');
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  const stats = readdirSync('/proc/self/task').map((tid) => {
    try {
      return readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
    } catch {
      return ''; // a thread that ended meanwhile
    }
  });
  // Fields after the `(comm)`: state is the 3rd of /proc's stat, nice the 19th.
  const niceness = stats
    .filter((stat) => stat.includes('(dsh-env-prepare)'))
    .map((stat) => Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19 - 3]));
  assert.ok(niceness.length >= 1, 'no dsh-env-prepare thread');
  assert.deepEqual([...new Set(niceness)], [10]);
});

test('an instance taken while the background preparation runs is made again when it ends', async () => {
  // The preparation makes agent-lineage's instance first (names in order),
  // then session-url's (Python), which takes milliseconds: agent-lineage's
  // is taken meanwhile, and its request for another must not be lost.
  const registry = openRegistry();
  const lineage = await registry.register(guest('agent_lineage'));
  await registry.register(polyglot('session_url'), { config: { base_url: 'https://agents.example.test/s' } });
  // The preparing thread runs below the event loop's priority: on a busy
  // machine it may wait some milliseconds for a core.
  const turns = async (done, what, wait = () => new Promise((resolve) => setImmediate(resolve))) => {
    for (let turn = 0; !done(); turn++) {
      assert.ok(turn < 30000, what);
      await wait();
    }
  };
  for (let round = 0; round < 20; round++) {
    await registry.collect(execution(`c${round}`, 'child-1', 'parent-1'));
    await turns(() => registry.prepared() >= 1, 'no preparation started');
    assert.equal(lineage.resolveSync(execution(`r${round}`, 'child-1', 'parent-1')).overlay.DSH_PARENT_SESSION_ID, 'parent-1');
    await turns(
      () => registry.prepared() === 2,
      `round ${round}: agent-lineage was left with no instance made ahead and none being made`,
      () => new Promise((resolve) => setTimeout(resolve, 1)),
    );
  }
});

test('undeclared output fails the execution, naming contributor and key', async () => {
  const registry = openRegistry();
  await puppet(registry, { name: 'liar', keys: 'DSH_SAID=what it says', pairs: 'DSH_OTHER=x' });
  await assert.rejects(registry.collect(execution('c1', 's')), (error) => {
    assert.ok(error instanceof dshEnv.ContributorError, String(error));
    assert.equal(error.code, 'DSH_CONTRIBUTOR');
    assert.equal(error.contributor, 'liar');
    assert.equal(error.key, 'DSH_OTHER');
    return true;
  });
  // With onError 'omit', the execution goes on without its keys.
  const omitting = openRegistry();
  await puppet(omitting, { name: 'liar', keys: 'DSH_SAID=what it says', pairs: 'DSH_OTHER=x' }, { onError: 'omit' });
  const { overlay, omitted } = await omitting.collect(execution('c1', 's'));
  assert.equal(overlay.DSH_SAID, undefined);
  assert.equal(omitted.length, 1);
  assert.match(omitted[0], /liar/);
});

test('concurrent parent and child executions each get their own overlay', async () => {
  const registry = openRegistry();
  await registry.register(guest('agent_lineage'));
  await puppet(registry, { name: 'caller', keys: 'DSH_CALL=the call', pairs: 'DSH_CALL={call}|' });
  const calls = [];
  for (let i = 0; i < 32; i++) {
    const parent = i % 2 === 0;
    calls.push({ i, parent, done: registry.collect(execution(`call-${i}`, parent ? 'parent' : 'child', parent ? undefined : 'parent')) });
  }
  for (const { i, parent, done } of calls) {
    const { overlay } = await done;
    assert.equal(overlay.DSH_CALL, `call-${i}`);
    assert.equal(overlay.DSH_SESSION_ID, parent ? 'parent' : 'child');
    assert.equal(overlay.DSH_PARENT_SESSION_ID, parent ? undefined : 'parent');
  }
});

test('exec gives the command the scrubbed environment plus the overlay, off the event loop', async () => {
  const registry = openRegistry();
  await registry.register(guest('agent_lineage'));
  process.env.MY_API_TOKEN = 'hunter2';
  process.env.DSH_FORGED = 'forged';
  try {
    let ticked = false;
    setTimeout(() => {
      ticked = true;
    }, 1);
    const result = await registry.exec(execution('c1', 'child-1', 'parent-1'), 'sleep 0.3; env', {
      env: { GREETING: 'hi' },
      stdin: '',
    });
    // The timer fired while the command ran: the event loop was free.
    assert.ok(ticked);
    assert.equal(result.exitCode, 0, result.stderr);
    const env = new Map(result.stdout.trim().split('\n').map((line) => line.split(/=(.*)/s).slice(0, 2)));
    assert.equal(env.get('DSH_PARENT_SESSION_ID'), 'parent-1');
    assert.equal(env.get('DSH_SHELL'), '1');
    assert.equal(env.get('GREETING'), 'hi');
    assert.equal(env.has('MY_API_TOKEN'), false);
    assert.equal(env.has('DSH_FORGED'), false);
  } finally {
    delete process.env.MY_API_TOKEN;
    delete process.env.DSH_FORGED;
  }
  await assert.rejects(registry.exec(execution('c2', 's'), 'true', { env: { DSH_SESSION_ID: 'forged' } }), (error) => {
    assert.ok(error instanceof dshEnv.ExecError, String(error));
    assert.equal(error.key, 'DSH_SESSION_ID');
    return true;
  });
  const timedOut = await registry.exec(execution('c3', 's'), 'sleep 5', { timeoutMs: 100 });
  assert.equal(timedOut.timedOut, true);
});

test('the environment option sets what exec\'s commands inherit, and a bad one is refused', async () => {
  const registry = openRegistry({ environment: { inherit: 'core', set: { GREETING: 'hi' } } });
  process.env.MY_SETTING = 'kept?';
  try {
    const result = await registry.exec(execution('c1', 's'), 'echo "$GREETING|${MY_SETTING-unset}|$DSH_SHELL"');
    assert.equal(result.stdout, 'hi|unset|1\n', result.stderr);
  } finally {
    delete process.env.MY_SETTING;
  }
  assert.throws(
    () => openRegistry({ environment: { set: { DSH_FORGED: '1' } } }),
    (error) => error instanceof dshEnv.DshEnvError && error.code === 'DSH_INVALID_ARGUMENT' && /DSH_FORGED/.test(error.message),
  );
  assert.throws(
    () => openRegistry({ environment: { inherrit: 'none' } }),
    (error) => error.code === 'DSH_INVALID_ARGUMENT' && /inherrit/.test(error.message),
  );
});

test('an option the addon does not know is refused wherever it is, named as written with the known ones', async () => {
  const limits = 'known: deadlineMs, memoryMib, fuel, maxKeys, maxPairs, maxValueBytes, maxOutputBytes, ' +
    'maxErrorBytes, maxLogBytes, maxHandles, compileTimeoutMs, compileCpuMs, compileMemoryMib';
  const refused = (message) => (error) => {
    assert.ok(error instanceof dshEnv.DshEnvError, String(error));
    assert.equal(error.code, 'DSH_INVALID_ARGUMENT');
    assert.equal(error.message, message);
    return true;
  };
  const registry = openRegistry();
  for (const [options, message] of [
    [{ limits: { deadlineMS: 5 } }, `register options: limits: unknown option \`deadlineMS\` (${limits})`],
    [{ grants: { cwd: 'read', envs: ['HOME'] } }, 'register options: grants: unknown option `envs` (known: config, env, cwd)'],
    // A path in the options would be dropped for the argument's, in silence.
    [{ path: guest('agent_lineage') }, 'register options: unknown option `path` (known: config, limits, grants, onError, sha256, signature, grantsSha256)'],
    [{ 'onError\u001b[2J': 'omit' }, 'register options: unknown option `onError\\u{1b}[2J` (known: config, limits, grants, onError, sha256, signature, grantsSha256)'],
  ]) {
    await assert.rejects(registry.register(guest('puppet'), options), refused(message));
  }
  assert.deepEqual(registry.contributors(), []);
  assert.throws(
    () => openRegistry({ environment: { includeONLY: ['PATH'] } }),
    refused('environment: unknown option `includeONLY` (known: inherit, exclude, set, includeOnly)'),
  );
  // The hooks option's document is a hooks.json: its keys are Claude Code's.
  const hooks = { hooks: { PreToolUse: [{ matcher: 'Bash', hooks: [{ type: 'command', command: 'exit 2', timout: 5 }] }] } };
  assert.throws(() => openRegistry({ hooks }), (error) => {
    assert.equal(error.code, 'DSH_INVALID_ARGUMENT', String(error));
    assert.match(error.message, /^hooks: PreToolUse: hook `exit 2`: unknown field `timout`, expected one of `type`, `command`, `timeout`, /);
    return true;
  });
});

test('the trust option holds for every registration: unsigned refused, signed taken, unknown fields refused', async () => {
  const dir = scratch();
  const author = signingKey(dir, 'author');
  const lineage = guestCopy('agent_lineage', dir);
  const registry = openRegistry({ trust: { keys: [author.public], requireSignature: true } });
  await assert.rejects(registry.register(lineage), (error) => {
    assert.ok(error instanceof dshEnv.RegistrationError, String(error));
    assert.equal(error.code, 'DSH_SIGNATURE');
    assert.match(error.message, /agent_lineage\.wasm is not signed .*requires a signature/);
    assert.equal(error.file, lineage);
    return true;
  });
  // A registration cannot bring a trust of its own.
  await assert.rejects(registry.register(lineage, { trust: { keys: [] } }), (error) => {
    assert.equal(error.code, 'DSH_INVALID_ARGUMENT');
    assert.match(error.message, /^register options: unknown option `trust` \(known: config, /);
    return true;
  });
  author.sign(lineage);
  const registration = await registry.register(lineage);
  assert.equal(registration.name, 'agent-lineage');
  const [listing] = registry.contributors();
  assert.equal(listing.signer.status, 'trusted', JSON.stringify(listing));
  for (const [trust, why] of [
    [{ keys: [author.public], requireSignatures: true }, /^trust: unknown option `requireSignatures` \(known: keys, requireSignature\)$/],
    [{ keys: [], requireSignature: true }, /trust\.keys is empty/],
    [{ keys: ['not-a-key'] }, /trust\.keys\[0\] is not a minisign public key/],
  ]) {
    assert.throws(
      () => openRegistry({ trust }),
      (error) => error.code === 'DSH_INVALID_ARGUMENT' && why.test(error.message),
      JSON.stringify(trust),
    );
  }
});

test('a busy contributor never holds the event loop past an epoch tick', async () => {
  const registry = openRegistry();
  await puppet(registry, { name: 'busy', keys: 'DSH_BUSY=busy', resolve: 'loop' }, {
    limits: { deadlineMs: 300 },
    onError: 'omit',
  });
  let ticks = 0;
  const timer = setInterval(() => ticks++, 1);
  try {
    // The guest spins until its deadline; collect moves off this thread at
    // its first epoch yield, so the timer keeps firing meanwhile.
    for (const call of ['c1', 'c2']) {
      const before = ticks;
      const { omitted } = await registry.collect(execution(call, 's'));
      assert.equal(omitted.length, 1);
      assert.match(omitted[0], /`busy`.*deadline of 300ms exceeded/);
      assert.ok(ticks - before >= 10, `only ${ticks - before} timer ticks during a 300 ms collection`);
    }
  } finally {
    clearInterval(timer);
  }
});

test('dispose during a collection: that execution keeps it, the next does not', async () => {
  const registry = openRegistry();
  const slow = await puppet(registry, { name: 'slow', keys: 'DSH_SLOW=slow', pairs: 'DSH_SLOW=1', resolve: 'sleep:300' });
  const during = registry.collect(execution('c1', 's'));
  slow.dispose();
  slow.dispose();
  assert.equal((await during).overlay.DSH_SLOW, '1');
  const after = await registry.collect(execution('c2', 's'));
  assert.equal(after.overlay.DSH_SLOW, undefined);
  assert.ok(!registry.list().some((row) => row.owner === 'slow'));
});

test('explain names each key\'s owner and each contributor\'s origin', async () => {
  const registry = openRegistry();
  await registry.register(guest('agent_lineage'));
  const explanation = await registry.explain(execution('c1', 'child', 'parent'));
  const parent = explanation.keys.find((row) => row.key === 'DSH_PARENT_SESSION_ID');
  assert.equal(parent.owner, 'agent-lineage');
  assert.equal(parent.value, 'parent');
  assert.equal(explanation.contributors[0].name, 'agent-lineage');
  assert.equal(explanation.contributors[0].origin, guest('agent_lineage'));
  assert.match(explanation.contributors[0].sha256, /^[0-9a-f]{64}$/);
});

test('explain gives what the CLI\'s does: absent keys, the home, and what exec scrubs (names, never values)', async () => {
  const registry = openRegistry();
  await registry.register(guest('agent_lineage'));
  process.env.MY_API_TOKEN = 'secret-value';
  try {
    const explanation = await registry.explain(execution('c1', 'top'));
    assert.deepEqual(
      explanation.absent.map((row) => [row.key, row.owner]),
      [['DSH_PARENT_SESSION_ID', 'agent-lineage']],
    );
    assert.equal(explanation.home.path, registry.home);
    assert.ok(explanation.home.path.length > 0);
    const token = explanation.scrubbed.find((row) => row.name === 'MY_API_TOKEN');
    assert.equal(token?.rule, 'name-part', JSON.stringify(explanation.scrubbed));
    assert.ok(!JSON.stringify(explanation).includes('secret-value'));
    // A name the scrub keeps is not listed.
    assert.ok(!explanation.scrubbed.some((row) => row.name === 'PATH'));
  } finally {
    delete process.env.MY_API_TOKEN;
  }
});

test('numbers out of range are refused naming the option: exec timeoutMs, register limits', async () => {
  const registry = openRegistry();
  // A negative timeout was cast to an unsigned one: 49 days.
  for (const timeoutMs of [-1, 1.5, 0, NaN, Infinity, 86_400_001, 1e300]) {
    await assert.rejects(registry.exec(execution('c1', 's'), 'true', { timeoutMs }), (error) => {
      assert.equal(error.code, 'DSH_INVALID_ARGUMENT', String(error));
      assert.match(error.message, /^timeoutMs must be a whole number of milliseconds from 1 to 86400000, not /);
      return true;
    });
  }
  const ok = await registry.exec(execution('c2', 's'), 'echo ok', { timeoutMs: 60_000 });
  assert.equal(ok.stdout, 'ok\n');
  for (const [deadlineMs, why] of [
    [-1, /limits\.deadline_ms: invalid value: integer `-1`/],
    [1.5, /limits\.deadline_ms: invalid type: floating point `1.5`/],
    [3_600_001, /limits\.deadline_ms must be from 1 to 3600000/],
    [NaN, /limits\.deadlineMs must be a finite number, not NaN/],
    [Infinity, /limits\.deadlineMs must be a finite number, not Infinity/],
  ]) {
    await assert.rejects(registry.register(guest('puppet'), { limits: { deadlineMs } }), (error) => {
      assert.equal(error.code, 'DSH_INVALID_ARGUMENT', String(error));
      assert.match(error.message, why);
      assert.equal(error.limit, 'deadline_ms', String(error));
      return true;
    });
  }
});

test('explain says what a contributor without its grant looked for, and where to grant it', async () => {
  const repo = scratch();
  mkdirSync(join(repo, '.git'));
  writeFileSync(join(repo, '.git/HEAD'), 'ref: refs/heads/feature-x\n');
  const call = execution('c1', 's1');
  call.agent.session.header.cwd = repo;

  const registry = openRegistry();
  await registry.register(guest('git_context'));
  const [absence] = (await registry.explain(call)).why_absent;
  assert.deepEqual(
    [absence.contributor, absence.keys, absence.grants, absence.declared_at, absence.stderr_tail],
    ['git-context', ['DSH_GIT_BRANCH'], 'none', null, null],
  );
  assert.match(absence.hints[0], /no cwd grant: add `cwd = "read"` to its grants/);

  // From a manifest, the hint names the entry's line.
  const dir = scratch();
  const manifest = join(dir, 'm.toml');
  writeFileSync(manifest, `# readers\n\n[[contributor]]\npath = ${JSON.stringify(guest('git_context'))}\n`);
  const fromManifest = openRegistry();
  await fromManifest.registerManifest(manifest);
  const [listed] = (await fromManifest.explain(call)).why_absent;
  assert.equal(listed.declared_at, `${manifest}:3`);
  assert.match(listed.hints[0], new RegExp(`entry at ${manifest}:3$`));

  // Granted, the key is there and nothing is absent.
  const granted = openRegistry();
  await granted.register(guest('git_context'), { grants: { cwd: 'read' } });
  const explanation = await granted.explain(call);
  assert.equal(explanation.keys.find((row) => row.key === 'DSH_GIT_BRANCH')?.value, 'feature-x');
  assert.deepEqual(explanation.why_absent.map((row) => row.contributor), []);
});

test('a pin that no longer matches tells a Node caller what to do, not only the CLI', async () => {
  const registry = openRegistry();
  const pinned = '0'.repeat(64);
  await assert.rejects(registry.register(guest('puppet'), { sha256: pinned }), (error) => {
    assert.equal(error.code, 'DSH_CHANGED', String(error));
    assert.match(error.message, /changed since it was pinned/);
    assert.match(error.message, /`sha256: '[0-9a-f]{64}'` in register\(\)'s options/);
    assert.match(error.message, /the dsh-env CLI's `dsh-env add/);
    assert.doesNotMatch(error.message, /run `dsh-env add`/);
    return true;
  });
});

test('an env grant of a DSH_* name is refused, by register and by a manifest, naming the contributor and the name', async () => {
  // The process's own DSH_* values are an outer call's: none may reach a guest.
  const registry = openRegistry();
  const probe = guest('puppet');
  for (const name of ['DSH_HOME', 'dsh_session_id']) {
    await assert.rejects(
      registry.register(probe, { config: { name: 'stale', keys: 'DSH_STALE=s' }, grants: { env: ['PATH', name] } }),
      (error) => {
        assert.ok(error instanceof dshEnv.DshEnvError, String(error));
        assert.equal(error.code, 'DSH_INVALID_ARGUMENT');
        assert.equal(error.key, name);
        assert.equal(error.contributor, probe);
        assert.ok(error.message.includes(probe), error.message);
        assert.ok(error.message.includes(`grants.env names \`${name}\``), error.message);
        return true;
      },
    );
  }
  const manifest = join(scratch(), 'm.toml');
  writeFileSync(manifest, `[[contributor]]\npath = ${JSON.stringify(probe)}\n[contributor.grants]\nenv = ["DSH_HOME"]\n`);
  await assert.rejects(registry.registerManifest(manifest), (error) => {
    assert.equal(error.code, 'DSH_MANIFEST', String(error));
    assert.equal(error.key, 'DSH_HOME');
    assert.equal(error.file, manifest);
    assert.ok(error.message.includes(`contributor ${probe}: grants.env names \`DSH_HOME\``), error.message);
    return true;
  });
  assert.deepEqual(registry.contributors(), []);
});
