// Hooks through the addon: the `hooks` option (a file or a document), the
// manifest's `hooks`, the payload a hook reads, and a blocking hook.
import assert from 'node:assert/strict';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { dshEnv, execution, guest, openRegistry, scratch } from './fixture.mjs';

/** A hook script that saves its stdin to `$1`, and exits 2 with `$2` on stderr when given one. */
function hookScript(dir) {
  const script = join(dir, 'hook.sh');
  writeFileSync(script, '#!/bin/sh\ncat > "$1"\n[ -n "$2" ] && { echo "$2" >&2; exit 2; }\nexit 0\n');
  chmodSync(script, 0o755);
  return script;
}

const document = (pre, post = 'true') => ({
  hooks: {
    PreToolUse: [{ matcher: 'Bash', hooks: [{ type: 'command', command: pre }] }],
    PostToolUse: [{ matcher: 'Bash', hooks: [{ type: 'command', command: post }] }],
  },
});

test('the hooks option runs hooks around exec, with tool_use_id and permission_mode', async () => {
  const dir = scratch();
  const script = hookScript(dir);
  const [pre, post] = [join(dir, 'pre.json'), join(dir, 'post.json')];
  const registry = openRegistry({ hooks: document(`${script} ${pre}`, `${script} ${post}`) });
  const call = execution('call-42', 'sess-1');
  const result = await registry.exec(call, 'echo ran', { permissionMode: 'bypassPermissions', timeoutMs: 3000 });
  assert.equal(result.stdout, 'ran\n');
  assert.deepEqual(result.hooks, { context: [], feedback: [] });
  const payload = JSON.parse(readFileSync(pre, 'utf8'));
  assert.deepEqual(payload, {
    session_id: 'sess-1',
    transcript_path: '',
    cwd: call.agent.session.header.cwd,
    permission_mode: 'bypassPermissions',
    hook_event_name: 'PreToolUse',
    tool_name: 'Bash',
    tool_input: { command: 'echo ran', timeout: 3000 },
    tool_use_id: 'call-42',
  });
  const after = JSON.parse(readFileSync(post, 'utf8'));
  assert.equal(after.tool_use_id, 'call-42');
  assert.equal(after.tool_response.stdout, 'ran\n');

  // Without permissionMode the payload has none.
  await registry.exec(call, 'true');
  assert.equal(JSON.parse(readFileSync(pre, 'utf8')).permission_mode, undefined);
});

test('a blocking hook keeps the command from running', async () => {
  const dir = scratch();
  const script = hookScript(dir);
  const hooks = join(dir, 'hooks.json');
  writeFileSync(hooks, JSON.stringify(document(`${script} ${join(dir, 'pre.json')} 'not here'`)));
  const registry = openRegistry({ hooks });
  const marker = join(dir, 'touched');
  await assert.rejects(registry.exec(execution('c1', 's1'), `touch ${marker}`), (error) => {
    assert.ok(error instanceof dshEnv.HookBlockedError, String(error));
    assert.equal(error.code, 'DSH_HOOK_BLOCKED');
    assert.equal(error.message, 'blocked by a PreToolUse hook: not here');
    return true;
  });
  assert.ok(!existsSync(marker), 'the command must not have run');
});

test("a manifest's hooks apply; the hooks option, an unknown option or a bad file are checked", async () => {
  const dir = scratch();
  const script = hookScript(dir);
  const record = join(dir, 'from-manifest.json');
  writeFileSync(join(dir, 'hooks.json'), JSON.stringify(document(`${script} ${record}`)));
  const manifest = join(dir, 'dsh-env.toml');
  writeFileSync(manifest, `hooks = "hooks.json"\n[[contributor]]\npath = ${JSON.stringify(guest('agent_lineage'))}\n`);
  const registry = openRegistry({ manifest });
  await registry.registerManifest(manifest);
  await registry.exec(execution('c2', 's2'), 'true');
  assert.equal(JSON.parse(readFileSync(record, 'utf8')).tool_use_id, 'c2');

  const invalid = (pattern) => (error) => {
    assert.equal(error.code, 'DSH_INVALID_ARGUMENT', String(error));
    assert.match(error.message, pattern);
    return true;
  };
  assert.throws(() => openRegistry({ hook: join(dir, 'hooks.json') }), invalid(/unknown option `hook`/));
  assert.throws(() => openRegistry({ hooks: { PreToolUse: [] } }), invalid(/unknown field `PreToolUse`, expected `hooks` or `description`/));
  assert.throws(() => openRegistry({ hooks: { hooks: { Stop: [] } } }), invalid(/event `Stop`/));
  assert.throws(() => openRegistry({ hooks: 3 }), invalid(/hooks: expected a hooks.json file's path/));
  const missing = join(dir, 'missing.toml');
  writeFileSync(missing, 'hooks = "nowhere.json"\n');
  assert.throws(() => openRegistry({ manifest: missing }), invalid(/nowhere\.json.*`hooks` of manifest .*line 1, column 9/));
  await assert.rejects(registry.exec(execution('c3', 's3'), 'true', { permissionMode: 'auto' }), invalid(/permissionMode: unknown permission mode `auto`/));
  await assert.rejects(registry.exec(execution('c3', 's3'), 'true', { permission_mode: 'plan' }), invalid(/unknown option `permission_mode`/));
});
