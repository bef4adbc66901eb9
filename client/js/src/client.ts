/*
 * SbxdClient: one Unix-socket connection to sbxd that multiplexes calls,
 * notifications and the daemon's `tool.call` requests.
 *
 * The connection is made on the first call and made again on demand after it
 * drops. Processes this client follows (spawned, or attached) are re-attached
 * on the new connection from the byte offsets already received, so no output
 * is lost or repeated.
 */
import * as net from 'node:net';
import {
    ErrorCode,
    type AttachResult,
    type CreateParams,
    type DaemonInfo,
    type EnvMap,
    type ExecParams,
    type ExecResult,
    type ExitNotification,
    type Json,
    type Method,
    type Notifications,
    type NotificationName,
    type OutputNotification,
    type OutputEncoding,
    type Params,
    type ProcessInfo,
    type Result,
    type Sandbox,
    type SandboxStatus,
    type ToolCallParams,
} from './protocol.js';
import { SbxdProcess, type SpawnOptions, type ProcessSink } from './process.js';
import { SbxdFiles } from './files.js';
import { SbxdError, SbxdConnectionError } from './errors.js';
import type { FsTransport } from './transport.js';

export const DEFAULT_SOCKET = '/run/sbxd/sbxd.sock';
/** Bytes a read of the connection takes at most (its one read buffer). */
const READ_BUF = 1 << 20;

/** The socket sbxctl and libsbx use: $SBXD_SOCKET, else /run/sbxd/sbxd.sock. */
export function defaultSocketPath(): string {
    const env = process.env.SBXD_SOCKET;
    return env && env.length > 0 ? env : DEFAULT_SOCKET;
}

/** A tool handler: its result goes back as JSON; a thrown error keeps name and message. */
export type ToolHandler = (args: Json, call: ToolCallParams) => unknown | Promise<unknown>;

export interface ClientOptions {
    /** Default: $SBXD_SOCKET, else /run/sbxd/sbxd.sock. */
    socketPath?: string;
    /** Tool handlers by name, answered for `tool.call` requests. */
    tools?: Record<string, ToolHandler>;
    /** Re-connect attempts when followed processes lose the connection (default 20, 50 ms apart, growing). */
    reconnectAttempts?: number;
    /**
     * After a reconnect, how long a followed process that sbxd reports as not
     * found is asked for again (a restarted daemon adopts Docker sandboxes
     * shortly after it listens). Default 15000 ms.
     */
    reattachTimeoutMs?: number;
    /**
     * How the daemon spells output for processes this client spawns or attaches:
     * 'auto' (default: base64 when shorter than escaped JSON) or 'utf8'. Both
     * decode to the same bytes.
     */
    outputEncoding?: OutputEncoding;
}

type Listener<N extends NotificationName> = (params: Notifications[N]) => void;

interface Pending {
    method: string;
    resolve: (v: unknown) => void;
    reject: (e: Error) => void;
}

function abortError(signal: AbortSignal): Error {
    const r = signal.reason;
    if (r instanceof Error) return r;
    return new DOMException('This operation was aborted', 'AbortError');
}

export class SbxdClient implements FsTransport {
    readonly socketPath: string;
    private sock: net.Socket | null = null;
    private connecting: Promise<net.Socket> | null = null;
    private closed = false;
    private nextId = 1;
    private pending = new Map<number, Pending>();
    private rbuf: Buffer[] = [];
    private listeners = new Map<string, Set<(p: unknown) => void>>();
    private tools = new Map<string, ToolHandler>();
    /** Followed processes by "sandbox\0pid". */
    private procs = new Map<string, SbxdProcess>();
    /** Output that came before its spawn's answer, while a spawn is pending in that sandbox. */
    private early = new Map<string, Array<[string, unknown]>>();
    private spawning = new Map<string, number>();
    private reconnectAttempts: number;
    private reattachTimeoutMs: number;
    readonly outputEncoding: OutputEncoding;
    private reconnecting = false;
    /** Bumped on every new connection; handles compare it to see a reconnect. */
    generation = 0;

