/*
 * SbxdProcess: the handle of a process this client follows.
 *
 * Output arrives as process.output notifications with the byte offset of their
 * first byte in that stream. The handle remembers how many bytes of each stream
 * it has; a replay after a reconnect that overlaps is cut to the new part, so a
 * consumer never sees a byte twice, and a gap (output older than the daemon's
 * replay buffer) is counted in `stdoutLostBytes` / `stderrLostBytes`.
 */
import type { ExitNotification, ExitRecord, OutputEncoding, OutputNotification } from './protocol.js';

export type StreamName = 'stdout' | 'stderr';

export interface SpawnOptions {
    /** abort = kill; an already aborted signal runs nothing (spawn rejects with its reason). */
    signal?: AbortSignal;
    onStdout?: (data: string) => void;
    onStderr?: (data: string) => void;
    /** Per stream, the newest bytes kept in `stdout`/`stderr` (default 16 MiB; Infinity keeps all). */
    maxRetainedBytes?: number;
}

export interface OutputChunk {
    stream: StreamName;
    data: string;
}

/** What a handle needs from its client. */
export interface ProcessSink {
    call(method: string, params: object): Promise<any>;
    unfollow(p: SbxdProcess): void;
}

const DEFAULT_RETAIN = 16 * 1024 * 1024;

class Retained {
    private chunks: string[] = [];
    private sizes: number[] = [];
    private bytes = 0;
    dropped = 0;
    private cache: string | null = '';
    constructor(private readonly max: number) {}
    add(s: string, n: number): void {
        if (this.max <= 0) {
            this.dropped += n;
            return;
        }
        this.chunks.push(s);
        this.sizes.push(n);
        this.bytes += n;
        this.cache = null;
        while (this.bytes > this.max && this.chunks.length > 1) {
            const gone = this.sizes.shift()!;
            this.bytes -= gone;
            this.dropped += gone;
            this.chunks.shift();
        }
        if (this.bytes > this.max) {
            // One chunk bigger than the cap: keep its newest bytes.
            const b = Buffer.from(this.chunks[0]!, 'utf8');
            const keep = b.subarray(b.length - this.max);
            this.dropped += b.length - keep.length;
            this.chunks[0] = keep.toString('utf8');
            this.sizes[0] = keep.length;
            this.bytes = keep.length;
        }
    }
    toString(): string {
        if (this.cache === null) {
            this.cache = this.chunks.join('');
            this.chunks = this.cache.length ? [this.cache] : [];
            this.sizes = this.cache.length ? [this.bytes] : [];
        }
        return this.cache;
    }
}

interface IterState {
    queue: OutputChunk[];
    wake: (() => void) | null;
}

export class SbxdProcess implements AsyncIterable<OutputChunk> {
    readonly sandbox: string;
    readonly pid: number;
    /** The exit record once the process has ended. */
    exit: ExitRecord | undefined;
    private readonly sink: ProcessSink;
    private readonly next = { stdout: 0, stderr: 0 };
    private readonly lost = { stdout: 0, stderr: 0 };
    private readonly retained: Record<StreamName, Retained>;
    private readonly cbs: Record<StreamName, Set<(d: string) => void>> = { stdout: new Set(), stderr: new Set() };
    private readonly decoders = { stdout: new TextDecoder('utf-8'), stderr: new TextDecoder('utf-8') };
    private readonly pendingDecode = { stdout: false, stderr: false };
    private readonly iters = new Set<IterState>();
    private readonly byteSinks: Record<StreamName, Set<ReadableStreamDefaultController<Uint8Array>>> = {
        stdout: new Set(),
        stderr: new Set(),
    };
    /** Raw bytes of the handle's first tick, for a readable() made right after spawn resolves. */
    private firstTick: Record<StreamName, Uint8Array[]> | null = { stdout: [], stderr: [] };
    private waitPromise: Promise<ExitRecord>;
    private resolveWait!: (r: ExitRecord) => void;
    private rejectWait!: (e: Error) => void;
    private signal: AbortSignal | undefined;
    private onAbort: (() => void) | null = null;
    private readonly startedAt = Date.now();

    private readonly encoding: OutputEncoding;

    constructor(sink: ProcessSink, sandbox: string, pid: number, options: SpawnOptions = {}, encoding: OutputEncoding = 'utf8') {
        this.sink = sink;
        this.encoding = encoding;
        this.sandbox = sandbox;
        this.pid = pid;
        const max = options.maxRetainedBytes ?? DEFAULT_RETAIN;
        this.retained = { stdout: new Retained(max), stderr: new Retained(max) };
        if (options.onStdout) this.cbs.stdout.add(options.onStdout);
        if (options.onStderr) this.cbs.stderr.add(options.onStderr);
        this.waitPromise = new Promise<ExitRecord>((res, rej) => {
            this.resolveWait = res;
            this.rejectWait = rej;
        });
        this.waitPromise.catch(() => {}); // a lost process need not be awaited
        setImmediate(() => (this.firstTick = null));
        this.signal = options.signal;
        if (this.signal) {
            this.onAbort = () => void this.kill().catch(() => false);
            this.signal.addEventListener('abort', this.onAbort, { once: true });
        }
    }

