// The client's tar reader and extractor (readTar, extractTar: the local side
// of files.downloadDir) on archives made here, no daemon needed: a system
// GNU tar's archives in its gnu, posix and ustar formats extract to a tree
// equal to the original; crafted archives with every header form the
// sandboxes' writers use (PAX records, GNU long names and base-256 numbers,
// ustar's prefix, V7 directories, trailing bytes) read right; hostile ones
// (`..`, absolute names, symlink escapes, hard links out, cut headers, bad
// checksums, sizes past the end, oversized records) are refused with a
// TarError naming the entry and nothing is written outside the target; a
// 256 MB entry streams through with the process's RSS flat.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, lstatSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { group, test } from './harness.mjs';
import { readTar, extractTar, TarError } from '../dist/index.js';
import { header } from '../dist/tar.js';
import { LONG, describe, makeTree, pax, rehash, rmTree, tarOf, tmp } from './tree_kit.mjs';

const MB = 1 << 20;
const sysTar = (dir, fmt) => execFileSync('tar', [`--format=${fmt}`, '-C', path.dirname(dir), '-cf', '-', path.basename(dir)], { maxBuffer: 64 * MB });

/** Extracts buf in pieces of `part` bytes (so headers straddle chunks) into base/dest. */
async function extractInto(buf, base, part = 700) {
    const chunks = [];
    for (let o = 0; o < buf.length; o += part) chunks.push(buf.subarray(o, o + part));
    return extractTar(chunks, path.join(base, 'dest'));
}