    constructor(options: ClientOptions = {}) {
        this.socketPath = options.socketPath ?? defaultSocketPath();
        this.reconnectAttempts = options.reconnectAttempts ?? 20;
        this.reattachTimeoutMs = options.reattachTimeoutMs ?? 15000;
        this.outputEncoding = options.outputEncoding ?? 'auto';
        for (const [name, h] of Object.entries(options.tools ?? {})) this.tools.set(name, h);
    }

    /* ---- connection ----------------------------------------------------------- */

    /** Connects now (calls connect on demand anyway). */
    async connect(): Promise<void> {
        await this.ensure();
    }

    get connected(): boolean {
        return this.sock !== null;
    }

    /** Closes the connection for good: pending calls fail, followed processes stop following. */
    close(): void {
        this.closed = true;
        const s = this.sock;
        this.sock = null;
        if (s) s.destroy();
        this.failPending(new SbxdConnectionError('client closed', this.socketPath));
        for (const p of this.procs.values()) p._lost(new SbxdConnectionError('client closed', this.socketPath));
        this.procs.clear();
    }

    private ensure(): Promise<net.Socket> {
        if (this.closed) return Promise.reject(new SbxdConnectionError('client closed', this.socketPath));
        if (this.sock) return Promise.resolve(this.sock);
        if (this.connecting) return this.connecting;
        this.connecting = new Promise<net.Socket>((resolve, reject) => {
            /* Reads land in one buffer of this connection's (READ_BUF bytes a
             * read, not Node's 64 KiB): a 64 KiB output line then mostly comes
             * whole instead of across two chunks glued by a copy, with a
             * sixteenth of the read callbacks. onData copies what it keeps. */
            const rb = Buffer.allocUnsafeSlow(READ_BUF);
            const s = net.createConnection({
                path: this.socketPath,
                onread: {
                    buffer: rb,
                    callback: (n: number) => {
                        if (this.sock === s) this.onData(rb.subarray(0, n));
                        return true;
                    },
                },
            });
            s.setNoDelay?.(true);
            const onError = (err: Error) => {
                s.destroy();
                this.connecting = null;
                reject(
                    new SbxdConnectionError(`cannot connect to sbxd at ${this.socketPath}: ${err.message}`, this.socketPath, {
                        cause: err,
                    }),
                );
            };
            s.once('error', onError);
            s.once('connect', () => {
                s.off('error', onError);
                this.connecting = null;
                if (this.closed) {
                    s.destroy();
                    reject(new SbxdConnectionError('client closed', this.socketPath));
                    return;
                }
                this.sock = s;
                this.rbuf = [];
                this.generation++;
                s.on('error', () => {
                    /* 'close' follows */
                });
                s.on('close', () => this.onClose(s));
                this.touch();
                resolve(s);
            });
        });
        return this.connecting;
    }

    private onClose(s: net.Socket): void {
        if (this.sock !== s) return;
        this.sock = null;
        this.failPending(new SbxdConnectionError('connection to sbxd lost', this.socketPath));
        if (!this.closed && this.procs.size > 0) void this.reconnect();
    }

    /* An idle connection does not keep Node running: the socket is ref'd only
     * while a call, a followed process or a tool call is outstanding. */
    private busyTools = 0;
    private touch(): void {
        const s = this.sock;
        if (!s) return;
        if (this.pending.size > 0 || this.procs.size > 0 || this.busyTools > 0) s.ref();
        else s.unref();
    }

    private failPending(err: Error): void {
        const p = [...this.pending.values()];
        this.pending.clear();
        for (const c of p) c.reject(err);
    }

    /* Followed processes need the stream back: connect again and re-attach each
     * one from the offsets it already has. */
    private async reconnect(): Promise<void> {
        if (this.reconnecting) return;
        this.reconnecting = true;
        try {
            let delay = 50;
            for (let i = 0; i < this.reconnectAttempts && !this.closed; i++) {
                try {
                    await this.ensure();
                    break;
                } catch {
                    await new Promise((r) => setTimeout(r, delay));
                    delay = Math.min(delay * 2, 1000);
                }
            }
            if (!this.sock) {
                const err = new SbxdConnectionError('connection to sbxd lost and not regained', this.socketPath);
                for (const p of this.procs.values()) p._lost(err);
                this.procs.clear();
                return;
            }
            await this.reattachAll();
        } finally {
            this.reconnecting = false;
        }
    }

