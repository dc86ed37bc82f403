// A TypeScript bash tool that takes its managed environment from the addon,
// in the shape of the reference harness's ShellExecutionRequest.dshEnv.
// Type-checked and run by the tests (test/examples.test.mjs); run it after
// `npm run build`: `node bash-tool.js <component.wasm>` once compiled.

import { spawn } from 'node:child_process';

import { ContributorError, Registry, type ToolExecution } from '@dsh-env/node';

/** The reference harness's request to its shell executor. */
interface ShellExecutionRequest {
  command: string;
  workdir: string;
  timeoutMs: number;
  stdin?: string;
  /** Ordinary variables the caller sets; no DSH_* name. */
  env: Record<string, string>;
  /** The managed overlay, applied last: a missing key means "absent now". */
  dshEnv: Readonly<Record<string, string>>;
}

interface ShellResult {
  exitCode: number | null;
  output: string;
}

/** Runs a request: inherited env minus every DSH_* name, then env, then dshEnv. */
function runShell(request: ShellExecutionRequest): Promise<ShellResult> {
  const inherited = Object.fromEntries(
    Object.entries(process.env).filter(
      (entry): entry is [string, string] => !entry[0].toUpperCase().startsWith('DSH_') && entry[1] !== undefined,
    ),
  );
  const child = spawn('bash', ['-c', request.command], {
    cwd: request.workdir,
    env: { ...inherited, ...request.env, ...request.dshEnv },
    timeout: request.timeoutMs,
  });
  // A command that exits without reading its stdin closes the pipe: the
  // write then fails with EPIPE, which is not the command's failure.
  child.stdin.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') child.kill();
  });
  child.stdin.end(request.stdin ?? '');
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (exitCode) => resolve({ exitCode, output }));
  });
}

/** The bash tool: one collect per call, then the shell. */
export async function bashTool(registry: Registry, execution: ToolExecution, command: string): Promise<ShellResult> {
  let dshEnv: Record<string, string>;
  try {
    dshEnv = (await registry.collect(execution)).overlay;
  } catch (error) {
    if (error instanceof ContributorError) {
      return { exitCode: null, output: `dsh-env: contributor ${error.contributor ?? '?'} failed: ${error.message}` };
    }
    throw error;
  }
  const workdir = execution.agent?.session.header.cwd ?? process.cwd();
  return runShell({ command, workdir, timeoutMs: 120_000, env: {}, dshEnv });
}

async function main(): Promise<void> {
  const [component = 'agent_lineage.wasm'] = process.argv.slice(2);
  const registry = Registry.open();
  const lineage = await registry.register(component);
  const execution: ToolExecution = {
    callId: 'call-1',
    rootCallId: 'call-0',
    name: 'bash',
    background: false,
    agent: { session: { header: { version: 1, id: 'child-1', createdAt: Date.now(), cwd: process.cwd(), parentSession: 'parent-1', delegationDepth: 1 } } },
  };
  const result = await bashTool(registry, execution, 'echo "$DSH_PARENT_SESSION_ID"');
  process.stdout.write(result.output);
  lineage.dispose();
}

if (require.main === module) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
