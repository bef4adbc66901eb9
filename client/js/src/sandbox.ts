/*
 * sandbox.ts - the sandbox object API (issue 19), in the shape E2B's and
 * modal-js's clients have: a Sandbox you create or connect to, with
 * `commands` on it, camelCase throughout, AbortError on abort.
 *
 *   import { Sandbox } from 'sbxd';
 *   await using sb = await Sandbox.create({ provider: 'docker', image: 'debian:bookworm-slim' });
 *   const r = await sb.commands.run('echo hi; exit 3');   // { stdout: 'hi\n', exitCode: 3, ... }
 *
 * It is a layer over SbxdClient (which keeps the wire's snake_case): each
 * Sandbox made by create()/connect() without a `client` owns a connection of
 * its own, closed by kill() / close() / disposal.
 */
import { SbxdClient, type ClientOptions } from './client.js';
import type { SbxdFiles } from './files.js';
import type { SbxdProcess } from './process.js';
import type { CreateParams, EnvMap, ExitRecord, Json, ProcessInfo, Sandbox as SandboxRecord } from './protocol.js';

/** The providers sbxd has. */
export type ProviderName = 'js' | 'duktape' | 'docker' | 'modal';

/** Docker's `options` (PROTOCOL.md, sandbox.create). Sizes as "512m" or bytes. */
export interface DockerOptions {
    image?: string;
    command?: string | string[];
    name?: string;
    env?: Record<string, string> | string[];
    volumes?: string[] | Record<string, string>;
    network?: string;
    privileged?: boolean;
    memory?: string | number;
    memory_swap?: string | number;
    cpu_shares?: number;
    cpu_quota?: number;
    cpu_period?: number;
    pids_limit?: number;
    readonly_rootfs?: boolean;
    cap_drop?: string[];
    cap_add?: string[];
    security_opt?: string[];
    ulimits?: Record<string, { soft: number; hard: number }>;
    tmpfs?: Record<string, string>;
    working_dir?: string;
    user?: string;
    labels?: Record<string, string>;
    exec_mode?: 'agent' | 'docker-exec';
    runtime?: string;
}

/** Modal's `options`. */
export interface ModalOptions {
    app_name?: string;
    environment?: string;
    image?: string;
    cpu?: number;
    memory_mb?: number;
    memory?: number;
}

/** The js provider's `options` (JavaScriptCore). */
export interface JsOptions {
    jit?: boolean;
    persistent?: boolean;
}

/** What every provider takes. Durations in milliseconds. */
interface CommonCreateOptions {
    /** A sandbox id of your choosing; an existing one of yours is reconnected. */
    id?: string;
    env?: Record<string, string>;
    /** The sandbox's working directory (absolute). */
    workdir?: string;
    /** The sandbox's lifetime. */
    timeoutMs?: number;
    /** The default timeout of its commands. */
    commandTimeoutMs?: number;
    idleTimeoutMs?: number;
    instructions?: string;
    /** Use this client (not closed by the sandbox); else a new one on socketPath. */
    client?: SbxdClient;
    socketPath?: string;
    clientOptions?: Omit<ClientOptions, 'socketPath'>;
}

export type SandboxCreateOptions =
    | (CommonCreateOptions & { provider: 'docker'; image?: string; options?: DockerOptions })
    | (CommonCreateOptions & { provider: 'modal'; image?: string; options?: ModalOptions })
    | (CommonCreateOptions & { provider: 'js'; options?: JsOptions; persistent?: boolean; memoryLimitMb?: number })
    | (CommonCreateOptions & { provider: 'duktape'; memoryLimitMb?: number; freshIsolate?: boolean })
    /* No provider: sbxd's default (js unless configured), or docker when an image is given. */
    | (CommonCreateOptions & { provider?: undefined; image?: string; options?: DockerOptions });

export interface ConnectOptions {
    client?: SbxdClient;
    socketPath?: string;
    clientOptions?: Omit<ClientOptions, 'socketPath'>;
}