    /* A restarted daemon adopts its providers' sandboxes (Docker containers,
     * their agents' processes) shortly after it starts listening: until then
     * they are "not found", so those answers are retried for a while. */
    private async reattachAll(): Promise<void> {
        const deadline = Date.now() + this.reattachTimeoutMs;
        for (const p of [...this.procs.values()]) {
            let delay = 50;
            for (;;) {
                if (p.exited || this.closed) break;
                try {
                    await p._reattach();
                    break;
                } catch (e) {
                    if (e instanceof SbxdConnectionError) return; // onClose tries again
                    const notYet =
                        e instanceof SbxdError &&
                        (e.code === ErrorCode.SandboxNotFound || e.code === ErrorCode.ProcessNotFound);
                    if (notYet && Date.now() < deadline) {
                        await new Promise((r) => setTimeout(r, delay));
                        delay = Math.min(delay * 2, 500);
                        continue;
                    }
                    p._lost(e as Error);
                    this.procs.delete(key(p.sandbox, p.pid));
                    this.touch();
                    break;
                }
            }
        }
    }

    /* ---- framing ---------------------------------------------------------------- */

    private onData(chunk: Buffer): void {
        let start = 0;
        let nl = chunk.indexOf(10);
        if (nl < 0) {
            this.rbuf.push(Buffer.from(chunk)); // a copy: the read buffer is reused
            return;
        }
        if (this.rbuf.length > 0) {
            this.rbuf.push(chunk.subarray(0, nl));
            const line = Buffer.concat(this.rbuf).toString('utf8');
            this.rbuf = [];
            this.onLine(line);
            start = nl + 1;
            nl = chunk.indexOf(10, start);
        }
        while (nl >= 0) {
            if (nl > start) this.onLine(chunk.toString('utf8', start, nl));
            start = nl + 1;
            nl = chunk.indexOf(10, start);
        }
        if (start < chunk.length) this.rbuf.push(Buffer.from(chunk.subarray(start)));
    }

    private onLine(line: string): void {
        let msg: any;
        try {
            msg = JSON.parse(line);
        } catch {
            return; // the daemon only sends JSON; nothing sensible to do with noise
        }
        if (Array.isArray(msg)) {
            for (const m of msg) this.onMessage(m);
        } else {
            this.onMessage(msg);
        }
    }

    private onMessage(msg: any): void {
        if (msg === null || typeof msg !== 'object') return;
        if (typeof msg.method === 'string') {
            if (msg.id !== undefined && msg.id !== null) {
                void this.onRequest(msg.id, msg.method, msg.params);
            } else {
                this.onNotification(msg.method, msg.params ?? {});
            }
            return;
        }
        const c = this.pending.get(msg.id);
        if (!c) return;
        this.pending.delete(msg.id);
        if (this.pending.size === 0) this.touch();
        if (msg.error) {
            const e = msg.error;
            c.reject(new SbxdError(c.method, e.code ?? ErrorCode.InternalError, e.message ?? 'error', e.data));
        } else {
            c.resolve(msg.result);
        }
    }

    private onNotification(method: string, params: any): void {
        if (method === 'process.output' || method === 'process.exit') {
            const k = key(params.sandbox, params.pid);
            const p = this.procs.get(k);
            if (p) {
                if (method === 'process.output') p._output(params as OutputNotification);
                else {
                    p._exit(params as ExitNotification);
                    this.procs.delete(k);
                    this.touch();
                }
            } else if ((this.spawning.get(params.sandbox) ?? 0) > 0) {
                let q = this.early.get(k);
                if (!q) this.early.set(k, (q = []));
                q.push([method, params]);
            }
        }
        const set = this.listeners.get(method);
        if (set) for (const l of [...set]) l(params);
        const all = this.listeners.get('*');
        if (all) for (const l of [...all]) (l as (m: string, p: unknown) => void)(method, params);
    }

