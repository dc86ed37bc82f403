// Puts a built addon and compile helper into the platform package, as
// napi-rs's `napi artifacts` does for the addon alone: the helper must
// travel beside the addon, which looks for it there.
//
//   node scripts/artifacts.mjs <addon.node|libdsh_env_node.so> <dsh-env-compile> [<package dir>]
//
// The package dir defaults to npm/linux-x64-gnu, the host's; the addon is
// named as the package's `main` says (dsh-env.<platform>.node).
import { chmodSync, copyFileSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('.', import.meta.url));
const [addon, helper, dir = resolve(here, '../npm/linux-x64-gnu')] = process.argv.slice(2);
if (!addon || !helper) {
  console.error('usage: node scripts/artifacts.mjs <addon> <dsh-env-compile> [<package dir>]');
  process.exit(2);
}
const { main } = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
copyFileSync(addon, join(dir, main));
copyFileSync(helper, join(dir, 'dsh-env-compile'));
chmodSync(join(dir, 'dsh-env-compile'), 0o755);
console.log(`artifacts: ${addon} and ${helper} into ${dir}`);