/** A finished command, camelCase. */
export interface CommandResult {
    pid: number;
    stdout: string;
    stderr: string;
    exitCode: number;
    /** The signal that ended it, 0 if none. */
    signal: number;
    timedOut: boolean;
    killed: boolean;
    /** Why it could not run or finish, if so (sbxd's words). */
    error: string | null;
    durationMs?: number;
    /** js/duktape: the program's value and uncaught error. */
    result?: Json;
    exception?: { name: string; message: string; stack?: string } | null;
    /** sbxd's advice, e.g. shell given to a JavaScript provider. */
    hint?: string;
}

export interface RunOptions {
    onStdout?: (data: string) => void;
    onStderr?: (data: string) => void;
    /** Aborting kills the command (the kill is sent before the promise rejects) and rejects with an AbortError. */
    signal?: AbortSignal;
    timeoutMs?: number;
    env?: EnvMap;
    cwd?: string;
    /** Text written to its standard input, then EOF (run only). */
    stdin?: string;
}

export interface ProcessSummary {
    pid: number;
    command: string;
    status: 'running' | 'exited';
    startedAt: string;
    exitCode?: number;
    stdoutBytes: number;
    stderrBytes: number;
}

export interface SandboxInfo {
    id: string;
    provider: string;
    status: SandboxRecord['status'];
    ownerUid: number;
    createdAt: string;
    startedAt?: string;
    expiresAt?: string;
    workdir?: string;
    image?: string;
    env?: Record<string, string>;
    error?: string;
    processes: number;
    metadata: Record<string, unknown>;
}

/** What an aborted call rejects with (fetch's kind of error). */
export class AbortError extends Error {
    override readonly name = 'AbortError';
    constructor(message = 'This operation was aborted', options?: { cause?: unknown }) {
        super(message, options);
    }
}

function toAbortError(signal: AbortSignal): Error {
    const r = signal.reason;
    if (r instanceof AbortError) return r;
    return new AbortError('This operation was aborted', { cause: r });
}

/* process.exit carries the status; the program's value and uncaught error
 * (js, duktape) are in process.wait's record: asked once the process ended. */
async function fullRecord(client: SbxdClient, proc: SbxdProcess): Promise<ExitRecord & { hint?: string }> {
    const r = await proc.wait();
    if (r.result !== undefined || r.exception !== undefined) return r;
    try {
        return { ...r, ...(await client.wait(proc.sandbox, proc.pid)) };
    } catch {
        return r; /* gone from sbxd's records already: the status is what there is */
    }
}

function commandResult(r: ExitRecord & { hint?: string }, stdout: string, stderr: string): CommandResult {
    const out: CommandResult = {
        pid: r.pid,
        stdout,
        stderr,
        exitCode: r.exit_code,
        signal: r.signal,
        timedOut: r.timed_out,
        killed: r.killed,
        error: r.error,
    };
    if (r.duration_ms !== undefined) out.durationMs = r.duration_ms;
    if (r.result !== undefined) out.result = r.result;
    if (r.exception !== undefined) out.exception = r.exception;
    if (r.hint !== undefined) out.hint = r.hint;
    return out;
}

/** A running command of a sandbox. */
export class CommandHandle {
    /** @internal */
    constructor(
        private readonly proc: SbxdProcess,
        private readonly client: SbxdClient,
    ) {}

    get pid(): number {
        return this.proc.pid;
    }
    /** Output so far (the newest 16 MiB per stream). */
    get stdout(): string {
        return this.proc.stdout;
    }
    get stderr(): string {
        return this.proc.stderr;
    }
    get exitCode(): number | undefined {
        return this.proc.exitCode;
    }
    /** Resolves when it exits (a non-zero exit resolves too). */
    async wait(): Promise<CommandResult> {
        const r = await fullRecord(this.client, this.proc);
        return commandResult(r, this.proc.stdout, this.proc.stderr);
    }
    /** Signals it (default SIGKILL); true if it was still running. */
    kill(signal?: string | number): Promise<boolean> {
        return this.proc.kill(signal);
    }
    async sendStdin(data: string | Uint8Array): Promise<void> {
        await this.proc.sendStdin(data);
    }
    closeStdin(): Promise<void> {
        return this.proc.closeStdin();
    }
    /** Disposal kills a command still running. */
    async [Symbol.asyncDispose](): Promise<void> {
        if (this.proc.exitCode === undefined) await this.proc.kill().catch(() => false);
    }
}