    private async onRequest(id: unknown, method: string, params: any): Promise<void> {
        this.busyTools++;
        this.touch();
        try {
            await this.answer(id, method, params);
        } finally {
            this.busyTools--;
            this.touch();
        }
    }

    private async answer(id: unknown, method: string, params: any): Promise<void> {
        let reply: object;
        if (method !== 'tool.call') {
            reply = { jsonrpc: '2.0', id, error: { code: ErrorCode.MethodNotFound, message: 'method not found', data: { method } } };
        } else {
            const h = this.tools.get(params?.name);
            if (!h) {
                reply = {
                    jsonrpc: '2.0',
                    id,
                    error: { code: ErrorCode.ToolCallFailed, message: `no handler for tool ${params?.name}`, data: { tool: params?.name, name: 'Error' } },
                };
            } else {
                try {
                    const r = await h(params.args ?? null, params as ToolCallParams);
                    reply = { jsonrpc: '2.0', id, result: r === undefined ? null : r };
                } catch (e) {
                    const err = e instanceof Error ? e : new Error(String(e));
                    reply = {
                        jsonrpc: '2.0',
                        id,
                        error: {
                            code: ErrorCode.ToolCallFailed,
                            message: err.message,
                            data: { tool: params.name, name: err.name, message: err.message },
                        },
                    };
                }
            }
        }
        const s = this.sock;
        if (!s) return; // the session that asked is gone; the daemon already failed the call
        let line: string;
        try {
            line = JSON.stringify(reply);
        } catch (e) {
            line = JSON.stringify({
                jsonrpc: '2.0',
                id,
                error: {
                    code: ErrorCode.ToolCallFailed,
                    message: `tool result is not JSON-serializable: ${(e as Error).message}`,
                    data: { tool: params?.name, name: 'TypeError' },
                },
            });
        }
        s.write(line + '\n');
    }

    /* ---- generic calls ------------------------------------------------------------ */

    /** Any protocol method, typed by name. */
    call<M extends Method>(method: M, params: Params<M>, signal?: AbortSignal): Promise<Result<M>> {
        if (signal?.aborted) return Promise.reject(abortError(signal));
        // Connected (the usual case): the line goes out in this tick, with no
        // await before it (each one was a turn of the microtask queue per call).
        const s = this.sock;
        if (s) return this.send(s, method, params);
        return this.ensure().then((c) => this.send(c, method, params));
    }

    private send<M extends Method>(s: net.Socket, method: M, params: Params<M>): Promise<Result<M>> {
        const id = this.nextId++;
        let line: string;
        try {
            line = JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n';
        } catch (e) {
            return Promise.reject(e);
        }
        return new Promise<Result<M>>((resolve, reject) => {
            this.pending.set(id, { method, resolve: resolve as (v: unknown) => void, reject });
            s.ref();
            s.write(line);
        });
    }

    /** Listens to a notification ('*' gets every one as (method, params)); returns the unsubscribe. */
    on<N extends NotificationName>(name: N, listener: Listener<N>): () => void;
    on(name: '*', listener: (method: string, params: unknown) => void): () => void;
    on(name: string, listener: (...a: any[]) => void): () => void {
        let set = this.listeners.get(name);
        if (!set) this.listeners.set(name, (set = new Set()));
        set.add(listener as (p: unknown) => void);
        return () => set!.delete(listener as (p: unknown) => void);
    }

    /** Registers (or with `null` removes) the handler for `tool.call`s named `name`. */
    registerTool(name: string, handler: ToolHandler | null): void {
        if (handler) this.tools.set(name, handler);
        else this.tools.delete(name);
    }

    /* ---- typed methods ------------------------------------------------------------------ */

