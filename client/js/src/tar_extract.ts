/*
 * tar_extract.ts - a tar stream (tar_read.ts) made into a local tree as its
 * bytes arrive: files.downloadDir's local side, with the rules sbx-init's
 * extractor (agent/tar.c) and GNU tar apply to an archive they do not trust.
 *
 * The archive's top entry (its first name component, the same for every
 * entry) becomes `dest`; everything else is made below it (an archive of
 * contents, whose first entry is "./", goes straight into dest):
 * - a name that is absolute or has a `..` component, and a hard link to
 *   such a name, are refused (EPERM, "outside the target directory");
 * - nothing is ever written through a symlink: every directory on an
 *   entry's way is checked with lstat (a symlink there, one the archive made
 *   or one that was there, is ENOTDIR), files and links are created with
 *   O_EXCL / symlink(2) after what was at their name is unlinked (never
 *   opened), and a directory where a file or link goes is EISDIR;
 * - files get the archive's mode without setuid/setgid (a tree from a
 *   sandbox must not bring set-id programs to this machine) and its mtime;
 *   directories are made u+rwx while their entries are made, and get their
 *   own mode and mtime once the archive has left them (depth first, as
 *   every archive fs.read makes: memory is one entry per level, not per
 *   directory); fifos, devices and unknown types are skipped (counted).
 * Entries are made as this process (the archive's uid/gid are ignored).
 * Entries made before an error stay; the file being written when it came
 * is removed. A refusal is a TarError naming the entry.
 *
 * Speed: a file costs four calls on libuv's threads (open, write, utimes,
 * close), each a round trip through the event loop, which one at a time
 * made a tree of small files 4x slower than GNU tar. So small files (up to
 * SMALL_FILE) are copied out of the stream and written in the background,
 * at most INFLIGHT_FILES / INFLIGHT_BYTES at once, while the archive is
 * read on; whatever else touches a path with a write in flight
 * waits for it, and a directory's mode and mtime wait for all of them.
 * The calls go through plain descriptors (asyncOps), not fs/promises'
 * FileHandle, which puts an object with a finalizer and more promises on
 * top of the same requests and took up to twice as long per small file;
 * downloadDir makes them synchronously on a worker thread (syncOps).
 */
import * as fs from 'node:fs';
import { constants } from 'node:fs';
import * as fsp from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { readTar, TarError, type TarEntry, type TarSource } from './tar_read.js';

/** What an extraction asks of an lstat (a Node Stats has it; no node types in the package's .d.ts). */
export interface EntryStat {
    isDirectory(): boolean;
    isSymbolicLink(): boolean;
}

/**
 * The file system calls an extraction makes. `asyncOps` (the default) puts
 * each on libuv's threads; `syncOps` makes them in the calling thread, for
 * an extraction that has a worker thread to itself (extract_worker.ts),
 * where a call's thread round trip costs more than the call.
 */
export interface FsOps {
    lstat(p: string): Promise<EntryStat>;
    unlink(p: string): Promise<void>;
    /** mkdir -p where mode is undefined. */
    mkdir(p: string, mode?: number): Promise<void>;
    chmod(p: string, mode: number): Promise<void>;
    utimes(p: string, t: number): Promise<void>;
    symlink(target: string, p: string): Promise<void>;
    lutimes(p: string, t: number): Promise<void>;
    link(existing: string, p: string): Promise<void>;
    realpath(p: string): Promise<string>;
    /** A new file (O_EXCL, never through a symlink): its descriptor. */
    create(p: string, mode: number): Promise<number>;
    writev(fd: number, parts: Uint8Array[]): Promise<number>;
    fchmod(fd: number, mode: number): Promise<void>;
    futimes(fd: number, t: number): Promise<void>;
    close(fd: number): Promise<void>;
}

/** Directory levels below the top (as agent/tar.c's TAR_DEPTH_MAX). */
export const TAR_DEPTH_MAX = 256;
/** File data gathered into one writev. */
const WRITE_BATCH = 1 << 20;
/** Files up to this size are written in the background (see the file comment). */
const SMALL_FILE = 1 << 20;
const INFLIGHT_FILES = 16;
const INFLIGHT_BYTES = 16 << 20;

