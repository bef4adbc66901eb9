/*
 * tar.ts - a local directory tree as one tar stream (ustar, with PAX
 * records for names and link targets past ustar's 100 bytes and sizes from
 * 8 GiB), the archive sbxd extracts for fs.write format "tar"
 * (proto/PROTOCOL.md, Archives). The tree is walked first (lstat only), so
 * the archive's exact length is known and it goes as one raw transfer;
 * a file that changes size while it is packed fails the archive.
 *
 * Entries: the top directory (named `top`), then the tree below it depth
 * first, each directory's names sorted; regular files, directories and
 * symlinks (others are left out, as the extractor would skip them).
 */
import { lstat, open, readdir, readlink } from 'node:fs/promises';
import { join } from 'node:path';

const BLOCK = 512;
/** Bytes the packer hands out at a time (small files are gathered into these). */
const PART = 1 << 20;

interface Entry {
    name: string; // inside the archive
    local: string;
    type: '0' | '2' | '5';
    size: number;
    mode: number;
    mtime: number;
    link: string;
}

export interface TarPlan {
    entries: Entry[];
    /** The archive's exact length in bytes. */
    size: number;
}

/** PAX records, "LEN key=value\n" each, LEN counting its own digits (exported for the tests' crafted archives). */
export function paxRecords(kv: Array<[string, string]>): Buffer {
    const recs: string[] = [];
    for (const [k, v] of kv) {
        const body = ` ${k}=${v}\n`;
        let n = Buffer.byteLength(body) + 1;
        while (String(n).length + Buffer.byteLength(body) !== n) n++;
        recs.push(`${n}${body}`);
    }
    return Buffer.from(recs.join(''));
}

function pax(e: Entry): Buffer | null {
    const kv: Array<[string, string]> = [];
    if (Buffer.byteLength(e.name) > 100) kv.push(['path', e.name]);
    if (Buffer.byteLength(e.link) > 100) kv.push(['linkpath', e.link]);
    if (e.size >= 8 * 1024 ** 3) kv.push(['size', String(e.size)]);
    return kv.length ? paxRecords(kv) : null;
}

function octal(b: Buffer, off: number, len: number, v: number): void {
    b.write(v.toString(8).padStart(len - 1, '0').slice(-(len - 1)), off, len - 1, 'ascii');
}

/** One ustar header block (exported for the tests, which craft archives with it). */
export function header(name: string, type: string, size: number, mode: number, mtime: number, link: string): Buffer {
    const h = Buffer.alloc(BLOCK);
    h.write(name.slice(0, 100), 0, 100, 'utf8');
    octal(h, 100, 8, mode & 0o7777);
    octal(h, 108, 8, 0);
    octal(h, 116, 8, 0);
    octal(h, 124, 12, size < 8 * 1024 ** 3 ? size : 0);
    octal(h, 136, 12, Math.max(0, Math.floor(mtime)));
    h.write(type, 156, 1, 'ascii');
    h.write(link.slice(0, 100), 157, 100, 'utf8');
    h.write('ustar\u000000', 257, 8, 'ascii');
    return sealHeader(h);
}

/** Writes a header block's checksum (its own field counted as spaces); returns the block. */
export function sealHeader(h: Buffer): Buffer {
    h.fill(0x20, 148, 156);
    let sum = 0;
    for (const x of h) sum += x;
    h.write(sum.toString(8).padStart(6, '0') + '\u0000 ', 148, 8, 'ascii');
    return h;
}

const pad = (n: number) => (BLOCK - (n % BLOCK)) % BLOCK;

function entryBytes(e: Entry): number {
    const p = pax(e);
    return (p ? BLOCK + p.length + pad(p.length) : 0) + BLOCK + (e.type === '0' ? e.size + pad(e.size) : 0);
}

/** Walks `dir` (lstat, no reads): its entries, `top` the archive's name for it. */
export async function planTree(dir: string, top: string): Promise<TarPlan> {
    const entries: Entry[] = [];
    const walk = async (local: string, name: string): Promise<void> => {
        const st = await lstat(local);
        const base = { name, local, mode: st.mode, mtime: st.mtimeMs / 1000, size: 0, link: '' };
        if (st.isDirectory()) {
            entries.push({ ...base, name: `${name}/`, type: '5' });
            for (const n of (await readdir(local)).sort()) await walk(join(local, n), `${name}/${n}`);
        } else if (st.isFile()) entries.push({ ...base, type: '0', size: st.size });
        else if (st.isSymbolicLink()) entries.push({ ...base, type: '2', link: await readlink(local) });
    };
    await walk(dir, top);
    let size = 2 * BLOCK; // the end blocks
    for (const e of entries) size += entryBytes(e);
    return { entries, size };
}

/** The archive of a plan, in parts of at most PART bytes. */
export async function* packTree(plan: TarPlan): AsyncGenerator<Uint8Array> {
    let out = Buffer.allocUnsafe(PART);
    let n = 0;
    async function* put(b: Uint8Array): AsyncGenerator<Uint8Array> {
        let o = 0;
        while (o < b.length) {
            const k = Math.min(b.length - o, PART - n);
            out.set(b.subarray(o, o + k), n);
            n += k;
            o += k;
            if (n === PART) {
                yield out;
                out = Buffer.allocUnsafe(PART);
                n = 0;
            }
        }
    }
    const zeros = Buffer.alloc(BLOCK);
    for (const e of plan.entries) {
        const p = pax(e);
        if (p) {
            yield* put(header('PaxHeader', 'x', p.length, 0o644, e.mtime, ''));
            yield* put(p);
            yield* put(zeros.subarray(0, pad(p.length)));
        }
        yield* put(header(e.name, e.type, e.size, e.mode, e.mtime, e.link));
        if (e.type !== '0') continue;
        const fh = await open(e.local, 'r');
        try {
            let pos = 0;
            while (pos < e.size) {
                // read straight into the part being filled
                if (n === PART) {
                    yield out;
                    out = Buffer.allocUnsafe(PART);
                    n = 0;
                }
                const { bytesRead } = await fh.read(out, n, Math.min(PART - n, e.size - pos), pos);
                if (!bytesRead) throw new RangeError(`${e.local} shrank while it was packed (${pos} of ${e.size} bytes)`);
                n += bytesRead;
                pos += bytesRead;
            }
            const { bytesRead } = await fh.read(Buffer.alloc(1), 0, 1, e.size);
            if (bytesRead) throw new RangeError(`${e.local} grew while it was packed (past ${e.size} bytes)`);
        } finally {
            await fh.close();
        }
        yield* put(zeros.subarray(0, pad(e.size)));
    }
    yield* put(Buffer.alloc(2 * BLOCK));
    if (n) yield out.subarray(0, n);
}
