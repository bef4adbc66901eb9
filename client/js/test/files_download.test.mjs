// Trees out of a sandbox (files.readArchive, files.downloadDir) on the docker
// provider at $SBXD_DOCKER_SOCKET and the modal provider on the fake at
// $SBXD_MODAL_SOCKET: a tree made in the sandbox by commands arrives with its
// names (spaces, unicode, a long path), symlinks, modes, mtimes and bytes
// (digests from the sandbox); uploadDir then downloadDir gives back the
// original tree; readArchive's bytes are a tar a system tar reads; base64
// chunks (SBXD_FS_TRANSPORT=json) give the same; a stopped sandbox's tree
// comes from the engine's archive (Go's tar writer, hard links); a missing
// path is ENOENT with nothing made; a 200 MB file comes down with the
// process's RSS bounded.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, createReadStream, existsSync, lstatSync, mkdirSync, readdirSync, readlinkSync, rmSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import * as path from 'node:path';
import { group, test } from './harness.mjs';
import { SbxdClient, SbxdError, ErrorCode, readTar, TarError } from '../dist/index.js';
import { describe, makeTree, rmTree, tmp } from './tree_kit.mjs';

const DSOCK = process.env.SBXD_DOCKER_SOCKET;
const DSKIP = DSOCK ? undefined : process.env.SBXD_DOCKER_SKIP || 'no Docker engine';
const MSOCK = process.env.SBXD_MODAL_SOCKET;
const MSKIP = MSOCK ? undefined : process.env.SBXD_MODAL_SKIP || 'no fake Modal control plane';
const IMAGE = process.env.SBXD_DOCKER_IMAGE || 'sbx-test/debian:bookworm';
const MB = 1 << 20;

/** The tree a script makes at /workspace/made: what describe() says of it, from the sandbox's own tools. */
const MAKE = `set -e; mkdir -p /workspace/made && cd /workspace/made
mkdir -p 'a/b/c' 'with space' 'ünï' private
printf 'deep\\n' > a/b/c/deep.txt; printf 'sp\\n' > 'with space/a file.txt'; printf 'u\\n' > 'ünï/日本.txt'
L=${'l'.repeat(70)}/${'m'.repeat(60)}.txt; mkdir -p ${'l'.repeat(70)}; printf long > "$L"
: > empty; head -c 1234567 /dev/urandom > rand.bin; printf '#!/bin/sh\\n' > run.sh; chmod 751 run.sh
printf s > private/secret; chmod 600 private/secret; chmod 700 private; ln -s a/b link; touch -d @1000000000 a/b/c/deep.txt
find . -mindepth 1 | sort | while read -r p; do
  n=\${p#./}; if [ -L "$p" ]; then echo "$n|link $(readlink "$p")"
  elif [ -d "$p" ]; then echo "$n|dir $(stat -c %a "$p")"
  else echo "$n|file $(stat -c '%a %s' "$p") $(md5sum < "$p" | cut -d' ' -f1) @$(stat -c %Y "$p")"; fi
done`;

const parse = (out) => Object.fromEntries(out.trim().split('\n').map((l) => [l.slice(0, l.lastIndexOf('|')), l.slice(l.lastIndexOf('|') + 1)]));
const fileMd5 = async (p) => {
    const h = createHash('md5');
    await pipeline(createReadStream(p), h);
    return h.digest('hex');
};