export interface ExtractResult {
    /** The directory (or file) the top entry became. */
    path: string;
    /** Archive bytes read. */
    size: number;
    entries: number;
    skipped: number;
}

/** A directory on the current entry's way: checked (or made), its archive metadata applied when it is left. */
interface Level {
    name: string;
    path: string;
    mode?: number;
    mtime?: number;
}

const refuse = (e: TarEntry, code: string, why: string) => new TarError(code, `${e.name}: ${why}`, e.name, e.offset);

/** The name's components below the top, or a refusal. */
function components(e: TarEntry, name: string, what: string): string[] {
    if (name.startsWith('/')) throw refuse(e, 'EPERM', `refused: ${what} outside the target directory (an absolute name)`);
    const cs = name.split('/').filter((c) => c !== '' && c !== '.');
    if (cs.includes('..')) throw refuse(e, 'EPERM', `refused: ${what} outside the target directory (a .. component)`);
    if (cs.length > TAR_DEPTH_MAX + 1) throw refuse(e, 'EINVAL', `refused: deeper than ${TAR_DEPTH_MAX} directories`);
    return cs;
}

async function lstatOrNull(ops: FsOps, p: string): Promise<EntryStat | null> {
    try {
        return await ops.lstat(p);
    } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
        throw err;
    }
}

/** Unlinks what is at p unless it is a directory (EISDIR then); nothing there is fine. */
async function clear(ops: FsOps, e: TarEntry, p: string): Promise<void> {
    const st = await lstatOrNull(ops, p);
    if (!st) return;
    if (st.isDirectory()) throw refuse(e, 'EISDIR', 'a directory is in the way');
    await ops.unlink(p);
}

/** Runs make(); where the name is taken (EEXIST), clears it (never a directory) and runs it once more. */
async function replacing<T>(ops: FsOps, e: TarEntry, p: string, make: () => Promise<T>): Promise<T> {
    try {
        return await make();
    } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    await clear(ops, e, p);
    return make();
}

const CREATE = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;

/** A file system error as the entry's TarError (a TarError as it is). */
function asTarError(e: TarEntry, err: unknown): TarError {
    if (err instanceof TarError) return err;
    const x = err as NodeJS.ErrnoException;
    return new TarError(x.code ?? 'EIO', `${e.name}: cannot be made here: ${x.message}`, e.name, e.offset);
}

/* Plain descriptors, not fs/promises' FileHandle: an object with a
 * finalizer and more promises on top of the same requests, up to twice the
 * time per small file. */
type Done<T> = (err: NodeJS.ErrnoException | null, v: T) => void;
const call = <T>(f: (cb: Done<T>) => void) => new Promise<T>((res, rej) => f((err, v) => (err ? rej(err) : res(v))));
const none = (cb: Done<void>) => (err: NodeJS.ErrnoException | null) => cb(err, undefined);

export const asyncOps: FsOps = {
    lstat: (p) => fsp.lstat(p),
    unlink: (p) => fsp.unlink(p),
    mkdir: async (p, mode) => void (await fsp.mkdir(p, mode === undefined ? { recursive: true } : mode)),
    chmod: (p, mode) => fsp.chmod(p, mode),
    utimes: (p, t) => fsp.utimes(p, t, t),
    symlink: (target, p) => fsp.symlink(target, p),
    lutimes: (p, t) => fsp.lutimes(p, t, t),
    link: (existing, p) => fsp.link(existing, p),
    realpath: (p) => fsp.realpath(p),
    create: (p, mode) => call<number>((cb) => fs.open(p, CREATE, mode, cb)),
    writev: (fd, parts) => call<number>((cb) => fs.writev(fd, parts, cb)),
    fchmod: (fd, mode) => call<void>((cb) => fs.fchmod(fd, mode, none(cb))),
    futimes: (fd, t) => call<void>((cb) => fs.futimes(fd, t, t, none(cb))),
    close: (fd) => call<void>((cb) => fs.close(fd, none(cb))),
};