    ping(): Promise<Result<'daemon.ping'>> {
        return this.call('daemon.ping', {});
    }
    info(): Promise<DaemonInfo> {
        return this.call('daemon.info', {});
    }
    createSandbox(params: CreateParams = {}): Promise<Sandbox> {
        return this.call('sandbox.create', params);
    }
    getSandbox(id: string): Promise<Sandbox> {
        return this.call('sandbox.get', { id });
    }
    async listSandboxes(filter: { provider?: string; status?: SandboxStatus } = {}): Promise<Sandbox[]> {
        return (await this.call('sandbox.list', filter)).sandboxes;
    }
    startSandbox(id: string): Promise<Sandbox> {
        return this.call('sandbox.start', { id });
    }
    stopSandbox(id: string): Promise<Sandbox> {
        return this.call('sandbox.stop', { id });
    }
    destroySandbox(id: string): Promise<Result<'sandbox.destroy'>> {
        return this.call('sandbox.destroy', { id });
    }
    snapshotSandbox(id: string): Promise<Result<'sandbox.snapshot'>> {
        return this.call('sandbox.snapshot', { id });
    }
    listSnapshots(filter: { provider?: string } = {}): Promise<Result<'snapshot.list'>> {
        return this.call('snapshot.list', filter);
    }
    deleteSnapshot(snapshot: string): Promise<Result<'snapshot.delete'>> {
        return this.call('snapshot.delete', { snapshot });
    }
    cloneSandbox(params: Params<'sandbox.clone'>): Promise<Sandbox> {
        return this.call('sandbox.clone', params);
    }
    async setEnv(id: string, env: EnvMap): Promise<Record<string, string>> {
        return (await this.call('sandbox.set_env', { id, env })).env;
    }
    /* ---- files (fs.*): one call each; files(sandbox) has E2B's shape --------- */

    /** E2B-style file helpers for one sandbox (read/write/list/watchDir, streamed). */
    files(sandbox: string): SbxdFiles {
        return new SbxdFiles(this, sandbox);
    }
    fsRead(params: Params<'fs.read'>): Promise<Result<'fs.read'>> {
        return this.call('fs.read', params);
    }
    fsWrite(params: Params<'fs.write'>): Promise<Result<'fs.write'>> {
        return this.call('fs.write', params);
    }
    fsList(params: Params<'fs.list'>): Promise<Result<'fs.list'>> {
        return this.call('fs.list', params);
    }
    fsStat(params: Params<'fs.stat'>): Promise<Result<'fs.stat'>> {
        return this.call('fs.stat', params);
    }
    fsMkdir(params: Params<'fs.mkdir'>): Promise<Result<'fs.mkdir'>> {
        return this.call('fs.mkdir', params);
    }
    fsRemove(params: Params<'fs.remove'>): Promise<Result<'fs.remove'>> {
        return this.call('fs.remove', params);
    }
    fsRename(params: Params<'fs.rename'>): Promise<Result<'fs.rename'>> {
        return this.call('fs.rename', params);
    }
    fsWatch(params: Params<'fs.watch'>): Promise<Result<'fs.watch'>> {
        return this.call('fs.watch', params);
    }
    fsUnwatch(params: Params<'fs.unwatch'>): Promise<Result<'fs.unwatch'>> {
        return this.call('fs.unwatch', params);
    }