/** `sandbox.commands`. */
export class Commands {
    /** @internal */
    constructor(
        private readonly client: SbxdClient,
        private readonly sandbox: string,
    ) {}

    /** Starts a command and follows it; see CommandHandle. */
    async spawn(cmd: string | string[], opts: Omit<RunOptions, 'stdin'> = {}): Promise<CommandHandle> {
        if (opts.signal?.aborted) throw toAbortError(opts.signal);
        const proc = await this.client.spawn(this.params(cmd, opts), { onStdout: opts.onStdout, onStderr: opts.onStderr });
        const handle = new CommandHandle(proc, this.client);
        const signal = opts.signal;
        if (signal) {
            const onAbort = () => void proc.kill().catch(() => false);
            if (signal.aborted) onAbort();
            else signal.addEventListener('abort', onAbort, { once: true });
            void proc.wait().then(
                () => signal.removeEventListener('abort', onAbort),
                () => signal.removeEventListener('abort', onAbort),
            );
        }
        return handle;
    }

    /**
     * Runs a command to its end: {stdout, stderr, exitCode, ...}. A non-zero
     * exit resolves (it is the command's answer); an aborted signal kills the
     * command and rejects with an AbortError once the kill was sent.
     */
    async run(cmd: string | string[], opts: RunOptions = {}): Promise<CommandResult> {
        const signal = opts.signal;
        if (signal?.aborted) throw toAbortError(signal);
        const proc = await this.client.spawn(this.params(cmd, opts), { onStdout: opts.onStdout, onStderr: opts.onStderr });
        if (!signal) {
            const r = await fullRecord(this.client, proc);
            return commandResult(r, proc.stdout, proc.stderr);
        }
        return new Promise<CommandResult>((resolve, reject) => {
            const onAbort = () => {
                proc.kill()
                    .catch(() => false)
                    .then(() => reject(toAbortError(signal)));
            };
            if (signal.aborted) {
                onAbort();
                return;
            }
            signal.addEventListener('abort', onAbort, { once: true });
            fullRecord(this.client, proc).then(
                (r) => {
                    signal.removeEventListener('abort', onAbort);
                    if (signal.aborted) return; /* the abort's rejection wins */
                    resolve(commandResult(r, proc.stdout, proc.stderr));
                },
                (e) => {
                    signal.removeEventListener('abort', onAbort);
                    reject(e);
                },
            );
        });
    }

    /** The sandbox's processes. */
    async list(): Promise<ProcessSummary[]> {
        return (await this.client.listProcesses(this.sandbox)).map((p: ProcessInfo) => {
            const s: ProcessSummary = {
                pid: p.pid,
                command: p.command,
                status: p.status,
                startedAt: p.started_at,
                stdoutBytes: p.stdout_bytes,
                stderrBytes: p.stderr_bytes,
            };
            if (p.exit_code !== undefined) s.exitCode = p.exit_code;
            return s;
        });
    }

    private params(cmd: string | string[], opts: RunOptions) {
        return {
            sandbox: this.sandbox,
            command: cmd,
            ...(opts.env ? { env: opts.env } : {}),
            ...(opts.cwd ? { cwd: opts.cwd } : {}),
            ...(opts.timeoutMs !== undefined ? { timeout_ms: opts.timeoutMs } : {}),
            ...(opts.stdin !== undefined ? { stdin: opts.stdin } : {}),
        };
    }
}

/** A sandbox of sbxd. */
export class Sandbox {
    readonly commands: Commands;
    /** The sandbox's files (fs.*) in E2B's shape: read, write, list, getInfo, ... */
    readonly files: SbxdFiles;
    private killed = false;