export const syncOps: FsOps = {
    lstat: async (p) => fs.lstatSync(p),
    unlink: async (p) => fs.unlinkSync(p),
    mkdir: async (p, mode) => void fs.mkdirSync(p, mode === undefined ? { recursive: true } : mode),
    chmod: async (p, mode) => fs.chmodSync(p, mode),
    utimes: async (p, t) => fs.utimesSync(p, t, t),
    symlink: async (target, p) => fs.symlinkSync(target, p),
    lutimes: async (p, t) => fs.lutimesSync(p, t, t),
    link: async (existing, p) => fs.linkSync(existing, p),
    realpath: async (p) => fs.realpathSync(p),
    create: async (p, mode) => fs.openSync(p, CREATE, mode),
    writev: async (fd, parts) => fs.writevSync(fd, parts),
    fchmod: async (fd, mode) => fs.fchmodSync(fd, mode),
    futimes: async (fd, t) => fs.futimesSync(fd, t, t),
    close: async (fd) => fs.closeSync(fd),
};

/** Writes n bytes of parts at the file's position, again for what a short write left. */
async function writeAll(ops: FsOps, fd: number, parts: Uint8Array[], n: number): Promise<void> {
    for (;;) {
        const done = await ops.writev(fd, parts);
        if (done >= n) return;
        const rest = Buffer.concat(parts).subarray(done);
        parts = [rest];
        n = rest.length;
    }
}

class Extractor {
    private readonly levels: Level[];
    private top: string | undefined;
    /** dest is known to be a directory (only a top entry can change that). */
    private rooted = false;
    /** Background writes of small files by path; each settles without rejecting (its error goes to `failed`). */
    private readonly inflight = new Map<string, Promise<void>>();
    private inflightBytes = 0;
    private failed: TarError | null = null;
    /** This process's umask: a file whose mode it leaves alone needs no chmod after its open. */
    private readonly umask = process.umask();
    entries = 0;
    skipped = 0;

    constructor(
        readonly dest: string,
        private readonly ops: FsOps,
    ) {
        this.levels = [{ name: '', path: dest }];
    }

    /** Throws the first error of a background write. */
    private check(): void {
        if (this.failed) throw this.failed;
    }

    /** Waits for the background write at p, if there is one. */
    private async settle(p: string): Promise<void> {
        const w = this.inflight.get(p);
        if (w) await w;
        this.check();
    }

    /** Waits for every background write; throws the first error of one. */
    async drain(): Promise<void> {
        while (this.inflight.size) await Promise.all(this.inflight.values());
        this.check();
    }

    /** Applies a left directory's mode and mtime (its entries are all made, background writes included). */
    private async leave(l: Level): Promise<void> {
        await this.drain();
        if (l.mode !== undefined) await this.ops.chmod(l.path, l.mode & 0o1777);
        if (l.mtime !== undefined) await this.ops.utimes(l.path, l.mtime);
    }

    /** Leaves the levels from depth k down. */
    private async leaveTo(k: number): Promise<void> {
        while (this.levels.length > k) await this.leave(this.levels.pop()!);
    }

    /** The top itself, where an entry goes below it: an existing directory (never a symlink), or made. */
    private async root(e: TarEntry): Promise<void> {
        if (this.rooted) return;
        await this.settle(this.dest);
        const st = await lstatOrNull(this.ops, this.dest);
        if (st && !st.isDirectory()) throw refuse(e, 'ENOTDIR', `${this.dest} is in the way and is not a directory`);
        if (!st) {
            // An archive without its top directory's entry: made as mkdir -p would.
            await this.ops.mkdir(dirname(this.dest));
            await this.ops.mkdir(this.dest, 0o755);
        }
        this.rooted = true;
    }

