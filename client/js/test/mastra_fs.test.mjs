// SbxdFilesystem (Mastra's WorkspaceFilesystem on fs.*) against the docker
// provider at $SBXD_DOCKER_SOCKET: what Mastra's filesystem test suite checks
// of LocalFilesystem, with the files really inside the sandbox.
import assert from 'node:assert/strict';
import { group, test } from './harness.mjs';
import { SbxdClient } from '../dist/index.js';
import { SbxdFilesystem } from '../dist/mastra.js';
import {
    FileNotFoundError,
    DirectoryNotFoundError,
    FileExistsError,
    IsDirectoryError,
    NotDirectoryError,
    DirectoryNotEmptyError,
    PermissionError,
} from '@mastra/core/workspace';

const DSOCK = process.env.SBXD_DOCKER_SOCKET;
const SKIP = DSOCK ? undefined : process.env.SBXD_DOCKER_SKIP || 'no Docker engine';
const IMAGE = process.env.SBXD_DOCKER_IMAGE || 'sbx-test/busybox';

group('mastra filesystem', () => {
    let c, sb, fs;
    const sh = async (cmd) => (await c.exec({ sandbox: sb.id, command: cmd })).stdout.trim();
    test('setup: init creates basePath', async () => {
        c = new SbxdClient({ socketPath: DSOCK });
        sb = await c.createSandbox({ provider: 'docker', image: IMAGE });
        fs = new SbxdFilesystem({ sandbox: sb.id, client: c, basePath: '/workspace/ws' });
        await fs._init();
        assert.equal(fs.status, 'ready');
        assert.equal(await sh('test -d /workspace/ws && echo yes'), 'yes');
    });
    test('writeFile / readFile (Buffer without encoding, string with), inside the sandbox', async () => {
        await fs.writeFile('/notes/a.md', 'hello\n');
        assert.equal(await sh('cat /workspace/ws/notes/a.md'), 'hello');
        assert.ok(Buffer.isBuffer(await fs.readFile('/notes/a.md')));
        assert.equal(await fs.readFile('notes/a.md', { encoding: 'utf-8' }), 'hello\n');
        await fs.writeFile('/bin.dat', Buffer.from([0, 255, 7]));
        assert.deepEqual([...(await fs.readFile('/bin.dat'))], [0, 255, 7]);
    });
    test('errors: missing file, directory, overwrite false, recursive false', async () => {
        await assert.rejects(fs.readFile('/nope'), FileNotFoundError);
        await assert.rejects(fs.readFile('/notes'), IsDirectoryError);
        await assert.rejects(fs.writeFile('/notes/a.md', 'x', { overwrite: false }), FileExistsError);
        await assert.rejects(fs.writeFile('/no/dir/f', 'x', { recursive: false }), DirectoryNotFoundError);
        await assert.rejects(fs.readdir('/notes/a.md'), NotDirectoryError);
        await assert.rejects(fs.readdir('/missing'), DirectoryNotFoundError);
        await assert.rejects(fs.readFile('/../../etc/passwd'), PermissionError);
    });
    test('appendFile, exists, stat', async () => {
        await fs.appendFile('/notes/a.md', 'more\n');
        assert.equal(await fs.readFile('/notes/a.md', { encoding: 'utf-8' }), 'hello\nmore\n');
        assert.equal(await fs.exists('/notes/a.md'), true);
        assert.equal(await fs.exists('/notes/zzz'), false);
        const st = await fs.stat('/notes/a.md');
        assert.equal(st.type, 'file');
        assert.equal(st.size, 11);
        assert.equal(st.name, 'a.md');
        assert.equal((await fs.stat('/notes')).type, 'directory');
    });
    test('mkdir, readdir (recursive, extension), rmdir', async () => {
        await fs.mkdir('/tree/x/y');
        await fs.writeFile('/tree/x/y/f.ts', 'ts');
        await fs.writeFile('/tree/g.js', 'js');
        const flat = await fs.readdir('/tree');
        assert.deepEqual(flat.map((e) => `${e.name}:${e.type}`), ['g.js:file', 'x:directory']);
        const deep = await fs.readdir('/tree', { recursive: true });
        assert.ok(deep.some((e) => e.name === 'x/y/f.ts' && e.type === 'file' && e.size === 2));
        const ts = await fs.readdir('/tree', { recursive: true, extension: '.ts' });
        assert.deepEqual(ts.filter((e) => e.type === 'file').map((e) => e.name), ['x/y/f.ts']);
        await assert.rejects(fs.rmdir('/tree'), DirectoryNotEmptyError);
        await assert.rejects(fs.rmdir('/tree/g.js'), NotDirectoryError);
        await fs.rmdir('/tree', { recursive: true });
        assert.equal(await fs.exists('/tree'), false);
        await fs.rmdir('/tree', { force: true });
    });
    test('copyFile, moveFile, deleteFile', async () => {
        await fs.copyFile('/notes/a.md', '/copy/b.md');
        assert.equal(await fs.readFile('/copy/b.md', { encoding: 'utf-8' }), 'hello\nmore\n');
        await assert.rejects(fs.copyFile('/notes', '/n2'), IsDirectoryError);
        await fs.copyFile('/notes', '/n2', { recursive: true });
        assert.equal(await fs.exists('/n2/a.md'), true);
        await fs.moveFile('/copy/b.md', '/moved/c.md');
        assert.equal(await fs.exists('/copy/b.md'), false);
        assert.equal(await sh('cat /workspace/ws/moved/c.md | head -1'), 'hello');
        await assert.rejects(fs.moveFile('/n2/a.md', '/moved/c.md', { overwrite: false }), FileExistsError);
        await fs.deleteFile('/moved/c.md');
        await assert.rejects(fs.deleteFile('/moved/c.md'), FileNotFoundError);
        await fs.deleteFile('/moved/c.md', { force: true });
        await assert.rejects(fs.deleteFile('/moved'), IsDirectoryError);
    });
    test('readOnly refuses writes', async () => {
        const ro = new SbxdFilesystem({ sandbox: sb.id, client: c, basePath: '/workspace/ws', readOnly: true });
        await ro._init();
        assert.equal(await ro.readFile('/notes/a.md', { encoding: 'utf-8' }), 'hello\nmore\n');
        await assert.rejects(ro.writeFile('/x', 'y'), PermissionError);
    });
    test('teardown', async () => {
        await c.destroySandbox(sb.id);
        c.close();
    });
}, { skip: SKIP });
