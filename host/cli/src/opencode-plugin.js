// dsh-env: written by `dsh-env setup opencode`; `dsh-env setup opencode --remove` removes it.
//
// Gives each call of OpenCode's bash tool the dsh-env overlay, with the same
// scrub as `dsh-env run`, through one `dsh-env serve` kept for this OpenCode
// process (JSON-RPC on its stdio, method `shell_env`). A contributor that
// fails fails the call, with its reason, before the command runs.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";

// The server's argv: the dsh-env binary, `serve`, the manifest.
const SERVE = __SERVE__;

export const DshEnv = async () => {
  let server = null;
  let next = 0;
  const pending = new Map();

  const start = () => {
    // It inherits OpenCode's environment, as OpenCode's shell does: what it
    // says to unset is computed against that.
    const child = spawn(SERVE[0], SERVE.slice(1), { stdio: ["pipe", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (chunk) => {
      stderr = (stderr + chunk).slice(-4000);
    });
    createInterface({ input: child.stdout }).on("line", (line) => {
      let message;
      try {
        message = JSON.parse(line);
      } catch {
        return;
      }
      const waiter = pending.get(message.id);
      if (!waiter) return;
      pending.delete(message.id);
      if (message.error) waiter.reject(new Error(message.error.message));
      else waiter.resolve(message.result);
    });
    const fail = (why) => {
      if (server === child) server = null;
      for (const waiter of pending.values()) waiter.reject(new Error(why));
      pending.clear();
    };
    child.on("error", (err) => fail(`cannot start dsh-env serve: ${err.message}`));
    child.on("exit", (code, signal) => {
      const last = stderr.trim().split("\n").pop() || "no message";
      fail(`dsh-env serve ended (${signal ?? `exit ${code}`}): ${last}`);
    });
    child.stdin.on("error", () => {});
    // OpenCode's exit is not held up by the server: its stdin closes then,
    // and it ends.
    child.unref();
    for (const stream of [child.stdin, child.stdout, child.stderr]) stream.unref?.();
    return child;
  };

  const call = (method, params) =>
    new Promise((resolve, reject) => {
      server ??= start();
      const id = ++next;
      pending.set(id, { resolve, reject });
      server.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
    });

  return {
    "shell.env": async (input, output) => {
      // OpenCode's own terminal is no tool call: it is left as it is.
      if (!input.callID || !input.sessionID) return;
      const execution = {
        callId: input.callID,
        name: "bash",
        agent: { session: { header: { id: input.sessionID, cwd: input.cwd } } },
      };
      let answer;
      try {
        answer = await call("shell_env", { execution });
      } catch (err) {
        throw new Error(`dsh-env: ${err.message}`);
      }
      // Bun's spawn leaves out a variable whose value is undefined.
      for (const name of answer.unset) output.env[name] = undefined;
      Object.assign(output.env, answer.set);
    },
    dispose: async () => {
      server?.stdin.end();
    },
  };
};