group('tar reader and extractor (local)', () => {
    let tree, want;
    test('a system tar archive (gnu, posix formats) extracts to the same tree, in 700-byte chunks', async () => {
        tree = makeTree();
        want = describe(tree);
        for (const fmt of ['gnu', 'posix']) {
            const base = tmp(`x-${fmt}`);
            try {
                const r = await extractInto(sysTar(tree, fmt), base);
                assert.equal(r.path, path.join(base, 'dest'));
                assert.deepEqual(describe(r.path), want, `${fmt}: the tree`);
                assert.equal(lstatSync(path.join(r.path, 'hard')).ino, lstatSync(path.join(r.path, 'a.txt')).ino, `${fmt}: a hard link stays one`);
                assert.ok(r.entries >= Object.keys(want).length, `${fmt}: entries ${r.entries}`);
            } finally {
                rmTree(base);
            }
        }
    });
    test("an archive of contents (tar -C DIR -c .) goes straight into dest, merged with what is there", async () => {
        const base = tmp('contents');
        try {
            mkdirSync(path.join(base, 'dest'));
            writeFileSync(path.join(base, 'dest', 'kept'), 'kept');
            const arch = execFileSync('tar', ['-C', tree, '-cf', '-', '.'], { maxBuffer: 64 * MB });
            const r = await extractInto(arch, base);
            assert.deepEqual(describe(r.path), { ...want, kept: describe(r.path).kept });
            const bad = tarOf([{ name: './', type: '5' }, { name: './../evil', data: 'x' }]);
            await assert.rejects(extractInto(bad, base), (e) => e.code === 'EPERM' && e.entry === './../evil');
            assert.equal(existsSync(path.join(base, 'evil')), false);
        } finally {
            rmTree(base);
        }
    });
    test('a ustar archive with a name split into prefix and name', async () => {
        const src = tmp('ustar');
        const long = `${'p'.repeat(90)}/${'q'.repeat(70)}.txt`; // 165 bytes: ustar's prefix field
        mkdirSync(path.join(src, 't', path.dirname(long)), { recursive: true });
        execFileSync('sh', ['-c', `printf prefixed > '${path.join(src, 't', long)}'`]);
        const base = tmp('ustar-x');
        try {
            await extractInto(sysTar(path.join(src, 't'), 'ustar'), base);
            assert.equal(readFileSync(path.join(base, 'dest', long), 'utf8'), 'prefixed');
        } finally {
            rmTree(src);
            rmTree(base);
        }
    });
    test('crafted forms: PAX path/linkpath/size/mtime, GNU L/K, base-256 size, V7 dir, global records, bytes after the end', async () => {
        const big = rehash(header('top/b256', '0', 0, 0o640, 1_700_000_000, ''), (h) => {
            h.fill(0, 124, 136);
            h[124] = 0x80; // base-256: the value in the bytes after the marker
            h.writeUInt16BE(1000, 134);
        });
        const arch = Buffer.concat([
            tarOf([
                { name: 'top/', type: '5', mode: 0o755 },
                pax({ path: `top/${LONG}`, mtime: '1600000000.5', 'SCHILY.xattr.user.x': 'ignored' }),
                { name: 'ignored-by-pax', data: 'pax named' },
                { name: '././@LongLink', type: 'L', data: `top/gnu-${'g'.repeat(120)}\0` },
                { name: 'short', data: 'gnu named' },
                { name: '././@LongLink', type: 'K', data: `target-${'k'.repeat(120)}\0` },
                { name: 'top/klink', type: '2', link: 'short' },
                { ...pax({ comment: 'a global record' }), type: 'g' },
                { name: 'top/v7dir/', type: '0' },
                big,
                Buffer.alloc(1024, 0x61),
            ], { end: false }),
            Buffer.alloc(1024),
            Buffer.from('trailing bytes after the end blocks are dropped'),
        ]);
        const base = tmp('crafted');
        try {
            const r = await extractInto(arch, base, 333);
            const d = r.path;
            assert.equal(readFileSync(path.join(d, LONG), 'utf8'), 'pax named');
            assert.equal(Math.floor(lstatSync(path.join(d, LONG)).mtimeMs / 1000), 1_600_000_000, 'the PAX mtime');
            assert.equal(readFileSync(path.join(d, `gnu-${'g'.repeat(120)}`), 'utf8'), 'gnu named');
            assert.equal(lstatSync(path.join(d, 'klink')).isSymbolicLink(), true);
            assert.equal(readlinkSync(path.join(d, 'klink')), `target-${'k'.repeat(120)}`);
            assert.equal(lstatSync(path.join(d, 'v7dir')).isDirectory(), true, 'a V7 name ending in / is a directory');
            assert.equal(readFileSync(path.join(d, 'b256')).length, 1000, 'a base-256 size');
            assert.equal(lstatSync(path.join(d, 'b256')).mode & 0o777, 0o640);
            assert.equal(r.size, arch.length, 'the bytes after the end were read (drained), not left in the stream');
        } finally {
            rmTree(base);
        }
    });
    test('readTar streams a 256 MB entry in pieces with a flat RSS, then the next entry', async () => {
        const size = 256 * MB;
        const piece = Buffer.alloc(64 << 10, 0x5a);
        async function* source() {
            yield header('top/huge', '0', size, 0o644, 1_700_000_000, '');
            for (let n = 0; n < size; n += piece.length) yield piece;
            yield* [tarOf([{ name: 'top/after', data: 'after' }])];
        }
        const rss0 = process.memoryUsage().rss;
        let peak = 0;
        const names = [];
        let got = 0;
        let pieces = 0;
        for await (const e of readTar(source())) {
            names.push(e.name);
            for await (const p of e.body()) {
                got += e.name === 'top/huge' ? p.length : 0;
                if (++pieces % 256 === 0) peak = Math.max(peak, process.memoryUsage().rss - rss0);
            }
        }
        assert.deepEqual(names, ['top/huge', 'top/after']);
        assert.equal(got, size);
        console.log(`# readTar: 256 MB entry, RSS grew at most ${Math.round(peak / MB)} MB`);
        assert.ok(peak < 48 * MB, `RSS grew ${Math.round(peak / MB)} MB`);
    }, { timeout: 120000 });
    test('an entry left unread is skipped: the next one comes whole', async () => {
        const arch = tarOf([{ name: 'top/a', data: 'x'.repeat(5000) }, { name: 'top/b', data: 'bee' }]);
        const seen = [];
        for await (const e of readTar([arch])) {
            if (e.name === 'top/b') for await (const p of e.body()) seen.push(Buffer.from(p).toString());
        }
        assert.deepEqual(seen, ['bee']);
    });
    test('small files written in the background keep the archive order: a name twice, a hard link, a read-only directory', async () => {
        const many = Array.from({ length: 40 }, (_, i) => ({ name: `top/ro/f${i}`, data: `file ${i}`, mtime: 1_500_000_000 + i }));
        const arch = tarOf([
            { name: 'top/', type: '5' },
            { name: 'top/a', data: 'one' },
            { name: 'top/a', data: 'two', mode: 0o600 },
            { name: 'top/h', type: '1', link: 'top/a' },
            { name: 'top/ro/', type: '5', mode: 0o555, mtime: 1_400_000_000 },
            ...many,
            { name: 'top/z', data: 'last' },
        ]);
        const base = tmp('order');
        try {
            const r = await extractInto(arch, base, 4096);
            const d = r.path;
            assert.equal(readFileSync(path.join(d, 'a'), 'utf8'), 'two', 'the later entry of a name wins');
            assert.equal(lstatSync(path.join(d, 'a')).mode & 0o777, 0o600);
            assert.equal(lstatSync(path.join(d, 'h')).ino, lstatSync(path.join(d, 'a')).ino, 'the hard link is to the written file');
            for (const [i, m] of many.entries()) {
                assert.equal(readFileSync(path.join(d, 'ro', `f${i}`), 'utf8'), m.data);
                assert.equal(Math.floor(lstatSync(path.join(d, 'ro', `f${i}`)).mtimeMs / 1000), m.mtime);
            }
            const ro = lstatSync(path.join(d, 'ro'));
            assert.equal(ro.mode & 0o777, 0o555, 'its mode once all its files were in');
            assert.equal(Math.floor(ro.mtimeMs / 1000), 1_400_000_000, 'its mtime after its files were made');
            assert.equal(r.entries, 46);
        } finally {
            rmTree(base);
        }
    });
    test('teardown', () => tree && rmTree(tree));
});

