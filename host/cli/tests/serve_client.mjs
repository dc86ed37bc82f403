// A harness written in another language: drives `dsh-env serve` over
// newline-delimited JSON-RPC 2.0, checks every method's answer, and checks
// every message it sends or sees against host/cli/protocol.schema.json.
// Usage: node serve_client.mjs <dsh-env binary> <home> <agent_lineage.wasm>
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import assert from "node:assert/strict";

const [binary, home, lineage] = process.argv.slice(2);
const schema = JSON.parse(readFileSync(new URL("../protocol.schema.json", import.meta.url)));

// A validator for the subset of JSON Schema the protocol's schema uses.
// Returns the problems found, each as "path: what".
function validate(value, node, path = "$") {
  if (node.$ref) {
    const target = node.$ref.slice(2).split("/").reduce((at, part) => at[part], schema);
    assert.ok(target, `unknown $ref ${node.$ref}`);
    return validate(value, target, path);
  }
  const known = new Set(["$schema", "$id", "$defs", "title", "description", "type", "const", "enum",
    "pattern", "minimum", "maximum", "maxProperties", "properties", "required", "additionalProperties", "items", "oneOf", "$ref"]);
  for (const keyword of Object.keys(node)) assert.ok(known.has(keyword), `unsupported keyword ${keyword}`);
  const problems = [];
  const kind = value === null ? "null" : Array.isArray(value) ? "array"
    : Number.isInteger(value) ? "integer" : typeof value;
  if (node.type) {
    const types = [node.type].flat();
    const ok = types.includes(kind) || (kind === "integer" && types.includes("number"));
    if (!ok) return [`${path}: is ${kind}, not ${types.join(" or ")}`];
  }
  if ("const" in node && JSON.stringify(value) !== JSON.stringify(node.const)) {
    problems.push(`${path}: is not ${JSON.stringify(node.const)}`);
  }
  if (node.enum && !node.enum.some((v) => JSON.stringify(v) === JSON.stringify(value))) {
    problems.push(`${path}: ${JSON.stringify(value)} is not one of ${JSON.stringify(node.enum)}`);
  }
  if (node.pattern && typeof value === "string" && !new RegExp(node.pattern, "u").test(value)) {
    problems.push(`${path}: ${JSON.stringify(value)} does not match ${node.pattern}`);
  }
  if (node.minimum !== undefined && typeof value === "number" && value < node.minimum) {
    problems.push(`${path}: ${value} is below ${node.minimum}`);
  }
  if (node.maximum !== undefined && typeof value === "number" && value > node.maximum) {
    problems.push(`${path}: ${value} is above ${node.maximum}`);
  }
  if (node.maxProperties !== undefined && kind === "object" && Object.keys(value).length > node.maxProperties) {
    problems.push(`${path}: has more than ${node.maxProperties} members`);
  }
  if (kind === "object") {
    for (const name of node.required ?? []) {
      if (!(name in value)) problems.push(`${path}: lacks ${name}`);
    }
    for (const [name, member] of Object.entries(value)) {
      const sub = node.properties?.[name] ?? node.additionalProperties;
      if (sub === false) problems.push(`${path}: unexpected member ${name}`);
      else if (sub !== undefined && sub !== true) problems.push(...validate(member, sub, `${path}.${name}`));
    }
  }
  if (kind === "array" && node.items) {
    value.forEach((item, i) => problems.push(...validate(item, node.items, `${path}[${i}]`)));
  }
  if (node.oneOf) {
    const matching = node.oneOf.filter((option) => validate(value, option, path).length === 0);
    if (matching.length !== 1) problems.push(`${path}: matches ${matching.length} of oneOf, not 1`);
  }
  return problems;
}

function check(value, node, what) {
  const problems = validate(value, node);
  assert.deepEqual(problems, [], `${what} breaks the schema: ${JSON.stringify(value)}`);
}

// The validator itself must refuse what the schema forbids.
assert.notDeepEqual(validate({ jsonrpc: "2.0", id: 1, result: 1, extra: 1 }, schema), []);
assert.notDeepEqual(validate({ jsonrpc: "2.0", id: 1, error: { code: -1, message: "" } }, schema), []);
assert.notDeepEqual(validate({ disposed: false }, schema.$defs.results.dispose), []);

// A stale DSH_* name in its environment, which no command may get.
const server = spawn(binary, ["serve", "--home", home], {
  stdio: ["pipe", "pipe", "inherit"],
  env: { ...process.env, DSH_STALE: "old" },
});
const pending = new Map();
const arrivals = [];
createInterface({ input: server.stdout }).on("line", (line) => {
  const message = JSON.parse(line);
  check(message, schema, "a message from the server");
  assert.ok(!Array.isArray(message), "no batch was sent");
  assert.ok(pending.has(message.id), `an answer to no pending request: ${line}`);
  const { method, resolve } = pending.get(message.id);
  if ("result" in message) check(message.result, schema.$defs.results[method], `the result of ${method}`);
  arrivals.push(message.id);
  pending.delete(message.id);
  resolve(message);
});
// `paramsValid`: false for params sent to be refused.
function send(message, paramsValid = true) {
  check(message, schema, "a message to the server");
  if (paramsValid && schema.$defs.params[message.method] && message.params) {
    check(message.params, schema.$defs.params[message.method], `the params of ${message.method}`);
  }
  server.stdin.write(JSON.stringify(message) + "\n");
}
let nextId = 1;
function call(method, params, paramsValid = true) {
  const id = nextId++;
  send({ jsonrpc: "2.0", id, method, params }, paramsValid);
  return new Promise((resolve) => pending.set(id, { method, resolve }));
}
const execution = {
  callId: "c1",
  name: "bash",
  arguments: { command: "ignored", env: { DSH_X: "1" } },
  agent: { session: { header: { version: 1, id: "child", createdAt: 0, cwd: "/tmp", parentSession: "parent", delegationDepth: 1 } } },
};

