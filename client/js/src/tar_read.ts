/*
 * tar_read.ts - a tar stream read entry by entry as its bytes arrive, the
 * archives fs.read format "tar" gives (proto/PROTOCOL.md, Archives): ustar
 * (its prefix field included), PAX records (path, linkpath, size, mtime,
 * uid, gid) as sbx-init's agent/tar.c and the Docker engine's Go archive
 * writer make them, and GNU tar's long names and links ('L', 'K') and
 * base-256 numbers, as Modal's GNU tar (modal_fstar.c) makes them.
 *
 * Nothing is buffered beyond a header block and one metadata record (at
 * most TAR_META_MAX): an entry's data comes out as views of the chunks the
 * source gives, so a big file costs no more memory than a small one. The
 * archive is untrusted: every header is checked (checksum, numbers,
 * lengths), an archive that ends inside a header or an entry is an error,
 * and the names are given as the archive has them (tar_extract.ts decides
 * whether they may be made).
 */

const BLOCK = 512;
/** The largest PAX or GNU long-name record read (as agent/tar.c's TAR_META_MAX). */
export const TAR_META_MAX = 64 << 10;
/** The longest name or link target, in bytes (as agent/tar.c's TAR_NAME_MAX). */
export const TAR_NAME_MAX = 4096;
/** Bytes after the end blocks drained (so the transfer ends and reports its own end), then the source is let go. */
const TRAILER_MAX = 1 << 20;
/** The most bytes of one entry handed out at a time. */
const PIECE = 1 << 20;
const EMPTY = new Uint8Array(0);

export type TarEntryType = 'file' | 'dir' | 'symlink' | 'link' | 'fifo' | 'char' | 'block' | 'other';

export interface TarEntry {
    /** As the archive gives it: a PAX path or GNU long name, else ustar's prefix and name. */
    name: string;
    type: TarEntryType;
    /** The header's type byte ('0', '5', ...), for types read as 'other'. */
    typeflag: string;
    /** Bytes of data that follow (0 for all but files and unknown types). */
    size: number;
    mode: number;
    uid: number;
    gid: number;
    /** Seconds since the epoch (a PAX mtime may have a fraction). */
    mtime: number;
    /** A symlink's target or the name of the entry a hard link repeats. */
    linkname: string;
    /** Where its header starts in the archive (its PAX or long-name records come before). */
    offset: number;
    /**
     * Its data, piece by piece as it arrives (views of the source's chunks,
     * valid after the next piece). Read it before asking for the next entry;
     * what is left unread is skipped then.
     */
    body(): AsyncGenerator<Uint8Array>;
}

/** An archive that cannot be read or an entry that is refused; `code` an errno name, as the daemon's data.errno. */
export class TarError extends Error {
    constructor(
        readonly code: string,
        message: string,
        /** The entry's name in the archive, when the error is about one. */
        readonly entry?: string,
        /** The archive byte where it was noticed. */
        readonly offset?: number,
    ) {
        super(message);
        this.name = 'TarError';
    }
}

/** Takes bytes off an async iterator of chunks without copying them (but for headers and records). */
class Bytes {
    private cur: Uint8Array = EMPTY;
    private ended = false;
    /** Archive bytes taken so far. */
    offset = 0;
    constructor(private readonly it: AsyncIterator<Uint8Array>) {}

    /** Up to n (> 0) bytes, a view of a chunk as it came; empty at the end of the source. */
    async some(n: number): Promise<Uint8Array> {
        while (!this.cur.length) {
            if (this.ended) return EMPTY;
            const r = await this.it.next();
            if (r.done) {
                this.ended = true;
                return EMPTY;
            }
            this.cur = r.value;
        }
        const k = Math.min(n, this.cur.length);
        const v = this.cur.subarray(0, k);
        this.cur = this.cur.subarray(k);
        this.offset += k;
        return v;
    }

