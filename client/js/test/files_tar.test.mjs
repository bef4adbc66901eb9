// Trees as one tar stream (files.uploadDir, files.writeArchive) on the docker
// provider at $SBXD_DOCKER_SOCKET: a local tree with nested directories, a name
// past ustar's 100 bytes, unicode, a symlink and an executable mode arrives
// exact (digests checked inside the sandbox), owned by the command user, over
// one raw transfer; base64 chunks under SBXD_FS_TRANSPORT=json give the same;
// a system tar's archive goes in through writeArchive; a local file that grows
// while it is packed fails the upload.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync, readFileSync, appendFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { group, test } from './harness.mjs';
import { SbxdClient } from '../dist/index.js';

const DSOCK = process.env.SBXD_DOCKER_SOCKET;
const SKIP = DSOCK ? undefined : process.env.SBXD_DOCKER_SKIP || 'no Docker engine';
const IMAGE = process.env.SBXD_DOCKER_IMAGE || 'sbx-test/busybox';
const md5 = (b) => createHash('md5').update(b).digest('hex');
const LONG = `${'n'.repeat(60)}/${'ü'.repeat(40)}.txt`; // 141 bytes: a PAX path record

/** A local tree: name -> bytes, plus a symlink and an executable. */
function makeTree() {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'sbxd-tar-'));
    const files = { 'a.txt': Buffer.from('alpha\n'), 'sub/deep/b.bin': randomBytes(300_000), [LONG]: Buffer.from('long name\n'), 'empty': Buffer.alloc(0) };
    for (const [n, b] of Object.entries(files)) {
        mkdirSync(path.dirname(path.join(dir, n)), { recursive: true });
        writeFileSync(path.join(dir, n), b);
    }
    writeFileSync(path.join(dir, 'run.sh'), '#!/bin/sh\necho ran\n');
    chmodSync(path.join(dir, 'run.sh'), 0o755);
    files['run.sh'] = readFileSync(path.join(dir, 'run.sh'));
    symlinkSync('a.txt', path.join(dir, 'link'));
    return { dir, files };
}

group('files tar (docker)', () => {
    let c, sb, f;
    const sh = async (cmd) => (await c.exec({ sandbox: sb.id, command: cmd })).stdout.trim();
    const tree = makeTree();
    const checkTree = async (at) => {
        for (const [n, b] of Object.entries(tree.files))
            assert.equal((await sh(`md5sum '${at}/${n}'`)).split(' ')[0], md5(b), `${n} arrived exact`);
        assert.equal(await sh(`readlink ${at}/link`), 'a.txt', 'the symlink is a symlink');
        assert.equal(await sh(`${at}/run.sh`), 'ran', 'the mode kept it executable');
        assert.equal(await sh(`stat -c %u ${at}/sub/deep/b.bin`), await sh('id -u'), 'owned by the command user');
    };
    test('setup', async () => {
        c = new SbxdClient({ socketPath: DSOCK });
        sb = await c.createSandbox({ provider: 'docker', image: IMAGE, id: `ftar-${process.pid}` });
        f = c.files(sb.id);
    });
    test('uploadDir: a tree with long, unicode names, a symlink and modes, as one raw transfer', async () => {
        let raw = 0;
        const orig = c.call.bind(c);
        c.call = (m, p, s) => {
            if (m === 'fs.write' && p.transport === 'raw' && p.format === 'tar') raw++;
            return orig(m, p, s);
        };
        try {
            const r = await f.uploadDir(tree.dir, '/workspace/up/tree');
            assert.equal(raw, 1, 'one raw tar transfer');
            assert.ok(r.entries >= 9, `entries ${r.entries}`);
        } finally {
            c.call = orig;
        }
        await checkTree('/workspace/up/tree');
    });
    test('uploadDir over base64 chunks (SBXD_FS_TRANSPORT=json) gives the same tree', async () => {
        process.env.SBXD_FS_TRANSPORT = 'json';
        try {
            await c.files(sb.id).uploadDir(tree.dir, '/workspace/upj/tree');
        } finally {
            delete process.env.SBXD_FS_TRANSPORT;
        }
        await checkTree('/workspace/upj/tree');
    });
    test("writeArchive: a system tar's archive, as bytes and as a stream of unknown length", async () => {
        const tar = execFileSync('tar', ['-C', tree.dir, '-cf', '-', '.'], { maxBuffer: 64 << 20 });
        await f.makeDir('/workspace/wa');
        const r = await f.writeArchive('/workspace/wa', tar);
        assert.equal(r.size, tar.length);
        await checkTree('/workspace/wa');
        await f.makeDir('/workspace/wa2');
        const stream = new ReadableStream({ start: (ctl) => (ctl.enqueue(new Uint8Array(tar)), ctl.close()) });
        await f.writeArchive('/workspace/wa2', stream);
        await checkTree('/workspace/wa2');
    });
    test('a file that grows while it is packed fails the upload', async () => {
        const dir = mkdtempSync(path.join(os.tmpdir(), 'sbxd-tar-grow-'));
        writeFileSync(path.join(dir, 'big'), randomBytes(1 << 20));
        // It grows after the walk (which fixed the archive's length), before its bytes are read.
        const orig = c.call.bind(c);
        c.call = (m, p, s) => {
            if (m === 'fs.write' && p.format === 'tar') appendFileSync(path.join(dir, 'big'), 'more');
            return orig(m, p, s);
        };
        try {
            await assert.rejects(f.uploadDir(dir, '/workspace/grow/t'), /grew while it was packed/);
        } finally {
            c.call = orig;
            rmSync(dir, { recursive: true, force: true });
        }
        assert.equal(await sh('ls /workspace/grow/t 2>/dev/null | wc -l'), '0', 'nothing of the short archive was extracted past it');
    });
    test('teardown', async () => {
        rmSync(tree.dir, { recursive: true, force: true });
        await c.destroySandbox(sb.id);
        c.close();
    });
}, { skip: SKIP });