    private constructor(
        readonly id: string,
        readonly provider: ProviderName | string,
        /** The client under this sandbox (its flat API has the rest). */
        readonly client: SbxdClient,
        private readonly ownsClient: boolean,
    ) {
        this.commands = new Commands(client, id);
        this.files = client.files(id);
    }

    /** Creates a sandbox (started; sbxd's default provider when none is named). */
    static async create(opts: SandboxCreateOptions = {}): Promise<Sandbox> {
        const own = !opts.client;
        const client = opts.client ?? new SbxdClient({ ...opts.clientOptions, socketPath: opts.socketPath });
        const p: CreateParams = {};
        if (opts.provider) p.provider = opts.provider;
        if (opts.id) p.id = opts.id;
        if (opts.env) p.env = opts.env;
        if (opts.workdir) p.working_dir = opts.workdir;
        if (opts.timeoutMs !== undefined) p.timeout_ms = opts.timeoutMs;
        if (opts.commandTimeoutMs !== undefined) p.command_timeout_ms = opts.commandTimeoutMs;
        if (opts.idleTimeoutMs !== undefined) p.idle_timeout_ms = opts.idleTimeoutMs;
        if (opts.instructions) p.instructions = opts.instructions;
        if ('image' in opts && opts.image) p.image = opts.image;
        if ('options' in opts && opts.options) p.options = { ...opts.options };
        if ('persistent' in opts && opts.persistent !== undefined) p.persistent = opts.persistent;
        if ('memoryLimitMb' in opts && opts.memoryLimitMb !== undefined) p.memory_limit_mb = opts.memoryLimitMb;
        if ('freshIsolate' in opts && opts.freshIsolate !== undefined) p.fresh_isolate = opts.freshIsolate;
        try {
            const r = await client.createSandbox(p);
            return new Sandbox(r.id, r.provider, client, own);
        } catch (e) {
            if (own) client.close();
            throw e;
        }
    }

    /** A sandbox of yours that exists (SbxdError -32000 when it does not). */
    static async connect(id: string, opts: ConnectOptions = {}): Promise<Sandbox> {
        const own = !opts.client;
        const client = opts.client ?? new SbxdClient({ ...opts.clientOptions, socketPath: opts.socketPath });
        try {
            const r = await client.getSandbox(id);
            return new Sandbox(r.id, r.provider, client, own);
        } catch (e) {
            if (own) client.close();
            throw e;
        }
    }

    /** The sandbox as sbxd has it now. */
    async getInfo(): Promise<SandboxInfo> {
        const r = await this.client.getSandbox(this.id);
        const meta = (r.metadata ?? {}) as Record<string, unknown>;
        const image = (r as SandboxRecord & { image?: string }).image ?? (typeof meta.image === 'string' ? meta.image : undefined);
        const info: SandboxInfo = {
            id: r.id,
            provider: r.provider,
            status: r.status,
            ownerUid: r.owner_uid,
            createdAt: r.created_at,
            processes: r.processes,
            metadata: meta,
        };
        if (r.started_at) info.startedAt = r.started_at;
        if (r.expires_at) info.expiresAt = r.expires_at;
        if (r.working_dir) info.workdir = r.working_dir;
        if (image) info.image = image;
        if (r.env) info.env = r.env;
        if (r.error) info.error = r.error;
        return info;
    }

    /** Destroys the sandbox (its processes end) and closes a client it owns. Idempotent. */
    async kill(): Promise<void> {
        if (this.killed) return;
        this.killed = true;
        try {
            await this.client.destroySandbox(this.id);
        } finally {
            if (this.ownsClient) this.client.close();
        }
    }

    /** Leaves the sandbox running and closes a client it owns. */
    close(): void {
        if (this.ownsClient) this.client.close();
    }

    /** `await using sb = await Sandbox.create()`: destroyed at the end of the block. */
    async [Symbol.asyncDispose](): Promise<void> {
        await this.kill();
    }
}