    /** Exactly n bytes in one buffer (a header, a record); fewer only where the source ended. */
    async exact(n: number): Promise<Uint8Array> {
        const first = await this.some(n);
        if (first.length === n || !first.length) return first;
        const out = new Uint8Array(n);
        out.set(first);
        let got = first.length;
        while (got < n) {
            const v = await this.some(n - got);
            if (!v.length) return out.subarray(0, got);
            out.set(v, got);
            got += v.length;
        }
        return out;
    }

    /** Drops n bytes; how many there were. */
    async skip(n: number): Promise<number> {
        let left = n;
        while (left > 0) {
            const v = await this.some(Math.min(left, PIECE));
            if (!v.length) break;
            left -= v.length;
        }
        return n - left;
    }

    /** Lets the source go (a web stream's iterator cancels the stream). */
    async close(): Promise<void> {
        if (this.ended) return;
        this.ended = true;
        await this.it.return?.();
    }
}

const pad = (n: number) => (BLOCK - (n % BLOCK)) % BLOCK;
const utf8 = new TextDecoder('utf-8');

/** A NUL-terminated field as text. */
function field(h: Uint8Array, off: number, len: number): string {
    const f = h.subarray(off, off + len);
    const z = f.indexOf(0);
    return utf8.decode(z < 0 ? f : f.subarray(0, z));
}

/** A numeric field: octal (spaces and NULs around it), or GNU's base-256 (first byte's top bit set). */
function number(h: Uint8Array, off: number, len: number, what: string, at: number): number {
    const f = h.subarray(off, off + len);
    const bad = () => new TarError('EINVAL', `not a tar archive (a bad ${what} field in the header at byte ${at})`, undefined, at);
    if (f[0]! & 0x80) {
        // Big-endian two's complement in the bits after the marker bit, as Go's archive/tar reads it.
        const neg = (f[0]! & 0x40) !== 0;
        let v = 0;
        for (let i = 0; i < f.length; i++) {
            let x = neg ? f[i]! ^ 0xff : f[i]!;
            if (i === 0) x &= 0x7f;
            v = v * 256 + x;
            if (v > Number.MAX_SAFE_INTEGER) throw bad();
        }
        return neg ? -(v + 1) : v;
    }
    let s = 0;
    let e = f.length;
    while (s < e && (f[s] === 0x20 || f[s] === 0)) s++;
    while (e > s && (f[e - 1] === 0x20 || f[e - 1] === 0)) e--;
    let v = 0;
    for (let i = s; i < e; i++) {
        const d = f[i]! - 0x30;
        if (d < 0 || d > 7) throw bad();
        v = v * 8 + d;
    }
    return v;
}

/** The checksum over the header with its own field as spaces; unsigned, or signed as some old tars summed. */
function checksumOk(h: Uint8Array, at: number): boolean {
    const want = number(h, 148, 8, 'checksum', at);
    let u = 0;
    let s = 0;
    for (let i = 0; i < BLOCK; i++) {
        const b = i >= 148 && i < 156 ? 0x20 : h[i]!;
        u += b;
        s += b > 127 ? b - 256 : b;
    }
    return want === u || want === s;
}

const isZero = (h: Uint8Array) => h.every((b) => b === 0);

/** What PAX records (or GNU long names) say about the entry that follows them. */
interface Meta {
    path?: string;
    linkpath?: string;
    size?: number;
    mtime?: number;
    uid?: number;
    gid?: number;
}