    async instructions(id: string): Promise<string> {
        return (await this.call('sandbox.instructions', { id })).text;
    }
    /** process.exec: runs to completion; an aborted signal kills it (nothing runs if already aborted). */
    async exec(params: ExecParams, options: { signal?: AbortSignal } = {}): Promise<ExecResult> {
        const signal = options.signal;
        if (signal?.aborted) throw abortError(signal);
        if (!signal) return this.call('process.exec', { ...params, stream: params.stream ?? false });
        // With a signal the pid is needed to kill: spawn and wait for the exit.
        const p = await this.spawn(params, { signal });
        const r = await p.wait();
        return {
            ...r,
            stdout: p.stdout,
            stderr: p.stderr,
            truncated: p.stdoutTruncated || p.stderrTruncated,
        };
    }
    /** process.spawn: a handle that follows the process's output and exit. */
    async spawn(params: ExecParams, options: SpawnOptions = {}): Promise<SbxdProcess> {
        const signal = options.signal;
        if (signal?.aborted) throw abortError(signal);
        const sb = params.sandbox;
        this.spawning.set(sb, (this.spawning.get(sb) ?? 0) + 1);
        let pid: number;
        try {
            pid = (
                await this.call('process.spawn', {
                    ...params,
                    stream: true,
                    output_encoding: params.output_encoding ?? this.outputEncoding,
                })
            ).pid;
        } finally {
            const n = (this.spawning.get(sb) ?? 1) - 1;
            if (n <= 0) this.spawning.delete(sb);
            else this.spawning.set(sb, n);
        }
        const p = new SbxdProcess(this.sink(), sb, pid, options, params.output_encoding ?? this.outputEncoding);
        this.follow(p);
        if (signal?.aborted) await p.kill().catch(() => false);
        return p;
    }
    /** process.attach: follows an existing process (output replayed from `offsets`). */
    async attach(
        sandbox: string,
        pid: number,
        options: SpawnOptions & { stdout_offset?: number; stderr_offset?: number; output_encoding?: OutputEncoding } = {},
    ): Promise<SbxdProcess> {
        const p = new SbxdProcess(this.sink(), sandbox, pid, options, options.output_encoding ?? this.outputEncoding);
        p._setOffsets(options.stdout_offset ?? 0, options.stderr_offset ?? 0);
        this.follow(p);
        try {
            await p._reattach();
        } catch (e) {
            this.procs.delete(key(sandbox, pid));
            throw e;
        }
        return p;
    }
    write(sandbox: string, pid: number, data: string | Uint8Array): Promise<Result<'process.write'>> {
        return this.call(
            'process.write',
            typeof data === 'string' ? { sandbox, pid, data } : { sandbox, pid, data_b64: Buffer.from(data).toString('base64') },
        );
    }
    closeStdin(sandbox: string, pid: number): Promise<Result<'process.close_stdin'>> {
        return this.call('process.close_stdin', { sandbox, pid });
    }
    kill(sandbox: string, pid: number, signal?: string | number): Promise<Result<'process.kill'>> {
        return this.call('process.kill', signal === undefined ? { sandbox, pid } : { sandbox, pid, signal });
    }
    wait(sandbox: string, pid: number, timeout_ms?: number): Promise<Result<'process.wait'>> {
        return this.call('process.wait', timeout_ms === undefined ? { sandbox, pid } : { sandbox, pid, timeout_ms });
    }
    async listProcesses(sandbox: string): Promise<ProcessInfo[]> {
        return (await this.call('process.list', { sandbox })).processes;
    }
    attachRaw(params: Params<'process.attach'>): Promise<AttachResult> {
        return this.call('process.attach', params);
    }
    /** sandbox.stats: one resource sample; stream: true also starts sandbox.stats notifications. */
    stats(id: string, options: { stream?: boolean; size?: boolean } = {}): Promise<Result<'sandbox.stats'>> {
        return this.call('sandbox.stats', { id, ...options });
    }
    /** sandbox.expose / sandbox.unexpose: ports of a sandbox reachable on 127.0.0.1 (or
     * another host address the policy grants: {host}; or a Unix socket only the owner
     * can open: {unix: true}). */
    readonly ports = {
        expose: (
            id: string,
            port: number,
            hostPort?: number | { hostPort?: number; host?: string; unix?: boolean },
        ): Promise<Result<'sandbox.expose'>> => {
            const o = typeof hostPort === 'object' ? hostPort : { hostPort };
            return this.call('sandbox.expose', {
                id,
                port,
                ...(o.hostPort === undefined ? {} : { host_port: o.hostPort }),
                ...(o.host === undefined ? {} : { host: o.host }),
                ...(o.unix === undefined ? {} : { unix: o.unix }),
            });
        },
        unexpose: (id: string, port: number): Promise<Result<'sandbox.unexpose'>> =>
            this.call('sandbox.unexpose', { id, port }),
    };
    expose(
        id: string,
        port: number,
        hostPort?: number | { hostPort?: number; host?: string; unix?: boolean },
    ): Promise<Result<'sandbox.expose'>> {
        return this.ports.expose(id, port, hostPort);
    }
    unexpose(id: string, port: number): Promise<Result<'sandbox.unexpose'>> {
        return this.ports.unexpose(id, port);
    }
    /** sandbox.mount: the host directory source bound at target inside the running sandbox (as sbxd's policy grants). */
    mount(id: string, source: string, target: string, opts: { readOnly?: boolean } = {}): Promise<Result<'sandbox.mount'>> {
        return this.call('sandbox.mount', { id, source, target, ...(opts.readOnly ? { read_only: true } : {}) });
    }
    /** sandbox.unmount: undoes a sandbox.mount. */
    unmount(id: string, target: string): Promise<Result<'sandbox.unmount'>> {
        return this.call('sandbox.unmount', { id, target });
    }
    /** process.resize: the window size of a process started with `pty`. */
    resize(sandbox: string, pid: number, cols: number, rows: number): Promise<Result<'process.resize'>> {
        return this.call('process.resize', { sandbox, pid, cols, rows });
    }
    detach(sandbox: string, pid: number): Promise<Result<'process.detach'>> {
        const p = this.procs.get(key(sandbox, pid));
        if (p) this.procs.delete(key(sandbox, pid));
        return this.call('process.detach', { sandbox, pid });
    }

