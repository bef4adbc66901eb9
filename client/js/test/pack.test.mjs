// The package as an application gets it: `npm pack`, unpacked into an empty
// app's node_modules. `sbxd` must import and work with nothing else there (no
// runtime dependencies); `sbxd/mastra` must use the app's own @mastra/core
// (a peer dependency), so its classes are the app's classes.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, symlinkSync, writeFileSync, rmSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { group, test } from './harness.mjs';

const pkgDir = new URL('..', import.meta.url).pathname;
const SOCK = process.env.SBXD_SOCKET;

group('package', () => {
    test('npm pack: sbxd imports and talks to sbxd with no other package installed; sbxd/mastra uses the app\'s @mastra/core', async () => {
        const dir = mkdtempSync(join(tmpdir(), 'sbxd-pack-'));
        try {
            execFileSync('npm', ['pack', '--pack-destination', dir], { cwd: pkgDir, stdio: 'ignore' });
            const tgz = readdirSync(dir).find((f) => f.endsWith('.tgz'));
            const app = join(dir, 'app');
            mkdirSync(join(app, 'node_modules', 'sbxd'), { recursive: true });
            execFileSync('tar', ['-xzf', join(dir, tgz), '-C', join(app, 'node_modules', 'sbxd'), '--strip-components=1']);
            writeFileSync(join(app, 'package.json'), '{"type": "module"}');
            writeFileSync(
                join(app, 'client.mjs'),
                `import { SbxdClient } from 'sbxd';
                 const c = new SbxdClient({ socketPath: process.argv[2] });
                 console.log((await c.ping()).pong);`,
            );
            assert.equal(execFileSync('node', ['client.mjs', SOCK], { cwd: app }).toString().trim(), 'true');
            // Without @mastra/core, sbxd/mastra says so; with the app's, it extends it.
            writeFileSync(
                join(app, 'mastra.mjs'),
                `import { SbxdSandbox } from 'sbxd/mastra';
                 import { MastraSandbox } from '@mastra/core/workspace';
                 console.log(new SbxdSandbox({ socketPath: process.argv[2] }) instanceof MastraSandbox);`,
            );
            assert.throws(() => execFileSync('node', ['mastra.mjs', SOCK], { cwd: app, stdio: 'pipe' }), /@mastra\/core/);
            mkdirSync(join(app, 'node_modules', '@mastra'));
            symlinkSync(join(pkgDir, 'node_modules', '@mastra', 'core'), join(app, 'node_modules', '@mastra', 'core'));
            assert.equal(execFileSync('node', ['mastra.mjs', SOCK], { cwd: app }).toString().trim(), 'true');
        } finally {
            rmSync(dir, { recursive: true, force: true });
        }
    }, { timeout: 120000 });
});