/** "LEN key=value\n" records, LEN counting the whole record in bytes. */
function parsePax(data: Uint8Array, meta: Meta, at: number): void {
    const bad = (why: string) => new TarError('EINVAL', `a malformed PAX header at byte ${at} (${why})`, undefined, at);
    let i = 0;
    while (i < data.length) {
        if (data[i] === 0) break; // NUL padding after the records
        let j = i;
        let len = 0;
        while (j < data.length && data[j]! >= 0x30 && data[j]! <= 0x39 && j - i < 8) len = len * 10 + data[j++]! - 0x30;
        if (j === i || data[j] !== 0x20 || len <= j - i + 1 || i + len > data.length || data[i + len - 1] !== 0x0a)
            throw bad('a record with a bad length');
        const rec = data.subarray(j + 1, i + len - 1);
        const eq = rec.indexOf(0x3d);
        if (eq <= 0) throw bad('a record without a key');
        const key = utf8.decode(rec.subarray(0, eq));
        const raw = rec.subarray(eq + 1);
        const val = utf8.decode(raw);
        const int = () => {
            if (!/^[0-9]{1,16}$/.test(val) || Number(val) > Number.MAX_SAFE_INTEGER) throw bad(`a bad ${key}`);
            return Number(val);
        };
        if (key === 'path' || key === 'linkpath') {
            if (raw.includes(0) || raw.length > TAR_NAME_MAX) throw bad(`a ${key} that has NUL or is over ${TAR_NAME_MAX} bytes`);
            meta[key] = val;
        } else if (key === 'size') meta.size = int();
        else if (key === 'uid') meta.uid = int();
        else if (key === 'gid') meta.gid = int();
        else if (key === 'mtime') {
            if (!/^-?[0-9]{1,16}(\.[0-9]*)?$/.test(val)) throw bad('a bad mtime');
            meta.mtime = Number(val);
        } else if (key.startsWith('GNU.sparse.'))
            throw new TarError('ENOTSUP', `a sparse file (PAX ${key}) at byte ${at}: not supported`, undefined, at);
        // Other keys (atime, ctime, charset, SCHILY.xattr.*, ...) say nothing this reader keeps.
        i += len;
    }
}

const TYPES: Record<string, TarEntryType> = {
    '0': 'file',
    '\0': 'file',
    '7': 'file',
    '1': 'link',
    '2': 'symlink',
    '3': 'char',
    '4': 'block',
    '5': 'dir',
    '6': 'fifo',
};

/** What readTar and extractTar read: chunks of bytes, as any async or plain iterable gives them, or a web stream. */
export type TarSource = AsyncIterable<Uint8Array> | Iterable<Uint8Array> | ReadableStream<Uint8Array>;

/**
 * The entries of a tar stream, as they arrive. `source` is any async
 * or plain iterable of bytes: a web ReadableStream (files.readArchive), a
 * Node Readable, an array of chunks. The archive ends at its two zero blocks (what follows
 * is drained and dropped) or, without them, where an entry ends with the
 * source. Throws TarError for an archive it cannot read; when the loop over
 * it ends early the source is let go (a stream cancelled).
 */