    /* ---- handles --------------------------------------------------------------------- */

    private follow(p: SbxdProcess): void {
        const k = key(p.sandbox, p.pid);
        this.procs.set(k, p);
        this.touch();
        const q = this.early.get(k);
        if (q) {
            this.early.delete(k);
            for (const [m, params] of q) this.onNotification(m, params);
        }
        if (this.spawning.size === 0) this.early.clear();
    }

    private sink(): ProcessSink {
        return {
            call: (m, params) => this.call(m as any, params as any) as Promise<any>,
            unfollow: (p) => {
                const k = key(p.sandbox, p.pid);
                if (this.procs.get(k) === p) this.procs.delete(k);
                this.touch();
            },
        };
    }
}

/** The typed method of SbxdClient for each protocol method (checked complete at compile time). */
export const CLIENT_METHODS = {
    'daemon.ping': 'ping',
    'daemon.info': 'info',
    'sandbox.create': 'createSandbox',
    'sandbox.get': 'getSandbox',
    'sandbox.list': 'listSandboxes',
    'sandbox.start': 'startSandbox',
    'sandbox.stop': 'stopSandbox',
    'sandbox.destroy': 'destroySandbox',
    'sandbox.snapshot': 'snapshotSandbox',
    'snapshot.list': 'listSnapshots',
    'snapshot.delete': 'deleteSnapshot',
    'sandbox.clone': 'cloneSandbox',
    'sandbox.set_env': 'setEnv',
    'sandbox.instructions': 'instructions',
    'process.exec': 'exec',
    'process.spawn': 'spawn',
    'process.write': 'write',
    'process.close_stdin': 'closeStdin',
    'process.kill': 'kill',
    'process.wait': 'wait',
    'process.list': 'listProcesses',
    'process.attach': 'attach',
    'process.detach': 'detach',
    'fs.read': 'fsRead',
    'fs.write': 'fsWrite',
    'fs.list': 'fsList',
    'fs.stat': 'fsStat',
    'fs.mkdir': 'fsMkdir',
    'fs.remove': 'fsRemove',
    'fs.rename': 'fsRename',
    'fs.watch': 'fsWatch',
    'fs.unwatch': 'fsUnwatch',
    'process.resize': 'resize',
    'sandbox.stats': 'stats',
    'sandbox.expose': 'expose',
    'sandbox.unexpose': 'unexpose',
    'sandbox.mount': 'mount',
    'sandbox.unmount': 'unmount',
} as const satisfies Record<Method, keyof SbxdClient>;

function key(sandbox: string, pid: number): string {
    return sandbox + '\0' + pid;
}
