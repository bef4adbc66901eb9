/*
 * files.ts - files in a sandbox (fs.*, proto/PROTOCOL.md "Files") in the
 * shape of E2B's `sandbox.files`: read, write (one file or many), list,
 * exists, getInfo, makeDir, remove, rename, watchDir. Big files move in
 * chunks (one fs call per FS_CHUNK bytes, one in flight), so neither side
 * holds more than a chunk; `read(path, { format: 'stream' })` gives a web
 * ReadableStream and `write` takes one.
 */
import type { FsEntry, FsEventNotification, FsStat } from './protocol.js';
import type { SbxdClient } from './client.js';

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

export type WriteData = string | ArrayBuffer | Uint8Array | Blob | ReadableStream<Uint8Array>;

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

async function* chunksOf(data: WriteData): AsyncGenerator<Uint8Array> {
    if (typeof data === 'string') data = new TextEncoder().encode(data);
    if (data instanceof ArrayBuffer) data = new Uint8Array(data);
    if (data instanceof Uint8Array) {
        for (let o = 0; o < data.length; o += FS_CHUNK) yield data.subarray(o, o + FS_CHUNK);
        return;
    }
    const stream = data instanceof Blob ? data.stream() : data;
    const reader = stream.getReader();
    let pend: Uint8Array[] = [];
    let n = 0;
    for (;;) {
        const { value, done } = await reader.read();
        if (value) {
            pend.push(value);
            n += value.length;
        }
        while (n >= FS_CHUNK || (done && n > 0)) {
            const all = Buffer.concat(pend);
            yield all.subarray(0, FS_CHUNK);
            const rest = all.subarray(FS_CHUNK);
            pend = rest.length ? [rest] : [];
            n = rest.length;
        }
        if (done) return;
    }
}

export class SbxdFiles {
    constructor(
        readonly client: SbxdClient,
        readonly sandbox: string,
    ) {}

    /** The whole file: text (default), bytes, a Blob, or a web ReadableStream read chunk by chunk. */
    read(path: string, opts?: { format?: 'text' }): Promise<string>;
    read(path: string, opts: { format: 'bytes' }): Promise<Uint8Array>;
    read(path: string, opts: { format: 'blob' }): Promise<Blob>;
    read(path: string, opts: { format: 'stream' }): Promise<ReadableStream<Uint8Array>>;
    async read(path: string, opts: { format?: 'text' | 'bytes' | 'blob' | 'stream' } = {}): Promise<unknown> {
        const stream = this.stream(path);
        if (opts.format === 'stream') return stream;
        const parts: Uint8Array[] = [];
        const reader = stream.getReader();
        for (;;) {
            const { value, done } = await reader.read();
            if (value) parts.push(value);
            if (done) break;
        }
        const bytes = new Uint8Array(Buffer.concat(parts));
        if (opts.format === 'bytes') return bytes;
        if (opts.format === 'blob') return new Blob([bytes]);
        return new TextDecoder().decode(bytes);
    }

    private stream(path: string): ReadableStream<Uint8Array> {
        let offset = 0;
        let eof = false;
        return new ReadableStream<Uint8Array>({
            pull: async (ctl) => {
                if (eof) return ctl.close();
                const r = await this.client.call('fs.read', {
                    sandbox: this.sandbox,
                    path,
                    offset,
                    length: FS_CHUNK,
                    encoding: 'base64',
                });
                const bytes = Buffer.from(r.data_b64 ?? '', 'base64');
                offset += bytes.length;
                eof = r.eof || bytes.length === 0;
                if (bytes.length) ctl.enqueue(new Uint8Array(bytes));
                if (eof) ctl.close();
            },
        });
    }

    /** Writes one file atomically (it appears whole), or several: [{ path, data }]. */
    write(path: string, data: WriteData, opts?: { mode?: number }): Promise<EntryInfo>;
    write(files: Array<{ path: string; data: WriteData; mode?: number }>): Promise<EntryInfo[]>;
    async write(
        a: string | Array<{ path: string; data: WriteData; mode?: number }>,
        data?: WriteData,
        opts: { mode?: number } = {},
    ): Promise<unknown> {
        if (Array.isArray(a)) {
            const out: EntryInfo[] = [];
            for (const f of a) out.push(await this.write(f.path, f.data, f.mode !== undefined ? { mode: f.mode } : {}));
            return out;
        }
        let handle: number | undefined;
        let last: { path: string } | undefined;
        let prev: Uint8Array | undefined;
        const send = async (chunk: Uint8Array, more: boolean) => {
            const b64 = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length).toString('base64');
            const r = await this.client.call('fs.write', {
                sandbox: this.sandbox,
                ...(handle
                    ? { handle }
                    : { path: a, mkdir_parents: true, ...(opts.mode !== undefined ? { mode: opts.mode } : {}) }),
                data_b64: b64,
                more,
            });
            handle = r.handle;
            last = r;
        };
        try {
            for await (const chunk of chunksOf(data ?? '')) {
                if (prev) await send(prev, true);
                prev = chunk;
            }
            await send(prev ?? new Uint8Array(0), false);
        } catch (e) {
            if (handle) await this.client.call('fs.write', { sandbox: this.sandbox, handle, abort: true }).catch(() => {});
            throw e;
        }
        return this.getInfo(last?.path ?? a);
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
