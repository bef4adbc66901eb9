// Local trees for the tar tests (tar_read.test.mjs, files_download.test.mjs):
// one with every kind of entry files.downloadDir makes, a walk that
// describes a tree for comparison, and crafted archives from the package's
// own ustar header (dist/tar.js).
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, linkSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { header, paxRecords, sealHeader } from '../dist/tar.js';

export const md5 = (b) => createHash('md5').update(b).digest('hex');
/** 141 bytes: past ustar's 100 (a PAX path record, a GNU 'L' record). */
export const LONG = `${'n'.repeat(60)}/${'ü'.repeat(40)}.txt`;
/** A symlink target past ustar's 100 bytes (a PAX linkpath, a GNU 'K'). */
export const LONG_TARGET = `../${'t'.repeat(120)}`;

export const tmp = (tag) => mkdtempSync(path.join(os.tmpdir(), `sbxd-${tag}-`));

/** Removes a tree, read-only directories in it included. */
export function rmTree(dir) {
    const open = (d) => {
        let st;
        try {
            st = lstatSync(d);
        } catch {
            return;
        }
        if (!st.isDirectory()) return;
        chmodSync(d, 0o755);
        for (const n of readdirSync(d)) open(path.join(d, n));
    };
    open(dir);
    rmSync(dir, { recursive: true, force: true });
}

/**
 * A tree in a new temporary directory: nested directories, spaces, unicode,
 * a long name, a symlink (and a dangling one with a long target), an empty
 * file, random bytes, a hard link, modes (an executable, a private file, a
 * private directory, a read-only directory with a file in it) and mtimes.
 */
export function makeTree() {
    const dir = tmp('tree');
    const files = {
        'a.txt': Buffer.from('alpha\n'),
        'sub/deep/er/b.bin': randomBytes(1_500_000),
        'with space/file name.txt': Buffer.from('spaces\n'),
        'ünï/日本語.txt': Buffer.from('unicode\n'),
        [LONG]: Buffer.from('long name\n'),
        empty: Buffer.alloc(0),
        'run.sh': Buffer.from('#!/bin/sh\necho ran\n'),
        'private/secret': Buffer.from('s3cret\n'),
        'ro/kept.txt': Buffer.from('read-only dir\n'),
    };
    for (const [n, b] of Object.entries(files)) {
        mkdirSync(path.dirname(path.join(dir, n)), { recursive: true });
        writeFileSync(path.join(dir, n), b);
    }
    chmodSync(path.join(dir, 'run.sh'), 0o755);
    chmodSync(path.join(dir, 'private/secret'), 0o600);
    utimesSync(path.join(dir, 'a.txt'), 1_000_000_000, 1_000_000_000);
    symlinkSync('sub/deep', path.join(dir, 'link'));
    symlinkSync(LONG_TARGET, path.join(dir, 'dangling'));
    linkSync(path.join(dir, 'a.txt'), path.join(dir, 'hard'));
    chmodSync(path.join(dir, 'private'), 0o700);
    chmodSync(path.join(dir, 'ro'), 0o555);
    return dir;
}

/** rel -> "type mode size digest|target" for every entry below dir (mtime too for files: `mtimes`). */
export function describe(dir, { mtimes = true } = {}) {
    const out = {};
    const walk = (d, rel) => {
        for (const n of readdirSync(d).sort()) {
            const p = path.join(d, n);
            const r = rel ? `${rel}/${n}` : n;
            const st = lstatSync(p);
            const mode = (st.mode & 0o7777).toString(8);
            if (st.isSymbolicLink()) out[r] = `link ${readlinkSync(p)}`;
            else if (st.isDirectory()) {
                out[r] = `dir ${mode}`;
                walk(p, r);
            } else out[r] = `file ${mode} ${st.size} ${md5(readFileSync(p))}${mtimes ? ` @${Math.floor(st.mtimeMs / 1000)}` : ''}`;
        }
    };
    walk(dir, '');
    return out;
}

/** A tar archive of [header args or raw Buffer] parts: each entry's data padded, end blocks after (unless `end: false`). */
export function tarOf(parts, { end = true } = {}) {
    const bufs = [];
    for (const p of parts) {
        if (Buffer.isBuffer(p)) bufs.push(p);
        else {
            const data = Buffer.from(p.data ?? '');
            bufs.push(header(p.name, p.type ?? '0', p.size ?? data.length, p.mode ?? (p.type === '5' ? 0o755 : 0o644), p.mtime ?? 1_700_000_000, p.link ?? ''));
            bufs.push(data, Buffer.alloc((512 - (data.length % 512)) % 512));
        }
    }
    if (end) bufs.push(Buffer.alloc(1024));
    return Buffer.concat(bufs);
}

/** A PAX record set as an 'x' entry's parts. */
export const pax = (recs) => ({ name: 'PaxHeader', type: 'x', data: paxRecords(Object.entries(recs)) });

/** A header block with its checksum recomputed after edit(h) changed it. */
export function rehash(h, edit) {
    edit(h);
    return sealHeader(h);
}
