// The four harnesses as the tests drive them: the configuration a user has
// before `dsh-env setup` (a model provider pointing at the scripted server,
// telemetry and updates off, and one entry of their own that setup must
// keep), the environment, the headless command line, and where each says
// which session it ran.
//
// Headless flags, and why each is needed with no one at the keyboard:
// - Claude Code: `-p` (print mode) with `--allowedTools Bash`: dsh-env's
//   hook leaves the permission decision to the user's rules, and in print
//   mode a Bash call that no rule allows is refused, as nobody can be asked.
// - Codex: `exec` with `approval_policy = "never"` for the same reason, and
//   `sandbox_mode = "danger-full-access"`: its sandbox is not what these
//   tests check. Its hook runs because `dsh-env setup` records the hook's
//   trust as Codex's own `/hooks` review does (never
//   `--dangerously-bypass-hook-trust`).
// - Gemini CLI: `-p` with `--yolo`, which approves every tool call.
// - OpenCode: `run`, with `permission.bash = "allow"` in its project config.

import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PORT } from './offline.mjs';

const root = new URL('..', import.meta.url).pathname;
const bin = (name) => join(root, 'node_modules/.bin', name);
const write = (path, text) => {
  mkdirSync(join(path, '..'), { recursive: true });
  writeFileSync(path, text);
};
const json = (value) => JSON.stringify(value, null, 2) + '\n';
const firstJsonLine = (stdout, pick) =>
  stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l)).map(pick).find(Boolean);

/**
 * OpenCode installs `@opencode-ai/plugin` into each of its config
 * directories at start unless it is there with a package.json and a
 * complete package-lock.json; offline, that install costs 70 s of retries.
 * This lays the package out from tests/harnesses' own install: its entry
 * and its dependencies' entries of our lockfile, and our node_modules.
 */
function layOutOpencodePlugin(dir) {
  const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8'));
  const wanted = new Set();
  const queue = ['@opencode-ai/plugin'];
  while (queue.length) {
    const key = `node_modules/${queue.pop()}`;
    if (wanted.has(key) || !lock.packages[key]) continue;
    wanted.add(key);
    queue.push(...Object.keys(lock.packages[key].dependencies ?? {}));
  }
  const manifest = { dependencies: { '@opencode-ai/plugin': lock.packages['node_modules/@opencode-ai/plugin'].version } };
  const packages = { '': manifest, ...Object.fromEntries([...wanted].sort().map((k) => [k, lock.packages[k]])) };
  write(join(dir, 'package.json'), json(manifest));
  write(join(dir, 'package-lock.json'), json({ lockfileVersion: 3, requires: true, packages }));
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'));
}

/** `{name, configure(home, work) -> env, argv(prompt), sessionId(stdout), callIds}` per harness. */
export const HARNESSES = [
  {
    name: 'claude-code',
    configure(home) {
      // The user's own: a permission rule and a hook of another event.
      write(join(home, '.claude/settings.json'), json({
        permissions: { deny: ['WebFetch'] },
        hooks: { SessionStart: [{ hooks: [{ type: 'command', command: 'true' }] }] },
      }));
      return {
        ANTHROPIC_BASE_URL: `http://127.0.0.1:${PORT}`,
        ANTHROPIC_API_KEY: 'dummy',
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
        DISABLE_AUTOUPDATER: '1',
      };
    },
    argv: (prompt) => [bin('claude'), '-p', prompt, '--output-format', 'json', '--allowedTools', 'Bash'],
    sessionId: (stdout) => JSON.parse(stdout).session_id,
    callIds: true,
  },
  {
    name: 'codex',
    configure(home) {
      write(join(home, '.codex/config.toml'), [
        'model_provider = "scripted"',
        'model = "scripted"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        '',
        '[model_providers.scripted]',
        'name = "scripted"',
        `base_url = "http://127.0.0.1:${PORT}/v1"`,
        'wire_api = "responses"',
        'env_key = "SCRIPTED_API_KEY"',
        '',
        '[analytics]',
        'enabled = false',
        '',
        '[features]',
        'plugins = false',
        'remote_plugin = false',
        'apps = false',
        '',
      ].join('\n'));
      return { CODEX_HOME: join(home, '.codex'), SCRIPTED_API_KEY: 'dummy' };
    },
    argv: (prompt) => [bin('codex'), 'exec', '--skip-git-repo-check', '--json', prompt],
    sessionId: (stdout) => firstJsonLine(stdout, (e) => e.type === 'thread.started' && e.thread_id),
    callIds: true,
  },
  {
    name: 'gemini',
    configure(home) {
      write(join(home, '.gemini/settings.json'), json({
        security: { auth: { selectedType: 'gemini-api-key' }, folderTrust: { enabled: false } },
        privacy: { usageStatisticsEnabled: false },
        telemetry: { enabled: false },
        general: { enableAutoUpdate: false },
        // The user's own hook, of another event.
        hooks: { SessionStart: [{ hooks: [{ type: 'command', command: 'true' }] }] },
      }));
      return { GEMINI_API_KEY: 'dummy', GOOGLE_GEMINI_BASE_URL: `http://127.0.0.1:${PORT}` };
    },
    argv: (prompt) => [bin('gemini'), '-p', prompt, '--yolo', '--output-format', 'json'],
    sessionId: (stdout) => JSON.parse(stdout).session_id,
    // Gemini CLI gives its hooks no call id: the adapter makes one per call.
    callIds: false,
  },
  {
    name: 'opencode',
    configure(home, work) {
      const config = join(home, '.config');
      layOutOpencodePlugin(join(config, 'opencode'));
      // The user's own plugin, which setup must leave alone.
      write(join(config, 'opencode/plugin/mine.js'), 'export const Mine = async () => ({});\n');
      write(join(work, 'opencode.json'), json({
        $schema: 'https://opencode.ai/config.json',
        provider: {
          scripted: {
            npm: '@ai-sdk/openai-compatible',
            name: 'Scripted',
            options: { baseURL: `http://127.0.0.1:${PORT}/v1`, apiKey: 'dummy' },
            models: { model: { name: 'model', tool_call: true } },
          },
        },
        model: 'scripted/model',
        small_model: 'scripted/model',
        permission: { bash: 'allow' },
      }));
      return {
        XDG_CONFIG_HOME: config,
        XDG_DATA_HOME: join(home, '.local/share'),
        XDG_CACHE_HOME: join(home, '.cache'),
        XDG_STATE_HOME: join(home, '.local/state'),
        OPENCODE_DISABLE_MODELS_FETCH: '1',
        OPENCODE_DISABLE_AUTOUPDATE: '1',
        OPENCODE_DISABLE_SHARE: '1',
        OPENCODE_DISABLE_LSP_DOWNLOAD: '1',
        OPENCODE_DISABLE_DEFAULT_PLUGINS: '1',
      };
    },
    argv: (prompt) => [bin('opencode'), 'run', '--format', 'json', prompt],
    sessionId: (stdout) => firstJsonLine(stdout, (e) => e.sessionID),
    callIds: true,
  },
];
