// The Node door of the cross-door test (cli/doors.rs): the @dsh-env/node
// package's own index.js, beside the addon the test names, opens a registry
// from a manifest, registers it and runs one bash call, then prints what it
// gave as one JSON line: {"stdout": …}, or {"error": {code, class, message,
// contributor?, key?, file?, limit?}} as a caller catches it.
// Usage: node doors_addon.cjs <job.json>
'use strict';
const { copyFileSync, readFileSync } = require('node:fs');
const { join } = require('node:path');

const job = JSON.parse(readFileSync(process.argv[2], 'utf8'));
// index.js loads the addon found beside it, under napi-rs's name.
copyFileSync(job.index, join(job.dir, 'index.js'));
copyFileSync(job.addon, join(job.dir, 'dsh-env.linux-x64-gnu.node'));
const { Registry } = require(join(job.dir, 'index.js'));

async function call() {
  const registry = Registry.open({ home: job.home, compiler: job.compiler, manifest: job.manifest });
  await registry.registerManifest(job.manifest);
  const result = await registry.exec(job.execution, job.command);
  return { stdout: result.stdout };
}

call().then(
  (answer) => console.log(JSON.stringify(answer)),
  (error) => {
    const fields = { class: error.constructor.name };
    for (const name of ['code', 'message', 'contributor', 'key', 'file', 'limit']) {
      if (error[name] !== undefined) fields[name] = error[name];
    }
    console.log(JSON.stringify({ error: fields }));
  },
);