/** Hostile archives: [what, archive(base), errno, message pattern, entry]. */
function hostile() {
    const valid = tarOf([{ name: 'top/', type: '5' }, { name: 'top/f', data: 'data' }]);
    return [
        ['a .. component', () => tarOf([{ name: 'top/', type: '5' }, { name: 'top/../evil', data: 'x' }]), 'EPERM', /outside the target directory/, 'top/../evil'],
        ['an absolute name', (b) => tarOf([{ name: path.join(b, 'abs'), data: 'x' }]), 'EPERM', /absolute/, undefined],
        ['a PAX path with ..', () => tarOf([{ name: 'top/', type: '5' }, pax({ path: 'top/../../pax-evil' }), { name: 'x', data: 'x' }]), 'EPERM', /outside/, 'top/../../pax-evil'],
        ['a GNU long name that is absolute', (b) => tarOf([{ name: '././@LongLink', type: 'L', data: `${b}/gnu-evil\0` }, { name: 'x', data: 'x' }]), 'EPERM', /absolute/, undefined],
        ['an entry beside the top', () => tarOf([{ name: 'top/', type: '5' }, { name: 'other/x', data: 'x' }]), 'EPERM', /top entry "top"/, 'other/x'],
        ['a symlink to outside, then a file through it', () => tarOf([{ name: 'top/', type: '5' }, { name: 'top/l', type: '2', link: '../outside' }, { name: 'top/l/x', data: 'x' }]), 'ENOTDIR', /symlink on its way \(l\)/, 'top/l/x'],
        ['an absolute symlink, then a directory through it', (b) => tarOf([{ name: 'top/', type: '5' }, { name: 'top/l', type: '2', link: path.join(b, 'outside') }, { name: 'top/l/d/', type: '5' }]), 'ENOTDIR', /symlink on its way/, 'top/l/d/'],
        ['a top entry that is a symlink out, then a file below it', () => tarOf([{ name: 'top', type: '2', link: 'outside' }, { name: 'top/x', data: 'x' }]), 'ENOTDIR', /is not a directory/, 'top/x'],
        ['a file, then an entry below it', () => tarOf([{ name: 'top/', type: '5' }, { name: 'top/f', data: 'x' }, { name: 'top/f/x', data: 'y' }]), 'ENOTDIR', /a file on its way \(f\)/, 'top/f/x'],
        ['a hard link out', () => tarOf([{ name: 'top/', type: '5' }, { name: 'top/h', type: '1', link: 'top/../../outside/x' }]), 'EPERM', /hard link to outside/, 'top/h'],
        ['a hard link to an absolute name', () => tarOf([{ name: 'top/', type: '5' }, { name: 'top/h', type: '1', link: '/etc/passwd' }]), 'EPERM', /absolute/, 'top/h'],
        ['a file where a directory is', () => tarOf([{ name: 'top/', type: '5' }, { name: 'top/d/', type: '5' }, { name: 'top/d', data: 'x' }]), 'EISDIR', /directory is in the way/, 'top/d'],
        ['a header cut short', () => valid.subarray(0, 300), 'EINVAL', /ends inside a header at byte 0/, undefined],
        ['a bad checksum', () => Buffer.concat([valid.subarray(0, 512), rehash(Buffer.from(valid.subarray(512, 1024)), () => {}).fill(0x41, 0, 1), valid.subarray(1024)]), 'EINVAL', /bad header checksum at byte 512/, undefined],
        ['a size past the end', () => tarOf([{ name: 'top/', type: '5' }, header('top/f', '0', 10_000, 0o644, 0, ''), Buffer.alloc(100, 1)], { end: false }), 'EINVAL', /ends inside the entry "top\/f" \(100 of 10000/, 'top/f'],
        ['a PAX record over 64 KiB', () => tarOf([{ name: 'top/', type: '5' }, header('PaxHeader', 'x', 70_000, 0o644, 0, '')], { end: false }), 'EFBIG', /over 65536/, 'top/'],
        ['random bytes', () => Buffer.alloc(4096, 0x37), 'EINVAL', /not a tar archive/, undefined],
    ];
}

group('tar extractor refuses hostile archives (local)', () => {
    for (const [what, make, code, re, entry] of hostile()) {
        test(`${what}: ${code}, nothing outside the target`, async () => {
            const base = tmp('hostile');
            mkdirSync(path.join(base, 'outside'));
            try {
                const err = await extractInto(make(base), base).then(() => null, (e) => e);
                assert.ok(err instanceof TarError, `refused with a TarError (${err})`);
                assert.equal(err.code, code, err.message);
                assert.match(err.message, re);
                if (entry) assert.equal(err.entry, entry, 'the error names the entry');
                assert.deepEqual(readdirSync(path.join(base, 'outside')), [], 'nothing made outside');
                for (const n of readdirSync(base)) assert.ok(n === 'outside' || n === 'dest', `only dest beside it (${n})`);
                if (code === 'EINVAL' && entry === 'top/f') assert.equal(existsSync(path.join(base, 'dest', 'f')), false, 'the cut file is removed');
            } finally {
                rmTree(base);
            }
        });
    }
    test('a file over a symlink replaces the link, never writes through it', async () => {
        const base = tmp('hostile');
        mkdirSync(path.join(base, 'outside'));
        try {
            const arch = tarOf([{ name: 'top/', type: '5' }, { name: 'top/l', type: '2', link: '../outside/victim' }, { name: 'top/l', data: 'safe' }]);
            await extractInto(arch, base);
            assert.equal(lstatSync(path.join(base, 'dest', 'l')).isFile(), true);
            assert.deepEqual(readdirSync(path.join(base, 'outside')), []);
        } finally {
            rmTree(base);
        }
    });
});