    /* ---- state -------------------------------------------------------------- */

    get exited(): boolean {
        return this.exit !== undefined;
    }
    get exitCode(): number | undefined {
        return this.exit?.exit_code;
    }
    /** Retained stdout (text; see maxRetainedBytes). */
    get stdout(): string {
        return this.retained.stdout.toString();
    }
    get stderr(): string {
        return this.retained.stderr.toString();
    }
    get stdoutTruncated(): boolean {
        return this.retained.stdout.dropped > 0;
    }
    get stderrTruncated(): boolean {
        return this.retained.stderr.dropped > 0;
    }
    get stdoutDroppedBytes(): number {
        return this.retained.stdout.dropped;
    }
    get stderrDroppedBytes(): number {
        return this.retained.stderr.dropped;
    }
    /** Bytes received so far per stream (the offsets a re-attach starts from). */
    get offsets(): { stdout: number; stderr: number } {
        return { ...this.next };
    }
    /** Bytes the daemon no longer had when this handle re-attached. */
    get stdoutLostBytes(): number {
        return this.lost.stdout;
    }
    get stderrLostBytes(): number {
        return this.lost.stderr;
    }

    /* ---- consumers -------------------------------------------------------------- */

    /** Calls `cb` with each later stdout chunk; returns the unsubscribe. */
    onStdout(cb: (data: string) => void): () => void {
        this.cbs.stdout.add(cb);
        return () => this.cbs.stdout.delete(cb);
    }
    onStderr(cb: (data: string) => void): () => void {
        this.cbs.stderr.add(cb);
        return () => this.cbs.stderr.delete(cb);
    }

    /** Chunks of both streams in arrival order, starting with what is retained; ends at exit. */
    [Symbol.asyncIterator](): AsyncIterator<OutputChunk> {
        const st: IterState = { queue: [], wake: null };
        if (this.stdout) st.queue.push({ stream: 'stdout', data: this.stdout });
        if (this.stderr) st.queue.push({ stream: 'stderr', data: this.stderr });
        if (!this.exited) this.iters.add(st);
        return {
            next: async (): Promise<IteratorResult<OutputChunk>> => {
                for (;;) {
                    const c = st.queue.shift();
                    if (c) return { value: c, done: false };
                    if (!this.iters.has(st)) return { value: undefined, done: true };
                    await new Promise<void>((r) => (st.wake = r));
                    st.wake = null;
                }
            },
            return: async (): Promise<IteratorResult<OutputChunk>> => {
                this.iters.delete(st);
                st.queue.length = 0;
                return { value: undefined, done: true };
            },
        };
    }

    /**
     * A web ReadableStream of one stream's bytes, exact (binary-safe); closes at
     * exit. Made in the same tick as spawn() resolves it starts at byte 0;
     * later, at the bytes that arrive from then on.
     */
    readable(stream: StreamName = 'stdout'): ReadableStream<Uint8Array> {
        let ctl: ReadableStreamDefaultController<Uint8Array>;
        return new ReadableStream<Uint8Array>({
            start: (c) => {
                ctl = c;
                for (const b of this.firstTick?.[stream] ?? []) c.enqueue(b);
                if (this.exited) c.close();
                else this.byteSinks[stream].add(c);
            },
            cancel: () => {
                this.byteSinks[stream].delete(ctl);
            },
        });
    }

    /* ---- actions ------------------------------------------------------------------ */

    /** The exit record; the same promise every time. */
    wait(): Promise<ExitRecord> {
        return this.waitPromise;
    }

    /** Kills the process (default SIGKILL); true if it was still running. */
    async kill(signal?: string | number): Promise<boolean> {
        if (this.exited) return false;
        const r = await this.sink.call(
            'process.kill',
            signal === undefined ? { sandbox: this.sandbox, pid: this.pid } : { sandbox: this.sandbox, pid: this.pid, signal },
        );
        return !r.already_exited;
    }

    async sendStdin(data: string | Uint8Array): Promise<number> {
        if (this.exited) throw new Error(`process ${this.pid} has already exited with code ${this.exitCode}`);
        const params =
            typeof data === 'string'
                ? { sandbox: this.sandbox, pid: this.pid, data }
                : { sandbox: this.sandbox, pid: this.pid, data_b64: Buffer.from(data).toString('base64') };
        return (await this.sink.call('process.write', params)).written;
    }

    async closeStdin(): Promise<void> {
        if (this.exited) return;
        await this.sink.call('process.close_stdin', { sandbox: this.sandbox, pid: this.pid });
    }

    /** The window size of its terminal (a process spawned with `pty`). */
    async resize(cols: number, rows: number): Promise<void> {
        if (this.exited) return;
        await this.sink.call('process.resize', { sandbox: this.sandbox, pid: this.pid, cols, rows });
    }

