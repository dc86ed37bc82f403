// A harness written in another language: drives `dsh-env serve` over
// newline-delimited JSON-RPC 2.0 and checks every method's answer.
// Usage: node serve_client.mjs <dsh-env binary> <home> <agent_lineage.wasm>
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import assert from "node:assert/strict";

const [binary, home, lineage] = process.argv.slice(2);
const server = spawn(binary, ["serve", "--home", home], { stdio: ["pipe", "pipe", "inherit"] });
const pending = new Map();
createInterface({ input: server.stdout }).on("line", (line) => {
  const message = JSON.parse(line);
  pending.get(message.id)(message);
  pending.delete(message.id);
});
let nextId = 1;
function call(method, params) {
  const id = nextId++;
  server.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
  return new Promise((resolve) => pending.set(id, resolve));
}
const execution = {
  callId: "c1",
  name: "bash",
  arguments: { command: "ignored", env: { DSH_X: "1" } },
  agent: { session: { header: { id: "child", cwd: "/tmp", parentId: "parent" } }, depth: 1 },
};

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

const ran = await call("exec", {
  execution, command: 'printf "%s|%s|%s|%s" "$DSH_SESSION_ID" "$FOO" "${DSH_STALE-unset}" "$(cat)"',
  env: { FOO: "bar" }, stdin: "piped",
});
assert.deepEqual(ran.result, {
  exit_code: 0, stdout: "child|bar|unset|piped", stderr: "", timed_out: false, truncated: false,
});

const refused = await call("exec", { execution, command: "true", env: { DSH_SESSION_ID: "forged" } });
assert.equal(refused.error.code, -32000);
assert.match(refused.error.message, /DSH_SESSION_ID` is in the managed DSH_\* namespace/);

const disposed = await call("dispose", { name: "agent-lineage" });
assert.deepEqual(disposed.result, { disposed: true });
const after = await call("collect", { execution: { callId: "c2", name: "bash" } });
assert.deepEqual(Object.keys(after.result.overlay), ["DSH_HOME", "DSH_SHELL"]);

assert.equal((await call("nope", {})).error.code, -32601);
assert.equal((await call("collect", { execution: { name: "bash" } })).error.code, -32602);
assert.equal((await call("register", { path: "/no/such.wasm" })).error.code, -32000);

server.stdin.end();
const code = await new Promise((resolve) => server.on("exit", resolve));
assert.equal(code, 0);
console.log("serve client: all checks passed");