export async function* readTar(stream: TarSource): AsyncGenerator<TarEntry> {
    // Web streams are async iterable in Node (the DOM typings do not say so).
    const source = stream as AsyncIterable<Uint8Array> | Iterable<Uint8Array>;
    const it =
        Symbol.asyncIterator in source
            ? source[Symbol.asyncIterator]()
            : (async function* () {
                  yield* source;
              })();
    const src = new Bytes(it);
    let meta: Meta = {};
    let metaAt = -1; // where the records for the next entry began
    let last: string | undefined; // the last entry's name, for errors between entries
    const after = () => (last !== undefined ? ` (after the entry ${JSON.stringify(last)})` : '');
    try {
        for (;;) {
            const at = src.offset;
            const h = await src.exact(BLOCK);
            if (!h.length) {
                if (metaAt >= 0) throw new TarError('EINVAL', `the archive ends after a metadata record at byte ${metaAt}${after()}`, last, at);
                return;
            }
            if (h.length < BLOCK) throw new TarError('EINVAL', `the archive ends inside a header at byte ${at}${after()}`, last, at);
            if (isZero(h)) {
                const h2 = await src.exact(BLOCK);
                if (h2.length === BLOCK && !isZero(h2))
                    throw new TarError('EINVAL', `not a tar archive (a zero block and then a header at byte ${at + BLOCK})${after()}`, last, at);
                if (metaAt >= 0) throw new TarError('EINVAL', `the archive ends after a metadata record at byte ${metaAt}${after()}`, last, at);
                if (h2.length === BLOCK) await src.skip(TRAILER_MAX);
                return;
            }
            if (!checksumOk(h, at)) throw new TarError('EINVAL', `not a tar archive (a bad header checksum at byte ${at})${after()}`, last, at);
            const flag = String.fromCharCode(h[156]!);
            const hsize = number(h, 124, 12, 'size', at);
            if (hsize < 0) throw new TarError('EINVAL', `not a tar archive (a negative size at byte ${at})${after()}`, last, at);
            if (flag === 'x' || flag === 'g' || flag === 'L' || flag === 'K') {
                if (hsize > TAR_META_MAX)
                    throw new TarError('EFBIG', `a PAX or GNU long-name record of ${hsize} bytes at byte ${at} (over ${TAR_META_MAX})${after()}`, last, at);
                const data = await src.exact(hsize);
                if (data.length < hsize || (await src.skip(pad(hsize))) < pad(hsize))
                    throw new TarError('EINVAL', `the archive ends inside a metadata record at byte ${at}${after()}`, last, at);
                if (metaAt < 0) metaAt = at;
                if (flag === 'x') parsePax(data, meta, at);
                else if (flag === 'L' || flag === 'K') {
                    const z = data.indexOf(0);
                    const n = z < 0 ? data : data.subarray(0, z);
                    if (n.length > TAR_NAME_MAX) throw new TarError('EINVAL', `a GNU long name over ${TAR_NAME_MAX} bytes at byte ${at}`, last, at);
                    meta[flag === 'L' ? 'path' : 'linkpath'] = utf8.decode(n);
                }
                // 'g' (global PAX records) would set defaults for every later entry; none of the
                // archives this reads has them, and applying a global path would be wrong: dropped.
                continue;
            }
            if (flag === 'S') throw new TarError('ENOTSUP', `a GNU sparse file at byte ${at}: not supported`, field(h, 0, 100), at);
            const magic = field(h, 257, 6);
            let name = field(h, 0, 100);
            // POSIX ustar keeps long names' leading directories in prefix; GNU uses those bytes for times.
            const prefix = magic === 'ustar' && h[263] === 0x30 ? field(h, 345, 155) : '';
            if (prefix) name = `${prefix}/${name}`;
            name = meta.path ?? name;
            let type: TarEntryType = TYPES[flag] ?? 'other';
            if (type === 'file' && flag !== '7' && name.endsWith('/')) type = 'dir'; // a V7 archive's directory
            const size = type === 'file' || type === 'other' ? (meta.size ?? hsize) : 0;
            const e: TarEntry = {
                name,
                type,
                typeflag: flag,
                size,
                mode: number(h, 100, 8, 'mode', at) & 0o7777,
                uid: meta.uid ?? number(h, 108, 8, 'uid', at),
                gid: meta.gid ?? number(h, 116, 8, 'gid', at),
                mtime: meta.mtime ?? number(h, 136, 12, 'mtime', at),
                linkname: meta.linkpath ?? field(h, 157, 100),
                offset: at,
                body: () => body(),
            };
            if (Buffer.byteLength(e.name) > TAR_NAME_MAX || Buffer.byteLength(e.linkname) > TAR_NAME_MAX)
                throw new TarError('EINVAL', `a name over ${TAR_NAME_MAX} bytes at byte ${at}`, undefined, at);
            meta = {};
            metaAt = -1;
            last = e.name;
            let left = size;
            async function* body(): AsyncGenerator<Uint8Array> {
                while (left > 0) {
                    const v = await src.some(Math.min(left, PIECE));
                    if (!v.length)
                        throw new TarError('EINVAL', `the archive ends inside the entry ${JSON.stringify(e.name)} (${size - left} of ${size} bytes)`, e.name, src.offset);
                    left -= v.length;
                    yield v;
                }
            }
            yield e;
            // What the consumer left unread, then the padding to the next header.
            const rest = left + pad(size);
            const got = await src.skip(rest);
            if (got < rest) {
                const had = size - left + Math.min(got, left);
                throw new TarError('EINVAL', `the archive ends inside the entry ${JSON.stringify(e.name)} (${had} of ${size} bytes and its padding)`, e.name, src.offset);
            }
            left = 0;
        }
    } finally {
        await src.close();
    }
}