    /** The directory that gets the entry whose components below the top are cs: the levels checked or made. */
    private async parent(e: TarEntry, cs: string[]): Promise<string> {
        let k = 1;
        while (k < this.levels.length && k - 1 < cs.length - 1 && this.levels[k]!.name === cs[k - 1]) k++;
        await this.leaveTo(k);
        if (k === 1) await this.root(e);
        for (let i = k - 1; i < cs.length - 1; i++) {
            const p = join(this.levels[this.levels.length - 1]!.path, cs[i]!);
            await this.settle(p);
            let st = await lstatOrNull(this.ops, p);
            if (!st) {
                // A parent the archive did not list: made as mkdir -p would.
                await this.ops.mkdir(p, 0o755).catch((err) => {
                    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
                });
                st = await this.ops.lstat(p);
            }
            if (st.isSymbolicLink()) throw refuse(e, 'ENOTDIR', `refused: a symlink on its way (${cs.slice(0, i + 1).join('/')}), never written through`);
            if (!st.isDirectory()) throw refuse(e, 'ENOTDIR', `a file on its way (${cs.slice(0, i + 1).join('/')})`);
            this.levels.push({ name: cs[i]!, path: p });
        }
        return this.levels[this.levels.length - 1]!.path;
    }

    /**
     * A name's components below the archive's top. The first entry decides
     * whether there is a top: a name (as fs.read's archives have: it becomes
     * dest), or none, "./" (as `tar -C DIR -c .` makes: the contents go
     * straight into dest).
     */
    private below(e: TarEntry, name: string, what: string): string[] {
        const cs = components(e, name, what);
        this.top ??= cs.length ? cs[0]! : '';
        if (this.top === '') return cs;
        if (!cs.length) throw refuse(e, 'EPERM', `refused: ${what} without a name`);
        if (cs[0] !== this.top) throw refuse(e, 'EPERM', `refused: ${what} outside the archive's top entry ${JSON.stringify(this.top)}`);
        return cs.slice(1);
    }

    async entry(e: TarEntry): Promise<void> {
        this.check();
        const below = this.below(e, e.name, 'a name');
        if (e.type === 'fifo' || e.type === 'char' || e.type === 'block' || e.type === 'other') {
            this.skipped++;
            return;
        }
        try {
            let at: string;
            if (below.length) at = join(await this.parent(e, below), below[below.length - 1]!);
            else {
                // The top entry is dest itself: what an entry made there before goes first.
                await this.leaveTo(1);
                at = this.dest;
                this.rooted = false;
                await this.ops.mkdir(dirname(this.dest));
            }
            await this.settle(at);
            if (e.type === 'dir') await this.dir(e, at, below[below.length - 1]);
            else if (e.type === 'file') await this.file(e, at);
            else if (e.type === 'symlink') {
                await replacing(this.ops, e, at, () => this.ops.symlink(e.linkname, at));
                await this.ops.lutimes(at, e.mtime).catch(() => {}); // not every file system keeps a link's times
            } else if (e.type === 'link') await this.hardLink(e, at);
        } catch (err) {
            throw asTarError(e, err);
        }
        this.entries++;
    }

    /** A directory entry at `at`, named `name` in its parent (undefined: the top, dest itself). */
    private async dir(e: TarEntry, at: string, name: string | undefined): Promise<void> {
        const st = await lstatOrNull(this.ops, at);
        if (st && !st.isDirectory()) {
            if (name === undefined) throw refuse(e, 'ENOTDIR', `${at} is in the way and is not a directory`);
            await this.ops.unlink(at); // a file or link the archive replaces with a directory
        }
        if (!st?.isDirectory()) await this.ops.mkdir(at, 0o700);
        // Writable while its entries are made; its own mode once it is left.
        await this.ops.chmod(at, (e.mode | 0o700) & 0o1777);
        const l: Level = { name: name ?? '', path: at, mode: e.mode, mtime: e.mtime };
        if (name === undefined) {
            this.levels[0] = l;
            this.rooted = true;
        } else this.levels.push(l);
    }

    /** Opens a new file at `at` (what was there unlinked, never a directory) with its mode where the umask allows. */
    private async create(e: TarEntry, at: string) {
        const mode = e.mode & 0o1777;
        const fd = await replacing(this.ops, e, at, () => this.ops.create(at, mode));
        return { fd, chmod: (mode & ~this.umask) !== mode ? mode : undefined };
    }