    /** Stops following (process.detach); the process keeps running. */
    async detach(): Promise<void> {
        this.sink.unfollow(this);
        await this.sink.call('process.detach', { sandbox: this.sandbox, pid: this.pid });
    }

    /* ---- called by the client ------------------------------------------------------- */

    /** @internal */
    _setOffsets(stdout: number, stderr: number): void {
        this.next.stdout = stdout;
        this.next.stderr = stderr;
    }

    /** @internal Follows again on a (new) connection from the offsets received. */
    async _reattach(): Promise<void> {
        const r = await this.sink.call('process.attach', {
            sandbox: this.sandbox,
            pid: this.pid,
            stdout_offset: this.next.stdout,
            stderr_offset: this.next.stderr,
            follow: true,
            output_encoding: this.encoding,
        });
        for (const s of ['stdout', 'stderr'] as const) {
            const start = r[`${s}_start`] as number;
            if (typeof start === 'number' && start > this.next[s]) {
                this.lost[s] += start - this.next[s];
                this.next[s] = start;
            }
        }
    }

    /** @internal */
    _output(n: OutputNotification): void {
        const s: StreamName = n.stream === 'stderr' ? 'stderr' : 'stdout';
        let text: string;
        let len: number;
        let bytes: Buffer | null = null;
        const rawText = typeof n.data === 'string' ? n.data : null;
        if (typeof n.data === 'string') {
            text = n.data;
            len = Buffer.byteLength(text, 'utf8');
            if (this.pendingDecode[s]) {
                // Bytes held by the decoder from a data_b64 chunk come first.
                text = this.decoders[s].decode() + text;
                this.pendingDecode[s] = false;
            }
        } else if (typeof n.data_b64 === 'string') {
            bytes = Buffer.from(n.data_b64, 'base64');
            len = bytes.length;
            text = '';
        } else {
            return;
        }
        const have = this.next[s];
        const off = typeof n.offset === 'number' ? n.offset : have;
        if (off + len <= have) return; // already have all of it
        if (off < have) {
            // Overlap (a replay after reconnect): keep only the bytes past what we have.
            bytes = (bytes ?? Buffer.from(text, 'utf8')).subarray(have - off);
            len = bytes.length;
            this.next[s] = have + len;
        } else {
            if (off > have) this.lost[s] += off - have;
            this.next[s] = off + len;
        }
        if (bytes) {
            text = this.decoders[s].decode(bytes, { stream: true });
            this.pendingDecode[s] = true;
        }
        this.deliver(s, text, len, bytes, rawText);
    }

    /* text: what string consumers get; bytes/rawText: the chunk's exact bytes
     * (as bytes, or as the text they are when it was sent as data). */
    private deliver(s: StreamName, text: string, len: number, bytes: Buffer | null, rawText: string | null): void {
        if ((this.byteSinks[s].size > 0 || this.firstTick) && (bytes || rawText)) {
            const buf = bytes ?? Buffer.from(rawText!, 'utf8');
            // Large buffers own their memory: a view is enough. Small ones may sit
            // in Node's shared pool, which a consumer must not be able to write.
            const b = buf.length >= 4096 ? new Uint8Array(buf.buffer, buf.byteOffset, buf.length) : new Uint8Array(buf);
            this.firstTick?.[s].push(b);
            for (const c of this.byteSinks[s]) c.enqueue(b);
        }
        if (text.length === 0) return;
        this.retained[s].add(text, len);
        for (const st of this.iters) {
            st.queue.push({ stream: s, data: text });
            st.wake?.();
        }
        for (const cb of [...this.cbs[s]]) {
            try {
                cb(text);
            } catch {
                /* a consumer's bug must not stop the stream */
            }
        }
    }

    /** @internal */
    _exit(n: ExitNotification): void {
        if (this.exited) return;
        for (const s of ['stdout', 'stderr'] as const) {
            const tail = this.decoders[s].decode();
            if (tail) this.deliver(s, tail, Buffer.byteLength(tail), null, null);
        }
        this.exit = {
            pid: this.pid,
            exit_code: n.exit_code,
            signal: n.signal,
            timed_out: n.timed_out,
            killed: n.killed,
            error: n.error ?? null,
            duration_ms: Date.now() - this.startedAt,
        };
        this.finish();
        this.resolveWait(this.exit);
    }

    /** @internal The client can no longer follow this process. */
    _lost(err: Error): void {
        if (this.exited) return;
        this.finish();
        this.rejectWait(err);
    }

    private finish(): void {
        if (this.signal && this.onAbort) this.signal.removeEventListener('abort', this.onAbort);
        this.onAbort = null;
        for (const st of this.iters) st.wake?.();
        this.iters.clear();
        for (const s of ['stdout', 'stderr'] as const) {
            for (const c of this.byteSinks[s]) {
                try {
                    c.close();
                } catch {
                    /* already cancelled */
                }
            }
            this.byteSinks[s].clear();
        }
    }
}
