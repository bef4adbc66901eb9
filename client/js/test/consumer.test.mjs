// The package as a TypeScript application gets it (issue 19): `npm pack`,
// `npm install` of the tarball into a fresh project, compiled with
// `tsc --strict` (the sandbox object API's types: provider union, per-provider
// options, camelCase results, await using), then run against sbxd.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync, readdirSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { group, test } from './harness.mjs';

const pkgDir = new URL('..', import.meta.url).pathname;
const SOCK = process.env.SBXD_SOCKET;
const TSC = join(pkgDir, 'node_modules', '.bin', 'tsc');

const app = `import { Sandbox, AbortError, type CommandResult, type SandboxCreateOptions } from 'sbxd';

const opts: SandboxCreateOptions = { provider: 'duktape', socketPath: process.argv[2] };
// @ts-expect-error js has no Docker options: a typo or a wrong provider fails to compile
const wrong: SandboxCreateOptions = { provider: 'js', options: { memory: '1g' } };
// @ts-expect-error an unknown provider name is not a provider
const unknown: SandboxCreateOptions = { provider: 'dokcer' };
void wrong; void unknown;

async function main(): Promise<void> {
    await using sb = await Sandbox.create(opts);
    const r: CommandResult = await sb.commands.run('console.log("typed"); 40 + 2');
    const code: number = r.exitCode;
    const ac = new AbortController();
    const p = sb.commands.run('while (true) {}', { signal: ac.signal });
    setTimeout(() => ac.abort(), 100);
    let aborted = false;
    try { await p; } catch (e) { aborted = e instanceof AbortError; }
    console.log(JSON.stringify({ stdout: r.stdout, code, result: r.result, aborted }));
}
await main();
`;

group('consumer', () => {
    test('npm pack + install into a fresh project: compiles with tsc --strict and runs', async () => {
        const dir = mkdtempSync(join(tmpdir(), 'sbxd-consumer-'));
        try {
            execFileSync('npm', ['pack', '--pack-destination', dir], { cwd: pkgDir, stdio: 'ignore' });
            const tgz = readdirSync(dir).find((f) => f.endsWith('.tgz'));
            const files = execFileSync('tar', ['-tzf', join(dir, tgz)]).toString();
            for (const f of ['package/README.md', 'package/LICENSE', 'package/CHANGELOG.md',
                'package/dist/index.d.ts.map', 'package/dist/sandbox.js.map', 'package/dist/sandbox.d.ts'])
                assert.ok(files.includes(f), `${f} is in the tarball`);
            const proj = join(dir, 'app');
            execFileSync('mkdir', ['-p', proj]);
            writeFileSync(join(proj, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
            execFileSync('npm', ['install', '--no-audit', '--no-fund', '--offline', '--engine-strict=false',
                join(dir, tgz)], { cwd: proj, stdio: 'pipe' });
            assert.ok(existsSync(join(proj, 'node_modules', 'sbxd', 'dist', 'index.js')));
            writeFileSync(join(proj, 'index.ts'), app);
            writeFileSync(join(proj, 'tsconfig.json'), JSON.stringify({
                compilerOptions: {
                    target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true,
                    lib: ['ES2022', 'ESNext.Disposable', 'DOM'], types: [], skipLibCheck: false,
                    noEmitOnError: true, outDir: 'out',
                },
                files: ['index.ts'],
            }));
            // Node's own types are not installed in the fresh project: process.argv is declared.
            writeFileSync(join(proj, 'node.d.ts'), 'declare const process: { argv: string[] };\n');
            const tsconfig = JSON.parse(execFileSync('cat', [join(proj, 'tsconfig.json')]).toString());
            tsconfig.files.push('node.d.ts');
            writeFileSync(join(proj, 'tsconfig.json'), JSON.stringify(tsconfig));
            try {
                execFileSync(TSC, ['-p', 'tsconfig.json'], { cwd: proj, stdio: 'pipe' });
            } catch (e) {
                throw new Error(`tsc --strict failed:\n${e.stdout}${e.stderr}`);
            }
            const out = JSON.parse(execFileSync('node', [join(proj, 'out', 'index.js'), SOCK], { cwd: proj }).toString());
            assert.deepEqual(out, { stdout: 'typed\n', code: 0, result: 42, aborted: true });
        } finally {
            rmSync(dir, { recursive: true, force: true });
        }
    }, { timeout: 180000 });
});