group('files downloadDir (docker)', () => {
    let c, sb, f, made, tree;
    const sh = async (cmd) => {
        const r = await c.exec({ sandbox: sb.id, command: ['sh', '-c', cmd] });
        assert.equal(r.exit_code, 0, r.stderr);
        return r.stdout;
    };
    test('setup', async () => {
        tree = makeTree();
        c = new SbxdClient({ socketPath: DSOCK });
        sb = await c.createSandbox({ provider: 'docker', image: IMAGE, id: `fdl-${process.pid}` });
        f = c.files(sb.id);
        made = parse(await sh(MAKE));
    });
    test('a tree made in the sandbox comes down exact: names, symlink, modes, mtimes, bytes by digest', async () => {
        const base = tmp('dl');
        try {
            const r = await f.downloadDir('/workspace/made', path.join(base, 'new/parents/made'));
            assert.equal(r.path, path.join(base, 'new/parents/made'));
            assert.deepEqual(describe(r.path), made);
            assert.ok(r.entries >= Object.keys(made).length && r.size > 1234567, `entries ${r.entries}, ${r.size} bytes`);
        } finally {
            rmTree(base);
        }
    });
    test('on a worker thread by default, on this one with thread: false: the same tree, and errors keep their class', async () => {
        const base = tmp('dlt');
        const threads = () => readdirSync('/proc/self/task').length;
        try {
            for (const opts of [{}, { thread: false }]) {
                const tag = opts.thread === false ? 'here' : 'worker';
                const before = threads();
                let most = before;
                const t = setInterval(() => (most = Math.max(most, threads())), 1);
                const dest = path.join(base, tag);
                await f.downloadDir('/workspace/made', dest, opts).finally(() => clearInterval(t));
                assert.deepEqual(describe(dest), made, tag);
                if (tag === 'worker') assert.ok(most > before, `a thread of its own (${before} -> ${most} threads)`);
                // a local directory where the tree has a file: refused, the entry named
                const inWay = path.join(base, `${tag}-in-the-way`);
                mkdirSync(path.join(inWay, 'empty', 'keep'), { recursive: true });
                const err = await f.downloadDir('/workspace/made', inWay, opts).then(() => null, (e) => e);
                assert.ok(err instanceof TarError, `${tag}: ${err}`);
                assert.equal(err.code, 'EISDIR');
                assert.match(err.entry, /(^|\/)empty$/);
                assert.ok(existsSync(path.join(inWay, 'empty', 'keep')), 'what was there stays');
                const gone = await f.downloadDir('/workspace/nope', path.join(base, `${tag}-nope`), opts).then(() => null, (e) => e);
                assert.ok(gone instanceof SbxdError, `${tag}: ${gone}`);
                assert.equal(gone.code, ErrorCode.FileOperationFailed);
                assert.equal(gone.data.errno, 'ENOENT');
            }
        } finally {
            rmTree(base);
        }
    });
    test('a package without its worker module (a bundle that left it out) extracts on the caller\'s thread', async () => {
        const base = tmp('dlnw');
        try {
            const dist = path.join(base, 'dist');
            cpSync(new URL('../dist', import.meta.url), dist, { recursive: true });
            rmSync(path.join(dist, 'extract_worker.js'));
            const { SbxdClient: Bare } = await import(pathToFileURL(path.join(dist, 'index.js')).href);
            const c2 = new Bare({ socketPath: DSOCK });
            try {
                await c2.files(sb.id).downloadDir('/workspace/made', path.join(base, 'made'));
            } finally {
                c2.close();
            }
            assert.deepEqual(describe(path.join(base, 'made')), made);
        } finally {
            rmTree(base);
        }
    });
    test('uploadDir then downloadDir gives back the original tree (long names, unicode, links, modes, mtimes)', async () => {
        const base = tmp('rt');
        try {
            await f.uploadDir(tree, '/workspace/rt/tree');
            await f.downloadDir('/workspace/rt/tree', path.join(base, 'back'));
            assert.deepEqual(describe(path.join(base, 'back')), describe(tree));
            // into an existing directory: merged, what was there stays
            await f.downloadDir('/workspace/made/a', path.join(base, 'back'));
            assert.equal(existsSync(path.join(base, 'back', 'b/c/deep.txt')) && existsSync(path.join(base, 'back', 'a.txt')), true);
        } finally {
            rmTree(base);
        }
    }, { timeout: 120000 });
    test("readArchive: the raw tar bytes, top entry the base name, which a system tar lists", async () => {
        const st = await f.readArchive('/workspace/made', { name: 'renamed' });
        const [a, b] = st.tee();
        const names = [];
        const reading = (async () => {
            for await (const e of readTar(a)) names.push(e.name);
        })();
        const chunks = [];
        for await (const x of b) chunks.push(x);
        await reading;
        const listed = execFileSync('tar', ['--quoting-style=literal', '-tf', '-'], { input: Buffer.concat(chunks) }).toString().trim().split('\n');
        assert.equal(names[0].replace(/\/$/, ''), 'renamed');
        assert.deepEqual(listed.map((n) => n.replace(/\/$/, '')), names.map((n) => n.replace(/\/$/, '')));
        assert.ok(names.includes('renamed/ünï/日本.txt'), names.join(', '));
    });
    test('over base64 chunks (SBXD_FS_TRANSPORT=json) the same tree, no raw transfer', async () => {
        process.env.SBXD_FS_TRANSPORT = 'json';
        const base = tmp('dlj');
        const c2 = new SbxdClient({ socketPath: DSOCK });
        let raw = 0;
        const orig = c2.call.bind(c2);
        c2.call = (m, p, s) => ((raw += p?.transport === 'raw' ? 1 : 0), orig(m, p, s));
        try {
            await c2.files(sb.id).downloadDir('/workspace/made', path.join(base, 'made'));
            assert.deepEqual(describe(path.join(base, 'made')), made);
            assert.equal(raw, 0);
        } finally {
            delete process.env.SBXD_FS_TRANSPORT;
            c2.close();
            rmTree(base);
        }
    });
    test('a readArchive stream cancelled before its end lets the archive go (fs.read abort): its transfer slot is back', async () => {
        process.env.SBXD_FS_TRANSPORT = 'json';
        const c2 = new SbxdClient({ socketPath: DSOCK });
        const slots = async () => (await c2.call('daemon.info', {})).usage.fs_transfers_per_uid.used;
        let aborts = 0;
        const orig = c2.call.bind(c2);
        c2.call = (m, p, s) => ((aborts += m === 'fs.read' && p?.abort === true ? 1 : 0), orig(m, p, s));
        try {
            await sh('head -c 20000000 /dev/zero > /workspace/abort20'); // five 4 MiB chunks
            // The earlier tests' transfers end in sbxd after their last bytes came (a raw stream's
            // close is seen a turn later; under valgrind, much later): counted from where that settles.
            let base = await slots();
            for (let i = 0; i < 100 && base > 0; i++) {
                await new Promise((r) => setTimeout(r, 50));
                base = await slots();
            }
            const rs = await c2.files(sb.id).readArchive('/workspace/abort20');
            const rd = rs.getReader();
            const first = await rd.read();
            assert.ok(!first.done && first.value.length > 0);
            assert.equal(await slots(), base + 1, 'the open archive holds a slot');
            await rd.cancel();
            assert.equal(aborts, 1);
            assert.equal(await slots(), base, 'the slot is given back at once, not at the idle timeout');
            await sh('rm /workspace/abort20');
        } finally {
            delete process.env.SBXD_FS_TRANSPORT;
            c2.close();
        }
    });
    test('a symlink path comes as the link, or with follow as the tree it points to (docker cp -L)', async () => {
        const base = tmp('dlf');
        try {
            await f.downloadDir('/workspace/made/link', path.join(base, 'l'));
            assert.equal(readlinkSync(path.join(base, 'l')), 'a/b');
            await f.downloadDir('/workspace/made/link', path.join(base, 'f'), { follow: true });
            assert.deepEqual(describe(path.join(base, 'f')), { c: made['a/b/c'], 'c/deep.txt': made['a/b/c/deep.txt'] });
        } finally {
            rmTree(base);
        }
    });
    test('a missing path is -32010 ENOENT and nothing is made locally', async () => {
        const base = tmp('dlm');
        try {
            const err = await f.downloadDir('/workspace/nope', path.join(base, 'x/y')).then(() => null, (e) => e);
            assert.equal(err?.code, ErrorCode.FileOperationFailed, String(err));
            assert.equal(err.data.errno, 'ENOENT');
            assert.deepEqual(readdirSync(base), []);
        } finally {
            rmTree(base);
        }
    });
    test('a 200 MB file comes down with the RSS bounded, exact by digest', async () => {
        const sum = (await sh('mkdir -p /workspace/big && head -c 200000000 /dev/urandom > /workspace/big/f.bin && md5sum < /workspace/big/f.bin')).split(' ')[0];
        const base = tmp('dlbig');
        try {
            const rss0 = process.memoryUsage().rss;
            let peak = 0;
            const t = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss - rss0)), 20);
            const t0 = Date.now();
            await f.downloadDir('/workspace/big', path.join(base, 'big')).finally(() => clearInterval(t));
            console.log(`# downloadDir 200 MB: ${Math.round(200 / ((Date.now() - t0) / 1000))} MB/s, RSS grew at most ${Math.round(peak / MB)} MB`);
            assert.ok(peak < 64 * MB, `RSS grew ${Math.round(peak / MB)} MB`);
            assert.equal(await fileMd5(path.join(base, 'big/f.bin')), sum);
        } finally {
            rmTree(base);
            await sh('rm -rf /workspace/big');
        }
    }, { timeout: 180000 });
    test("a stopped sandbox's tree comes from the engine's archive (its hard links too)", async () => {
        await sh('cd /workspace/made && ln rand.bin rand.hard');
        made['rand.hard'] = made['rand.bin'];
        await c.stopSandbox(sb.id);
        const base = tmp('dls');
        try {
            await f.downloadDir('/workspace/made', path.join(base, 'made'));
            assert.deepEqual(describe(path.join(base, 'made')), made);
            const ino = (n) => lstatSync(path.join(base, 'made', n)).ino;
            assert.equal(ino('rand.hard'), ino('rand.bin'), "the engine's archive has the hard link as one (sbx-init's has two files)");
        } finally {
            rmTree(base);
            await c.startSandbox(sb.id);
        }
    }, { timeout: 120000 });
    test('teardown', async () => {
        rmTree(tree);
        await c.destroySandbox(sb.id);
        c.close();
    });
}, { skip: DSKIP });

group('files downloadDir (modal fake)', () => {
    test("uploadDir then downloadDir through the sandbox's GNU tar gives back the tree", async () => {
        const c = new SbxdClient({ socketPath: MSOCK });
        const sb = await c.createSandbox({ provider: 'modal', id: `fdlm-${process.pid}` });
        const tree = makeTree();
        const base = tmp('dlmodal');
        try {
            const f = c.files(sb.id);
            await f.uploadDir(tree, '/w/tree');
            const r = await f.downloadDir('/w/tree', path.join(base, 'back'));
            assert.deepEqual(describe(r.path), describe(tree));
            const st = await f.readArchive('/w/tree');
            let n = 0;
            for await (const e of readTar(Readable.fromWeb(st))) n += e.name.length > 100 ? 1 : 0;
            assert.ok(n >= 1, 'a name past 100 bytes came through (a GNU long-name record)');
        } finally {
            rmTree(tree);
            rmTree(base);
            await c.destroySandbox(sb.id);
            c.close();
        }
    }, { timeout: 120000 });
}, { skip: MSKIP });
