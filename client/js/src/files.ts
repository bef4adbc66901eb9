/*
 * files.ts - files in a sandbox (fs.*, proto/PROTOCOL.md "Files") in the
 * shape of E2B's `sandbox.files`: read, write (one file or many), list,
 * exists, getInfo, makeDir, remove, rename, watchDir. Big files move over
 * the raw transport (files_raw.ts) where the daemon offers it, else in
 * base64 chunks (one fs call per FS_CHUNK bytes, one in flight); either way
 * neither side holds more than a bounded piece. `read(path, { format:
 * 'stream' })` gives a web ReadableStream and `write` takes one or a Node
 * Readable. Trees move as one tar stream each way: uploadDir/writeArchive
 * (packed by tar.ts), readArchive/downloadDir (extracted by tar_extract.ts
 * as the bytes arrive, on a worker thread of its own: extract_thread.ts).
 */
import type { FsEntry, FsEventNotification, FsStat } from './protocol.js';
import * as posix from 'node:path/posix';
import { ReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { SbxdError } from './errors.js';
import type { FsTransport } from './transport.js';
import { rawStream, rawToken, rawWrite, type ReadExtra, type ReadFallback } from './files_raw.js';
import { planTree, packTree } from './tar.js';
import { extractTar } from './tar_extract.js';
import { extractInThread } from './extract_thread.js';

/** Bytes per call: the daemon's default limits.fs_chunk_bytes. */
export const FS_CHUNK = 4 << 20;

export interface EntryInfo {
    name: string;
    path: string;
    type: 'file' | 'dir' | string;
    size: number;
    mode: number;
    modifiedTime: Date;
    symlinkTarget?: string;
}

/** What write takes: text, bytes, a Blob, a web ReadableStream or a Node Readable (any async iterable of bytes). */
export type WriteData = string | ArrayBuffer | Uint8Array | Blob | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array | string>;

/** What an archive write answers (proto/PROTOCOL.md, Archives). */
export interface ArchiveResult {
    path: string;
    size: number;
    entries: number;
    skipped: number;
}

export interface WriteOptions {
    mode?: number;
    /** The exact byte count of a stream, when known: it then goes as one raw transfer. */
    size?: number;
}

/** From this size up, bytes go over the raw transport (as libsbx's SBX_FS_RAW_MIN). */
export const RAW_MIN = 256 << 10;
/** Bytes handed to the raw socket at a time. */
const RAW_PART = 1 << 20;
/** A stream of unknown length goes in segments of this many bytes (the memory it costs here). */
export const RAW_SEGMENT = 8 << 20;

export interface FilesystemEvent {
    name: string; // the path, as E2B names it
    type: 'create' | 'write' | 'remove' | 'rename' | 'overflow';
}

export interface WatchHandle {
    stop(): Promise<void>;
}

function entry(e: FsEntry): EntryInfo {
    return {
        name: e.name,
        path: e.path,
        type: e.type,
        size: e.size,
        mode: e.mode,
        modifiedTime: new Date(e.mtime),
        ...(e.target !== undefined ? { symlinkTarget: e.target } : {}),
    };
}

/**
 * The length of a Node fs.ReadStream of a whole regular file, not read yet
 * (fs.createReadStream(path)): its file's size, so it goes as one raw
 * transfer. A file that changes size meanwhile fails the write (the byte
 * count is exact), leaving nothing. Else undefined.
 */
async function fileSize(d: unknown): Promise<number | undefined> {
    if (!(d instanceof ReadStream) || d.bytesRead !== 0 || typeof d.path !== 'string') return undefined;
    const r = d as unknown as { start?: number; end?: number };
    if (r.start !== undefined || (r.end !== undefined && r.end !== Infinity)) return undefined;
    try {
        const st = await stat(d.path);
        return st.isFile() ? st.size : undefined;
    } catch {
        return undefined;
    }
}

/** The data as one array of bytes, or (a stream, a Blob) its non-empty chunks as they come, strings as UTF-8. */
function bytesOf(data: WriteData): Uint8Array | AsyncGenerator<Uint8Array> {
    if (typeof data === 'string') return new TextEncoder().encode(data);
    if (data instanceof ArrayBuffer) return new Uint8Array(data);
    if (data instanceof Uint8Array) return data;
    // Web streams are async iterable in Node (the DOM typings do not say so).
    const source = (data instanceof Blob ? data.stream() : data) as AsyncIterable<Uint8Array | string>;
    return (async function* () {
        for await (const v of source) {
            const b = typeof v === 'string' ? Buffer.from(v) : v;
            if (b.length) yield b;
        }
    })();
}

/** A source's bytes as they come, for a raw write: no re-slicing, no copies. */
async function* partsOf(data: WriteData): AsyncGenerator<Uint8Array> {
    const d = bytesOf(data);
    if (!(d instanceof Uint8Array)) return yield* d;
    for (let o = 0; o < d.length; o += RAW_PART) yield d.subarray(o, o + RAW_PART);
}

/** The source in pieces of exactly `size` bytes (the last one shorter); nothing buffered beyond one piece. */
async function* chunksOf(data: WriteData, size: number): AsyncGenerator<Uint8Array> {
    const d = bytesOf(data);
    if (d instanceof Uint8Array) {
        for (let o = 0; o < d.length; o += size) yield d.subarray(o, o + size);
        return;
    }
    let pend: Uint8Array[] = [];
    let n = 0;
    for await (const b of d) {
        pend.push(b);
        n += b.length;
        while (n >= size) {
            const all = pend.length === 1 ? pend[0]! : Buffer.concat(pend);
            yield all.subarray(0, size);
            const rest = all.subarray(size);
            pend = rest.length ? [rest] : [];
            n = rest.length;
        }
    }
    if (n > 0) yield pend.length === 1 ? pend[0]! : Buffer.concat(pend);
}

/** fs.read's archive params (PROTOCOL.md, Archives). */
function archiveExtra(opts: { follow?: boolean; name?: string }): ReadExtra {
    return {
        format: 'tar',
        ...(opts.follow ? { follow: true } : {}),
        ...(opts.name !== undefined ? { name: opts.name } : {}),
    };
}

export class SbxdFiles {
    constructor(
        readonly client: FsTransport,
        readonly sandbox: string,
    ) {}

    /** SBXD_FS_TRANSPORT=json keeps big files on base64 chunks (as libsbx's SBX_FS_TRANSPORT). */
    private readonly jsonOnly = process.env.SBXD_FS_TRANSPORT === 'json';

    /**
     * The whole file: text (default), bytes, a Blob, or a web ReadableStream.
     * A stream comes over the raw transport where the daemon offers it (the
     * bytes as they are, with backpressure: a consumer that stops reading
     * stops the transfer), else chunk by chunk in base64.
     */
    read(path: string, opts?: { format?: 'text' }): Promise<string>;
    read(path: string, opts: { format: 'bytes' }): Promise<Uint8Array>;
    read(path: string, opts: { format: 'blob' }): Promise<Blob>;
    read(path: string, opts: { format: 'stream' }): Promise<ReadableStream<Uint8Array>>;
    async read(path: string, opts: { format?: 'text' | 'bytes' | 'blob' | 'stream' } = {}): Promise<unknown> {
        if (opts.format === 'stream') return this.stream(path, 0);
        // A small file in one call; the rest of a big one over the raw transport.
        const first = await this.client.call('fs.read', {
            sandbox: this.sandbox,
            path,
            length: RAW_MIN,
            encoding: 'base64',
        });
        const head = Buffer.from(first.data_b64 ?? '', 'base64');
        const parts: Uint8Array[] = [head];
        if (!first.eof && head.length) {
            const reader = (await this.stream(path, head.length)).getReader();
            for (;;) {
                const { value, done } = await reader.read();
                if (value) parts.push(value);
                if (done) break;
            }
        }
        const bytes = new Uint8Array(Buffer.concat(parts));
        if (opts.format === 'bytes') return bytes;
        if (opts.format === 'blob') return new Blob([bytes]);
        return new TextDecoder().decode(bytes);
    }

    /** From offset on: raw where offered, else JSON chunks (one call in flight, each its own credit). */
    private async stream(path: string, start: number): Promise<ReadableStream<Uint8Array>> {
        const fallback: ReadFallback = {};
        if (!this.jsonOnly) {
            const token = await rawToken(this.client, this.sandbox, path, start, fallback);
            if (token) return rawStream(this.client.socketPath, token);
        }
        let offset = start;
        let eof = false;
        let pre = fallback.first;
        return new ReadableStream<Uint8Array>({
            pull: async (ctl) => {
                if (eof) return ctl.close();
                const r =
                    pre ??
                    (await this.client.call('fs.read', {
                        sandbox: this.sandbox,
                        path,
                        offset,
                        length: FS_CHUNK,
                        encoding: 'base64',
                    }));
                pre = undefined;
                const bytes = Buffer.from(r.data_b64 ?? '', 'base64');
                offset += bytes.length;
                eof = r.eof || bytes.length === 0;
                if (bytes.length) ctl.enqueue(new Uint8Array(bytes));
                if (eof) ctl.close();
            },
        });
    }

    /**
     * Writes one file atomically (it appears whole), or several: [{ path, data }].
     * `data` may be a web ReadableStream or a Node Readable (any async
     * iterable of bytes): big data goes over the raw transport where the
     * daemon offers it, read from the source only as fast as the sandbox
     * takes it. A stream of unknown length is sent in segments to a
     * temporary name beside `path`, renamed over it when complete; give
     * `size` when it is known to send it as one.
     */
    write(path: string, data: WriteData, opts?: WriteOptions): Promise<EntryInfo>;
    write(files: Array<{ path: string; data: WriteData; mode?: number }>): Promise<EntryInfo[]>;
    async write(
        a: string | Array<{ path: string; data: WriteData; mode?: number }>,
        data?: WriteData,
        opts: WriteOptions = {},
    ): Promise<unknown> {
        if (Array.isArray(a)) {
            const out: EntryInfo[] = [];
            for (const f of a) out.push(await this.write(f.path, f.data, f.mode !== undefined ? { mode: f.mode } : {}));
            return out;
        }
        const extra = { mkdir_parents: true, ...(opts.mode !== undefined ? { mode: opts.mode } : {}) };
        let d: WriteData = data ?? '';
        if (typeof d === 'string') d = new TextEncoder().encode(d);
        if (d instanceof ArrayBuffer) d = new Uint8Array(d);
        const size = d instanceof Uint8Array ? d.length : d instanceof Blob ? d.size : (opts.size ?? (await fileSize(d)));
        if (size !== undefined && size >= RAW_MIN && !this.jsonOnly) {
            const r = await rawWrite(this.client, this.sandbox, a, size, partsOf(d), extra);
            if (r) return this.getInfo(r.path);
        } else if (size === undefined && !this.jsonOnly) {
            const r = await this.writeSegments(a, d, extra);
            if (r) return this.getInfo(r);
        }
        return this.getInfo(await this.writeJson(a, chunksOf(d, FS_CHUNK), extra));
    }

    /**
     * A source of unknown length over the raw transport: the first segment
     * decides (it ends within one: a plain write); then segments appended to
     * a temporary name, renamed into place at the end. Null: raw not offered
     * (nothing was written; the source is not consumed beyond the first
     * segment, which is lost, so the caller falls back only before that).
     */
    private async writeSegments(path: string, d: WriteData, extra: Record<string, unknown>): Promise<string | null> {
        const it = chunksOf(d, RAW_SEGMENT)[Symbol.asyncIterator]();
        let cur = await it.next();
        const one = (b: Uint8Array) => (async function* () {
            for (let o = 0; o < b.length; o += RAW_PART) yield b.subarray(o, o + RAW_PART);
        })();
        if (cur.done) cur = { value: new Uint8Array(0), done: false };
        let next = await it.next();
        if (next.done) {
            // All of it fit in one segment.
            const seg = cur.value;
            if (seg.length < RAW_MIN) return this.writeJson(path, one(seg), extra);
            const r = await rawWrite(this.client, this.sandbox, path, seg.length, one(seg), extra);
            return r ? r.path : this.writeJson(path, one(seg), extra);
        }
        const tmp = posix.join(posix.dirname(path), `.${posix.basename(path)}.sbx-${randomBytes(6).toString('hex')}`);
        if (extra.mode === undefined) {
            // As a write in place would: a replaced file keeps its mode.
            const old = await this.client.call('fs.stat', { sandbox: this.sandbox, path }).catch(() => null);
            if (old?.type === 'file') extra = { ...extra, mode: old.mode };
        }
        try {
            let first = true;
            for (;;) {
                const seg = cur.value;
                const r = await rawWrite(this.client, this.sandbox, tmp, seg.length, one(seg), first ? extra : { append: true });
                if (!r) throw new SbxdError('fs.write', -32011, 'raw transport not offered for a segmented write');
                first = false;
                if (next.done) break;
                cur = next;
                next = await it.next();
            }
            return (await this.client.call('fs.rename', { sandbox: this.sandbox, path: tmp, to: path })).to;
        } catch (e) {
            await this.client.call('fs.remove', { sandbox: this.sandbox, path: tmp }).catch(() => {});
            throw e;
        }
    }

    /** Base64 chunks through a write handle; each call answered before the next (the backpressure). */
    private async writeJson(path: string, chunks: AsyncIterable<Uint8Array>, extra: Record<string, unknown>): Promise<string> {
        return (await this.writeJsonAnswer(path, chunks, extra)).path;
    }

    private async writeJsonAnswer(
        path: string,
        chunks: AsyncIterable<Uint8Array>,
        extra: Record<string, unknown>,
    ): Promise<{ path: string } & Record<string, unknown>> {
        let handle: number | undefined;
        let last: ({ path: string } & Record<string, unknown>) | undefined;
        let prev: Uint8Array | undefined;
        const send = async (chunk: Uint8Array, more: boolean) => {
            const b64 = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length).toString('base64');
            const r = await this.client.call('fs.write', {
                sandbox: this.sandbox,
                ...(handle ? { handle } : { path, ...extra }),
                data_b64: b64,
                more,
            });
            handle = r.handle;
            last = r as unknown as { path: string } & Record<string, unknown>;
        };
        try {
            for await (const chunk of chunks) {
                if (prev) await send(prev, true);
                prev = chunk;
            }
            await send(prev ?? new Uint8Array(0), false);
        } catch (e) {
            if (handle) await this.client.call('fs.write', { sandbox: this.sandbox, handle, abort: true }).catch(() => {});
            throw e;
        }
        return last ?? { path };
    }

    /**
     * A tar stream extracted into the existing directory `path` (fs.write
     * format "tar": docker cp's archive semantics, entries made as the
     * command user; proto/PROTOCOL.md, Archives). One raw transfer when its
     * length is known (bytes, a Blob, `size`, fs.createReadStream of a
     * file), else base64 chunks. Unlike write(), entries made before a
     * failure stay.
     */
    async writeArchive(path: string, archive: WriteData, opts: { size?: number } = {}): Promise<ArchiveResult> {
        let d: WriteData = archive;
        if (typeof d === 'string') d = new TextEncoder().encode(d);
        if (d instanceof ArrayBuffer) d = new Uint8Array(d);
        const size = d instanceof Uint8Array ? d.length : d instanceof Blob ? d.size : (opts.size ?? (await fileSize(d)));
        if (size !== undefined && !this.jsonOnly) {
            const r = await rawWrite(this.client, this.sandbox, path, size, partsOf(d), { format: 'tar' });
            if (r) return r as ArchiveResult;
        }
        return (await this.writeJsonAnswer(path, chunksOf(d, FS_CHUNK), { format: 'tar' })) as unknown as ArchiveResult;
    }

    /**
     * The local directory `localDir` (or file) copied to `remotePath` in the
     * sandbox, as `docker cp DIR ID:PATH` does for a PATH that does not
     * exist yet: its parents are made, the tree goes as one tar stream of
     * known length (one raw transfer), packed from the files as they are
     * sent. Files belong to the command user; modes and mtimes are kept.
     */
    async uploadDir(localDir: string, remotePath: string): Promise<ArchiveResult> {
        const top = posix.basename(remotePath);
        if (!top || top === '.' || top === '..') throw new RangeError(`uploadDir: ${remotePath} does not name an entry`);
        const parent = posix.dirname(remotePath);
        await this.client.call('fs.mkdir', { sandbox: this.sandbox, path: parent, parents: true });
        const plan = await planTree(localDir, top);
        if (!this.jsonOnly) {
            const r = await rawWrite(this.client, this.sandbox, parent, plan.size, packTree(plan), { format: 'tar' });
            if (r) return r as ArchiveResult;
        }
        return (await this.writeJsonAnswer(parent, chunksOf(packTree(plan), FS_CHUNK), { format: 'tar' })) as unknown as ArchiveResult;
    }

    /**
     * `path` (a directory or a file) in the sandbox as a tar stream, the raw
     * bytes (fs.read format "tar", proto/PROTOCOL.md Archives: its top entry
     * named after path's base name or `name`, the tree depth first, ustar
     * with PAX records on Docker, GNU tar's on Modal), to pipe elsewhere or
     * to read with readTar. Over the raw transport where the daemon offers
     * it, else chunk by chunk through the archive's handle; either way the
     * sandbox makes the next bytes only when this stream is read.
     * `follow`: a symlink at path itself is archived as what it points to
     * (docker cp -L).
     */
    async readArchive(path: string, opts: { follow?: boolean; name?: string } = {}): Promise<ReadableStream<Uint8Array>> {
        const extra = archiveExtra(opts);
        const fallback: ReadFallback = {};
        if (!this.jsonOnly) {
            const token = await rawToken(this.client, this.sandbox, path, 0, fallback, extra);
            if (token) return rawStream(this.client.socketPath, token);
        }
        return this.archiveChunks(path, extra, fallback.first);
    }

    /** An archive chunk by chunk through its handle (`first`: the answer fs.read already gave). */
    private async archiveChunks(path: string, extra: ReadExtra, first: ReadFallback['first']): Promise<ReadableStream<Uint8Array>> {
        type Chunk = NonNullable<ReadFallback['first']>;
        // The first chunk now: a refused path rejects here (over raw, the stream's first read fails).
        let pre: Chunk | undefined =
            first ?? (await this.client.call('fs.read', { sandbox: this.sandbox, path, length: FS_CHUNK, ...extra }));
        let handle = pre.handle;
        let ended = pre.eof;
        let inflight: Promise<unknown> | undefined;
        return new ReadableStream<Uint8Array>({
            pull: async (ctl) => {
                const next = pre ? Promise.resolve(pre) : this.client.call('fs.read', { sandbox: this.sandbox, handle, length: FS_CHUNK });
                inflight = next;
                const r: Chunk = await next;
                pre = undefined;
                handle = r.handle ?? handle;
                ended = r.eof;
                const bytes = Buffer.from(r.data_b64 ?? '', 'base64');
                if (bytes.length) ctl.enqueue(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length));
                if (r.eof) ctl.close();
                else if (handle === undefined) ctl.error(new SbxdError('fs.read', -32603, 'an archive chunk without eof or a handle'));
            },
            // A reader done early lets the archive go at once (the sandbox's tar ends), not at the idle timeout.
            cancel: async () => {
                await inflight?.catch(() => {});
                if (!ended && handle !== undefined)
                    await this.client.call('fs.read', { sandbox: this.sandbox, handle, abort: true }).catch(() => {});
            },
        });
    }

    /**
     * The sandbox's `remotePath` (a directory, or a file) copied to the
     * local `localDir`, as `docker cp ID:PATH DIR` does for a DIR that does
     * not exist yet: its parents are made, and an existing directory is
     * merged into. One tar stream (readArchive), extracted as its bytes
     * arrive, never a whole file in memory: regular files, directories and
     * symlinks with their modes (setuid/setgid dropped) and mtimes; hard
     * links as links; fifos and devices skipped. Entries that would land
     * outside localDir (absolute names, `..`, hard links out) or be written
     * through a symlink are refused with a TarError naming the entry;
     * entries made before it stay. Files belong to this process's user.
     * Over the raw transport the files are made on a worker thread that
     * reads the archive itself (extract_thread.ts), leaving this thread's
     * loop free; `thread: false` makes them here, as base64 chunks do.
     */
    async downloadDir(
        remotePath: string,
        localDir: string,
        opts: { follow?: boolean; thread?: boolean } = {},
    ): Promise<ArchiveResult> {
        const extra = archiveExtra(opts);
        if (opts.thread === false || this.jsonOnly) return extractTar(await this.readArchive(remotePath, opts.follow ? { follow: true } : {}), localDir);
        const fallback: ReadFallback = {};
        const token = await rawToken(this.client, this.sandbox, remotePath, 0, fallback, extra);
        if (token) return extractInThread(this.client.socketPath, token, localDir);
        return extractTar(await this.archiveChunks(remotePath, extra, fallback.first), localDir);
    }

    /** Entries of a directory (depth 1 by default), every page. */
    async list(path: string, opts: { depth?: number } = {}): Promise<EntryInfo[]> {
        const out: EntryInfo[] = [];
        let cursor: string | undefined;
        do {
            const r = await this.client.call('fs.list', {
                sandbox: this.sandbox,
                path,
                depth: opts.depth ?? 1,
                ...(cursor ? { cursor } : {}),
            });
            out.push(...r.entries.map(entry));
            cursor = r.cursor;
        } while (cursor);
        return out;
    }

    async getInfo(path: string): Promise<EntryInfo & { uid: number; gid: number }> {
        const s: FsStat = await this.client.call('fs.stat', { sandbox: this.sandbox, path });
        return { ...entry(s), uid: s.uid, gid: s.gid };
    }

    async exists(path: string): Promise<boolean> {
        try {
            await this.client.call('fs.stat', { sandbox: this.sandbox, path, follow: false });
            return true;
        } catch (e) {
            if ((e as { code?: number }).code === -32010) return false;
            throw e;
        }
    }

    /** mkdir -p; false when it was there already. */
    async makeDir(path: string): Promise<boolean> {
        return (await this.client.call('fs.mkdir', { sandbox: this.sandbox, path, parents: true })).created;
    }

    /** A file, link or directory (with everything in it). */
    async remove(path: string): Promise<void> {
        await this.client.call('fs.remove', { sandbox: this.sandbox, path, recursive: true });
    }

    async rename(oldPath: string, newPath: string): Promise<EntryInfo> {
        await this.client.call('fs.rename', { sandbox: this.sandbox, path: oldPath, to: newPath });
        return this.getInfo(newPath);
    }

    /** Calls onEvent for changes under path (E2B's types: create, write, remove, rename). */
    async watchDir(
        path: string,
        onEvent: (e: FilesystemEvent) => void,
        opts: { recursive?: boolean } = {},
    ): Promise<WatchHandle> {
        const kinds: Record<FsEventNotification['kind'], FilesystemEvent['type']> = {
            create: 'create',
            modify: 'write',
            delete: 'remove',
            rename: 'rename',
            overflow: 'overflow',
        };
        const pending: FsEventNotification[] = [];
        let watch = 0;
        const off = this.client.on('fs.event', (p) => {
            if (p.sandbox !== this.sandbox) return;
            if (!watch) pending.push(p);
            else if (p.watch === watch) onEvent({ name: p.path, type: kinds[p.kind] });
        });
        try {
            watch = (await this.client.call('fs.watch', { sandbox: this.sandbox, path, recursive: !!opts.recursive })).watch;
        } catch (e) {
            off();
            throw e;
        }
        for (const p of pending) if (p.watch === watch) onEvent({ name: p.path, type: kinds[p.kind] });
        return {
            stop: async () => {
                off();
                await this.client.call('fs.unwatch', { sandbox: this.sandbox, watch }).catch(() => {});
            },
        };
    }
}