    private async file(e: TarEntry, at: string): Promise<void> {
        if (e.size <= SMALL_FILE) {
            // A copy: the source may reuse its buffers once the next piece is asked for.
            const parts: Uint8Array[] = [];
            for await (const piece of e.body()) parts.push(piece);
            const data = Buffer.concat(parts);
            while (this.inflight.size >= INFLIGHT_FILES || (this.inflight.size && this.inflightBytes + data.length > INFLIGHT_BYTES))
                await Promise.race(this.inflight.values());
            this.check();
            this.inflightBytes += data.length;
            const w: Promise<void> = this.small(e, at, data).finally(() => {
                this.inflightBytes -= data.length;
                if (this.inflight.get(at) === w) this.inflight.delete(at);
            });
            this.inflight.set(at, w);
            return;
        }
        const { fd, chmod: mode } = await this.create(e, at);
        let ok = false;
        try {
            let batch: Uint8Array[] = [];
            let n = 0;
            for await (const piece of e.body()) {
                batch.push(piece);
                n += piece.length;
                if (n >= WRITE_BATCH) {
                    await writeAll(this.ops, fd, batch, n);
                    batch = [];
                    n = 0;
                }
            }
            if (n) await writeAll(this.ops, fd, batch, n);
            if (mode !== undefined) await this.ops.fchmod(fd, mode);
            await this.ops.futimes(fd, e.mtime);
            ok = true;
        } finally {
            await this.ops.close(fd);
            if (!ok) await this.ops.unlink(at).catch(() => {});
        }
    }

    /** A small file's background write; never rejects (the first error goes to `failed`, the file removed). */
    private async small(e: TarEntry, at: string, data: Buffer): Promise<void> {
        let made = false;
        try {
            const { fd, chmod: mode } = await this.create(e, at);
            made = true;
            try {
                if (data.length) await writeAll(this.ops, fd, [data], data.length);
                if (mode !== undefined) await this.ops.fchmod(fd, mode);
                await this.ops.futimes(fd, e.mtime);
            } finally {
                await this.ops.close(fd);
            }
        } catch (err) {
            this.failed ??= asTarError(e, err);
            if (made) await this.ops.unlink(at).catch(() => {});
        }
    }

    private async hardLink(e: TarEntry, at: string): Promise<void> {
        await this.drain(); // its target may be a file still being written
        const ts = this.below(e, e.linkname, 'a hard link to');
        // The target's way is checked as an entry's is (no symlink on it), without making anything.
        let p = this.dest;
        for (const c of ts) {
            const st = await lstatOrNull(this.ops, p);
            if (!st?.isDirectory()) throw refuse(e, 'ENOTDIR', `its target ${JSON.stringify(e.linkname)} has a symlink or a file on its way`);
            p = join(p, c);
        }
        const st = await lstatOrNull(this.ops, p);
        if (!st || st.isDirectory()) throw refuse(e, 'ENOENT', `its target ${JSON.stringify(e.linkname)} is not a file the archive made`);
        await replacing(this.ops, e, at, () => this.ops.link(p, at));
    }

    async finish(): Promise<void> {
        await this.leaveTo(0);
        await this.drain();
    }
}

/**
 * Extracts a tar stream into dest (the archive's top entry becomes dest: a
 * directory made with its parents, or merged into where it exists; a file
 * or symlink top is made at dest; an archive of contents, "./" first, goes
 * into dest). See the file comment for what is refused.
 */
export async function extractTar(source: TarSource, dest: string, ops: FsOps = asyncOps): Promise<ExtractResult> {
    let root = resolve(dest);
    // A dest the caller gave that is a link to a directory is theirs to follow; links the archive makes never are.
    if ((await lstatOrNull(ops, root))?.isSymbolicLink()) {
        const real = await ops.realpath(root).catch(() => null);
        if (real && (await lstatOrNull(ops, real))?.isDirectory()) root = real;
    }
    const x = new Extractor(root, ops);
    let size = 0;
    const counted = (async function* () {
        for await (const c of source as AsyncIterable<Uint8Array> | Iterable<Uint8Array>) {
            size += c.length;
            yield c;
        }
    })();
    try {
        for await (const e of readTar(counted)) await x.entry(e);
        await x.finish();
    } catch (err) {
        await x.drain().catch(() => {}); // no write goes on behind a failed extraction
        throw err;
    }
    return { path: root, size, entries: x.entries, skipped: x.skipped };
}