const initialized = await call("initialize", {});
assert.equal(initialized.result.protocol_version, 2);
assert.ok(initialized.result.contracts.some((c) => c.version === "0.1.0" && c.accepts === "0.1.x"));

// A notification is run, never answered: an answer would find no pending id.
send({ jsonrpc: "2.0", method: "list", params: {} });

const registered = await call("register", { path: lineage });
assert.deepEqual(registered.result, { name: "agent-lineage", keys: ["DSH_AGENT_DEPTH", "DSH_PARENT_SESSION_ID"] });

const list = await call("list", {});
assert.deepEqual(list.result.map((row) => row.key), [
  "DSH_AGENT_DEPTH", "DSH_HOME", "DSH_PARENT_SESSION_ID", "DSH_SESSION_ID", "DSH_SHELL",
]);

const collected = await call("collect", { execution });
assert.deepEqual(collected.result.overlay, {
  DSH_AGENT_DEPTH: "1", DSH_HOME: home, DSH_PARENT_SESSION_ID: "parent", DSH_SESSION_ID: "child", DSH_SHELL: "1",
});

// What an OpenCode-like client's own shell must change: the server's
// environment is the client's.
const shellEnv = await call("shell_env", { execution });
assert.deepEqual(shellEnv.result.set, collected.result.overlay);
assert.ok(shellEnv.result.unset.includes("DSH_STALE"));

const ran = await call("exec", {
  execution, command: 'printf "%s|%s|%s|%s" "$DSH_SESSION_ID" "$FOO" "${DSH_STALE-unset}" "$(cat)"',
  env: { FOO: "bar" }, stdin: "piped",
});
assert.deepEqual(ran.result, {
  exit_code: 0, stdout: "child|bar|unset|piped", stderr: "", timed_out: false, truncated: false,
});

// Concurrent: a list sent after a slow exec is answered first.
arrivals.length = 0;
const [slow, quick] = await Promise.all([
  call("exec", { execution, command: "sleep 1" }), call("list", {}),
]);
assert.deepEqual(arrivals, [quick.id, slow.id]);

const refused = await call("exec", { execution, command: "true", env: { DSH_SESSION_ID: "forged" } });
assert.equal(refused.error.code, -32000);
assert.match(refused.error.message, /DSH_SESSION_ID` is in the managed DSH_\* namespace/);
assert.deepEqual(refused.error.data, { key: "DSH_SESSION_ID" });

const disposed = await call("dispose", { name: "agent-lineage" });
assert.deepEqual(disposed.result, { disposed: true });
const after = await call("collect", { execution: { callId: "c2", name: "bash" } });
assert.deepEqual(Object.keys(after.result.overlay), ["DSH_HOME", "DSH_SHELL"]);

assert.equal((await call("nope", {})).error.code, -32601);
assert.equal((await call("collect", { execution: { name: "bash" } }, false)).error.code, -32602);
const missing = await call("register", { path: "/no/such.wasm" });
assert.equal(missing.error.code, -32000);
assert.deepEqual(missing.error.data, { file: "/no/such.wasm" });
const badLimit = await call("register", { path: lineage, limits: { deadline_ms: 0 } }, false);
assert.deepEqual(badLimit.error.data, { limit: "deadline_ms" });

// Hooks, set by initialize (a document): their notes in exec's result, a
// block as -32001.
const hooks = {
  hooks: {
    PreToolUse: [{ matcher: "Bash", hooks: [{ type: "command", command: 'case "$(cat)" in *forbidden*) echo "not today" >&2; exit 2;; esac' }] }],
    PostToolUse: [{ hooks: [{ type: "command", command: `cat >/dev/null; echo '{"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "seen"}}'` }] }],
  },
};
assert.ok((await call("initialize", { hooks })).result);
const hooked = await call("exec", { execution, command: "echo fine", permission_mode: "default" });
assert.deepEqual(hooked.result.hooks, { context: ["seen"], feedback: [] });
const blocked = await call("exec", { execution, command: "echo forbidden" });
assert.equal(blocked.error.code, -32001);
assert.match(blocked.error.message, /blocked by a PreToolUse hook: not today/);

server.stdin.end();
const code = await new Promise((resolve) => server.on("exit", resolve));
assert.equal(code, 0);
assert.equal(pending.size, 0);
console.log("serve client: all checks passed");
