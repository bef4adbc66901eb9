/*
 * Mastra adapters (`sbxd/mastra`; @mastra/core is a peer dependency):
 *
 *   SbxdSandbox            a Mastra WorkspaceSandbox on any sbxd provider
 *                          (docker, modal, ...): `new DockerSandbox({...})`
 *                          becomes `new SbxdSandbox({provider: 'docker', ...})`.
 *   SbxdCodeModeTransport  Mastra's CodeModeTransport on sbxd's JavaScript
 *                          isolate provider: createCodeMode({tools}, new SbxdCodeModeTransport()).
 */
import { MastraSandbox, MountError, ProcessHandle, SandboxProcessManager } from '@mastra/core/workspace';
import type {
    CommandResult,
    MountManager,
    MountResult,
    WorkspaceFilesystem,
    MastraSandboxOptions,
    ProcessInfo,
    ProviderStatus,
    SandboxCloneOptions,
    SandboxInfo,
    SpawnProcessOptions,
} from '@mastra/core/workspace';
import * as mastraWorkspace from '@mastra/core/workspace';
import type { RequestContext } from '@mastra/core/di';
import { sanitizeToolId } from '@mastra/core/tools';
import type { CodeModeToolResult, CodeModeTransport } from '@mastra/core/tools';
import { SbxdClient } from './client.js';
import { SbxdError } from './errors.js';
import { ErrorCode, type CreateParams, type ExitRecord, type Sandbox } from './protocol.js';
import type { SbxdProcess } from './process.js';
import { bindOf, isMountPoint, targetOf, volumeList, volumeOf, type SbxdBind } from './mastra_mount.js';

const LOG_PREFIX = '[SbxdSandbox]';

type InstructionsOption =
    | string
    | ((opts: { defaultInstructions: string; requestContext?: RequestContext }) => string);

/** Options: DockerSandbox's and ModalSandbox's, plus `provider`, `socketPath` and `client`. */
export interface SbxdSandboxOptions extends Omit<MastraSandboxOptions, 'processes'> {
    /** Stable id: a start() with an id sbxd knows reconnects to that sandbox. */
    id?: string;
    /** sbxd provider: 'docker' (default), 'modal', 'js', 'duktape'. */
    provider?: string;
    /** sbxd's socket (default $SBXD_SOCKET, else /run/sbxd/sbxd.sock). */
    socketPath?: string;
    /** Share one connection between sandboxes (clone() does). */
    client?: SbxdClient;
    /** Container name (Docker). */
    name?: string;
    /** Image (Docker/Modal); the provider's configured default when absent. */
    image?: string;
    /** ModalSandbox's name for `image`. */
    baseImage?: string;
    /** Main process (Docker): argv or a shell string. */
    command?: string[] | string;
    /** Create-time environment (also the initial runtime overlay, as in Mastra). */
    env?: Record<string, string>;
    /** Bind mounts: `{ '/host': '/container' }` or `['/host:/ctr:ro']`. */
    volumes?: Record<string, string> | string[];
    network?: string;
    privileged?: boolean;
    /** Bytes, or `512m`-style. */
    memory?: number | string;
    memorySwap?: number | string;
    cpuShares?: number;
    cpuQuota?: number;
    cpuPeriod?: number;
    pidsLimit?: number;
    readonlyRootfs?: boolean;
    capDrop?: string[];
    capAdd?: string[];
    securityOpt?: string[];
    ulimits?: Array<{ name: string; soft: number; hard: number }>;
    tmpfs?: Record<string, string>;
    user?: string;
    labels?: Record<string, string>;
    /** Default command timeout in ms (DockerSandbox's `timeout`; default 300000). */
    timeout?: number;
    /** Sandbox lifetime in ms (ModalSandbox's `timeoutMs`; sbxd `timeout_ms`). */
    timeoutMs?: number;
    /** Destroy after this long idle (sbxd `idle_timeout_ms`). */
    idleTimeoutMs?: number;
    /** @deprecated Use `workingDirectory`. */
    workingDir?: string;
    /** @deprecated Use `workingDirectory`. */
    workdir?: string;
    /** Modal: app name, cores, memory. */
    appName?: string;
    cpu?: number;
    memoryMb?: number;
    /** Extra provider options passed through to sbxd as is. */
    providerOptions?: Record<string, unknown>;
    /**
     * Mounts (Mastra's `mount()`, a Workspace's `mounts`): bind them when the
     * container is created (`volumes`) instead of into the running one
     * (sandbox.mount, the default). For gVisor (runtime runsc) and an sbxd
     * that does not run as root; such binds cannot be unmounted while the
     * sandbox lives.
     */
    mountAtCreate?: boolean;
    instructions?: InstructionsOption;
}

/* ---- process handles -------------------------------------------------------------- */

let abortedSeq = 0;

class SbxdProcessHandle extends ProcessHandle {
    readonly pid: string;
    private readonly proc: SbxdProcess | null;
    private readonly started = Date.now();
    private result: Promise<CommandResult> | null = null;
    private abortedResult: CommandResult | null = null;
    /* Output is emitted from the next macrotask on, never before the caller
     * has the handle: `(await spawn(...)).reader.on('data')` sees all of it. */
    private queued: Array<[0 | 1, string]> | null = [];
    private readonly armed: Promise<void>;

    constructor(proc: SbxdProcess | null, options: SpawnProcessOptions, early: Array<[0 | 1, string]> = []) {
        super(options);
        this.queued!.push(...early);
        this.armed = new Promise((resolve) =>
            setImmediate(() => {
                const q = this.queued!;
                this.queued = null;
                for (const [s, d] of q) s === 0 ? this.emitStdout(d) : this.emitStderr(d);
                resolve();
            }),
        );
        this.proc = proc;
        this.pid = proc ? String(proc.pid) : `aborted-${++abortedSeq}`;
        if (!proc) {
            // An already aborted signal: nothing ran.
            this.abortedResult = {
                success: false,
                exitCode: 130,
                stdout: '',
                stderr: '',
                executionTimeMs: 0,
                killed: true,
            };
        }
    }

    /** @internal Output from the transport. */
    out(stream: 0 | 1, d: string): void {
        if (this.queued) this.queued.push([stream, d]);
        else if (stream === 0) this.emitStdout(d);
        else this.emitStderr(d);
    }

    get exitCode(): number | undefined {
        if (this.abortedResult) return this.abortedResult.exitCode;
        return this.queued ? undefined : this.proc!.exitCode;
    }

    override async wait(): Promise<CommandResult> {
        if (this.abortedResult) return this.abortedResult;
        if (!this.result) {
            this.result = this.armed.then(() => this.proc!.wait()).then(
                (r: ExitRecord) => ({
                    success: r.exit_code === 0,
                    exitCode: r.exit_code,
                    stdout: this.stdout,
                    stderr: this.stderr,
                    executionTimeMs: Date.now() - this.started,
                    ...(r.timed_out ? { timedOut: true } : {}),
                    ...(r.killed ? { killed: true } : {}),
                    ...(this.stdoutTruncated ? { stdoutTruncated: true, stdoutDroppedBytes: this.stdoutDroppedBytes } : {}),
                    ...(this.stderrTruncated ? { stderrTruncated: true, stderrDroppedBytes: this.stderrDroppedBytes } : {}),
                }),
                (e: Error) => ({
                    success: false,
                    exitCode: 1,
                    stdout: this.stdout,
                    stderr: this.stderr + (this.stderr.endsWith('\n') || !this.stderr ? '' : '\n') + String(e.message),
                    executionTimeMs: Date.now() - this.started,
                }),
            );
        }
        return this.result;
    }

    async kill(): Promise<boolean> {
        if (!this.proc) return false;
        try {
            return await this.proc.kill();
        } catch (e) {
            if (e instanceof SbxdError && e.code === ErrorCode.ProcessNotFound) return false;
            throw e;
        }
    }

    async sendStdin(data: string): Promise<void> {
        if (!this.proc || this.proc.exited) throw new Error(`Process ${this.pid} has already exited with code ${this.exitCode}`);
        await this.proc.sendStdin(data);
    }

    override async closeStdin(): Promise<void> {
        if (!this.proc || this.proc.exited) return;
        await this.proc.closeStdin();
    }
}

/** Mastra's process manager over sbxd processes (spawn, list, get, kill; pruning by the base class). */
export class SbxdProcessManager extends SandboxProcessManager<SbxdSandbox> {
    private readonly defaultTimeout: number;

    constructor(options: { env?: Record<string, string | undefined>; defaultTimeout?: number } = {}) {
        super({ env: options.env ?? {} });
        this.defaultTimeout = options.defaultTimeout ?? 300_000;
    }

    override async spawn(command: string, options: SpawnProcessOptions = {}): Promise<ProcessHandle> {
        if (options.abortSignal?.aborted) {
            const h = new SbxdProcessHandle(null, options);
            this._tracked.set(h.pid, h);
            return h;
        }
        const sb = this.sandbox;
        const env: Record<string, string> = {};
        for (const [k, v] of Object.entries({ ...this.env, ...(options.env ?? {}) }))
            if (typeof v === 'string') env[k] = v;
        // Output that arrives before the handle exists is replayed into it.
        let handle: SbxdProcessHandle | null = null;
        const early: Array<[0 | 1, string]> = [];
        const proc = await sb.client.spawn(
            {
                sandbox: sb.id,
                command,
                ...(Object.keys(env).length ? { env } : {}),
                ...((options.cwd ?? sb.workingDirectory) ? { cwd: options.cwd ?? sb.workingDirectory } : {}),
                timeout_ms: options.timeout ?? this.defaultTimeout,
                ...(options.stdinMode === 'ignore' ? { stdin: '' } : {}),
            },
            {
                maxRetainedBytes: 0, // the Mastra handle keeps the output
                onStdout: (d) => (handle ? handle.out(0, d) : early.push([0, d])),
                onStderr: (d) => (handle ? handle.out(1, d) : early.push([1, d])),
            },
        );
        handle = new SbxdProcessHandle(proc, options, early);
        this._tracked.set(handle.pid, handle);
        return handle;
    }

    override async list(): Promise<ProcessInfo[]> {
        const out: ProcessInfo[] = [];
        for (const [pid, h] of this._tracked)
            out.push({ pid, command: h.command, running: h.exitCode === undefined, exitCode: h.exitCode });
        return out;
    }

    /** A pid this instance did not spawn (e.g. before a reconnect) is adopted with process.attach. */
    override async get(pid: string): Promise<ProcessHandle | undefined> {
        const tracked = this._tracked.get(pid);
        if (tracked) return tracked;
        if (!/^[0-9]+$/.test(String(pid)) || this._dismissed.has(String(pid))) return undefined;
        const sb = this.sandbox;
        try {
            const infos = await sb.client.listProcesses(sb.id);
            const info = infos.find((p) => String(p.pid) === String(pid));
            if (!info) return undefined;
            let handle: SbxdProcessHandle | null = null;
            const early: Array<[0 | 1, string]> = [];
            const proc = await sb.client.attach(sb.id, info.pid, {
                maxRetainedBytes: 0,
                onStdout: (d) => (handle ? handle.out(0, d) : early.push([0, d])),
                onStderr: (d) => (handle ? handle.out(1, d) : early.push([1, d])),
            });
            handle = new SbxdProcessHandle(proc, {}, early);
            handle.command = info.command;
            if (!proc.exited) this._tracked.set(handle.pid, handle);
            return handle;
        } catch (e) {
            if (e instanceof SbxdError && (e.code === ErrorCode.ProcessNotFound || e.code === ErrorCode.SandboxNotFound)) return undefined;
            throw e;
        }
    }

    /** Forget every handle (the sandbox stopped or went away). */
    reset(): void {
        this._tracked.clear();
    }
}

/* ---- the sandbox ------------------------------------------------------------------------ */

function toBytesOption(v: number | string | undefined): number | string | undefined {
    return v;
}

export class SbxdSandbox extends MastraSandbox {
    readonly id: string;
    readonly name = 'SbxdSandbox';
    readonly provider = 'sbxd';
    status: ProviderStatus = 'pending';
    declare readonly processes: SbxdProcessManager;
    declare readonly mounts: MountManager;

    /** The sbxd provider this sandbox runs on. */
    readonly sbxdProvider: string;
    readonly client: SbxdClient;
    private readonly opts: SbxdSandboxOptions;
    private readonly image: string | undefined;
    private readonly instructionsOverride?: InstructionsOption;
    private info: Sandbox | null = null;
    /** Warnings sbxd gave when start() reconnected to an existing sandbox. */
    reconnectWarnings: string[] = [];
    /** Binds of mounts requested at create (by target), and the mounts sbxd's policy refused then (target -> its words). */
    private readonly binds = new Map<string, SbxdBind>();
    private readonly refused = new Map<string, string>();
    /** Mounts made in the running sandbox with sandbox.mount (by target). */
    private readonly live = new Map<string, SbxdBind>();

    constructor(options: SbxdSandboxOptions = {}) {
        const pm = new SbxdProcessManager({ env: options.env ?? {}, defaultTimeout: options.timeout ?? 300_000 });
        super({ ...options, name: 'SbxdSandbox', processes: pm });
        this.opts = { ...options };
        this.id = options.id ?? `sbxd-sandbox-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
        this.sbxdProvider = options.provider ?? 'docker';
        this.client = options.client ?? new SbxdClient(options.socketPath ? { socketPath: options.socketPath } : {});
        this.image = options.image ?? options.baseImage;
        this.instructionsOverride = options.instructions;
        if (options.workingDirectory === undefined) {
            const alias = options.workingDir ?? options.workdir;
            if (alias !== undefined) this.setWorkingDirectory(alias);
            else if (this.sbxdProvider === 'docker') this.setWorkingDirectory('/workspace');
        }
    }

    /**
     * Mastra's networking capability: getPortUrl(port) exposes the port
     * through sbxd (sandbox.expose, works with network: none) and returns
     * its http://127.0.0.1:HOST_PORT/ URL; null when the sandbox does not run
     * or its provider cannot expose ports.
     */
    override readonly networking = {
        getPortUrl: async (port: number): Promise<string | null> => {
            try {
                return (await this.client.ports.expose(this.id, port)).url;
            } catch (e) {
                if (e instanceof SbxdError) return null;
                throw e;
            }
        },
    };

    /** The sbxd sandbox object from the last start() or getInfo(). */
    get sandbox(): Sandbox | null {
        return this.info;
    }

    /* ---- lifecycle ---------------------------------------------------------------------- */

    override async start(): Promise<void> {
        this.logger.debug(`${LOG_PREFIX} Starting sandbox ${this.id} on ${this.sbxdProvider}...`);
        const sb = await this.createWithMounts();
        this.info = sb;
        if (sb.reconnected) {
            const ws = [...(sb.warnings ?? []), ...(((sb.metadata?.warnings as string[] | undefined) ?? []).filter((w) => !(sb.warnings ?? []).includes(w)))];
            this.reconnectWarnings = ws;
            for (const w of ws)
                this.logger.warn(
                    `${LOG_PREFIX} Reconnected to existing sandbox ${this.id}; ${w}. Destroy and recreate the sandbox to apply the requested configuration.`,
                    { sandboxId: this.id, warning: w },
                );
            this.logger.debug(`${LOG_PREFIX} Reconnected to sandbox ${this.id}`);
        }
    }

    /**
     * sandbox.create with the pending mounts' binds; a bind the policy refuses
     * (-32003 naming it) is dropped and remembered with the policy's words,
     * and the create is tried again without it, so one ungranted mount does
     * not keep the sandbox from starting.
     */
    private async createWithMounts(): Promise<Sandbox> {
        this.binds.clear();
        this.refused.clear();
        this.live.clear();
        if (this.sbxdProvider === 'docker' && this.opts.mountAtCreate)
            for (const [path, e] of this.mounts.entries) {
                if (e.state !== 'pending') continue;
                const b = bindOf(e.filesystem, path, this.workingDirectory);
                if (typeof b !== 'string') this.binds.set(b.target, b);
            }
        for (;;) {
            try {
                return await this.client.createSandbox(this.createParams());
            } catch (e) {
                const req = e instanceof SbxdError && e.code === ErrorCode.PermissionDenied ? e.data.requested : undefined;
                const hit = [...this.binds.values()].find((b) => volumeOf(b) === req);
                if (!hit) throw e;
                this.binds.delete(hit.target);
                this.refused.set(hit.target, (e as Error).message);
                this.logger.warn(`${LOG_PREFIX} sbxd refused the mount at ${hit.target}: ${(e as Error).message}`);
            }
        }
    }

    /* ---- mounts ----------------------------------------------------------------------- */

    /**
     * Mastra's mount: a LocalFilesystem's host directory bound at the mount
     * path, by sbxd (sandbox.mount) in the running container, or at create
     * with `mountAtCreate`. sbxd's Docker policy decides either way: an
     * ungranted path resolves {success: false, error} in the policy's
     * words, as does what cannot be a bind (with the reason).
     */
    override async mount(filesystem: WorkspaceFilesystem, mountPath: string): Promise<MountResult> {
        const b = bindOf(filesystem, mountPath, this.workingDirectory);
        if (typeof b === 'string') return { success: false, mountPath, error: b };
        if (this.sbxdProvider !== 'docker')
            return { success: false, mountPath, error: `sbxd's ${this.sbxdProvider} provider has no bind mounts` };
        const refusal = this.refused.get(b.target);
        if (refusal) return { success: false, mountPath, error: refusal };
        if (this.info?.status !== 'running') {
            // Made when the sandbox starts (processPending mounts what is pending).
            this.mounts.set(mountPath, { filesystem, state: 'pending' });
            return { success: false, mountPath, error: 'the sandbox is not running: the mount is made at start()' };
        }
        const same = (x: SbxdBind) => x.host === b.host && x.readOnly === b.readOnly;
        const have = this.binds.get(b.target);
        if (have) {
            if (!same(have)) return { success: false, mountPath, error: `${b.target} is bound to ${volumeOf(have)}, not ${volumeOf(b)}` };
            const mi = await this.client.exec({ sandbox: this.id, command: ['cat', '/proc/self/mountinfo'] });
            const st = isMountPoint(mi.stdout ?? '', b.target);
            if (!st.mounted || st.readOnly !== b.readOnly)
                return { success: false, mountPath, error: `${b.target} is not ${b.readOnly ? 'a read-only' : 'a'} mount in the sandbox` };
            return { success: true, mountPath };
        }
        try {
            await this.client.mount(this.id, b.host, b.target, { readOnly: b.readOnly });
        } catch (e) {
            if (!(e instanceof SbxdError)) throw e;
            // Made already (e.g. by this sandbox before a reconnect): fine if it is this one.
            const d = e.data as { param?: string; source?: string; read_only?: boolean };
            if (!(e.code === ErrorCode.InvalidParams && d.source === b.host && d.read_only === b.readOnly))
                return { success: false, mountPath, error: e.message };
        }
        this.live.set(b.target, b);
        return { success: true, mountPath };
    }

    /**
     * Mastra's unmount: a mount made in the running sandbox is detached
     * (sandbox.unmount); one not made yet (or refused) is forgotten. A bind
     * made at create (`mountAtCreate`) cannot be detached while the
     * container lives: a MountError (destroy the sandbox to drop it).
     */
    override async unmount(mountPath: string): Promise<void> {
        const target = targetOf(mountPath, this.workingDirectory);
        if (this.live.has(target)) {
            await this.client.unmount(this.id, target);
            this.live.delete(target);
        } else if (this.binds.has(target) && this.info?.status === 'running')
            throw new MountError(
                `${target} is a bind of the running container ${this.id} (made at create); Docker cannot detach it: destroy the sandbox to drop it`,
                mountPath,
            );
        this.binds.delete(target);
        this.refused.delete(target);
        this.mounts.delete(mountPath);
    }

    override async stop(): Promise<void> {
        try {
            this.info = await this.client.stopSandbox(this.id);
        } catch (e) {
            if (!(e instanceof SbxdError && e.code === ErrorCode.SandboxNotFound)) throw e;
        }
        this.processes.reset();
        // Mounts made in the container end with it: made again at the next start.
        for (const [p, e] of this.mounts.entries)
            if (this.live.has(targetOf(p, this.workingDirectory))) this.mounts.set(p, { state: 'pending' });
        this.live.clear();
    }

    override async destroy(): Promise<void> {
        try {
            await this.client.destroySandbox(this.id);
        } catch (e) {
            if (!(e instanceof SbxdError && e.code === ErrorCode.SandboxNotFound)) throw e;
        }
        this.info = null;
        this.processes.reset();
    }

    override getInstructions(opts?: { requestContext?: RequestContext }): string {
        const where =
            this.sbxdProvider === 'docker'
                ? `a Docker container (image: ${this.image ?? 'the configured default'})`
                : `an sbxd ${this.sbxdProvider} sandbox${this.image ? ` (image: ${this.image})` : ''}`;
        const defaultInstructions = [
            `You are working inside ${where} managed by sbxd.`,
            ...(this.workingDirectory ? [`The working directory is ${this.workingDirectory}.`] : []),
            /* The isolates run JavaScript, not a shell: say so (issue 19). */
            ...(this.sbxdProvider === 'js' || this.sbxdProvider === 'duktape'
                ? [
                      `Commands are JavaScript programs (sbxd's ${this.sbxdProvider} provider), not shell commands: ` +
                          'run them with executeCommand(); there is no shell, filesystem or network.',
                      'You can spawn background programs using processes.spawn().',
                  ]
                : [
                      'You can execute shell commands using executeCommand().',
                      'You can spawn background processes using processes.spawn().',
                  ]),
        ].join('\n');
        const o = this.instructionsOverride;
        if (o === undefined) return defaultInstructions;
        if (typeof o === 'string') return o;
        return o({ defaultInstructions, requestContext: opts?.requestContext });
    }

    override async getInfo(): Promise<SandboxInfo> {
        try {
            this.info = await this.client.getSandbox(this.id);
        } catch (e) {
            if (!(e instanceof SbxdError && e.code === ErrorCode.SandboxNotFound)) throw e;
        }
        const sb = this.info;
        const resources = sb?.status === 'running' ? await this.resources() : undefined;
        const mounts = [...this.mounts.entries]
            .filter(([, e]) => e.state === 'mounted')
            .map(([path, e]) => ({ path, filesystem: e.filesystem.provider }));
        return {
            id: this.id,
            name: this.name,
            provider: this.provider,
            status: this.status,
            mounts,
            ...(resources ? { resources } : {}),
            createdAt: sb ? new Date(sb.created_at) : new Date(),
            ...(sb?.expires_at ? { timeoutAt: new Date(sb.expires_at) } : {}),
            metadata: {
                sbxdProvider: this.sbxdProvider,
                ...(this.image ? { image: this.image } : {}),
                workingDirectory: this.workingDirectory,
                ...(this.opts.labels ? { labels: this.opts.labels } : {}),
                ...(sb ? { sbxdStatus: sb.status, processes: sb.processes, ...sb.metadata } : {}),
            },
        };
    }

    /* ---- files ------------------------------------------------------------------------------ */

    /**
     * Mastra's writeFiles: each file through sbxd's fs.write (atomic, chunked,
     * as the command user), with its mode; relative paths start at the
     * sandbox's working directory. An already-aborted signal rejects before
     * anything is written; an abort between files stops there.
     */
    override async writeFiles(
        files: Array<{ path: string; content: string | Buffer | Uint8Array; mode?: number }>,
        options: { abortSignal?: AbortSignal } = {},
    ): Promise<void> {
        // Looked up at run time: older @mastra/core releases lack these.
        const ws = mastraWorkspace as unknown as Record<string, unknown>;
        const validate = ws.validateSandboxFileMode as ((m: number) => void) | undefined;
        for (const f of files)
            if (f.mode !== undefined) {
                if (validate) validate(f.mode);
                else if (!Number.isInteger(f.mode) || f.mode < 1 || f.mode > 0o777)
                    throw new RangeError(`invalid file mode ${f.mode}`);
            }
        const aborted = (): Error => {
            const E = ws.SandboxAbortError as (new (op?: string, reason?: unknown) => Error) | undefined;
            return E ? new E('writeFiles', options.abortSignal?.reason) : new Error('writeFiles was aborted');
        };
        const fsx = this.client.files(this.id);
        for (const f of files) {
            if (options.abortSignal?.aborted) throw aborted();
            const data = typeof f.content === 'string' ? f.content : new Uint8Array(f.content);
            await fsx.write(f.path, data, f.mode !== undefined ? { mode: f.mode } : {});
        }
    }

    /** getInfo's resources from one sandbox.stats sample; undefined where the provider has none. */
    private async resources(): Promise<SandboxInfo['resources'] | undefined> {
        let st;
        try {
            st = await this.client.stats(this.id);
        } catch {
            return undefined; // not supported (-32011), or stopped meanwhile
        }
        const mb = (n: number) => Math.round((n / 1048576) * 10) / 10;
        return {
            ...(st.memory.limit ? { memoryMB: mb(st.memory.limit) } : {}),
            memoryUsedMB: mb(st.memory.current),
            ...(st.cpu.online ? { cpuCores: st.cpu.online } : {}),
            cpuPercent: st.cpu.percent,
            ...(st.disk ? { diskUsedMB: mb(st.disk.writable_bytes) } : {}),
        };
    }

    /** A sibling sandbox with this one's configuration (no I/O until its start()). */
    clone(options: SandboxCloneOptions = {}): SbxdSandbox {
        const { id: _id, ...base } = this.opts;
        return new SbxdSandbox({
            ...base,
            client: this.client,
            ...(options.sandboxId !== undefined ? { id: options.sandboxId } : options.id !== undefined ? { id: options.id } : {}),
            ...(options.env !== undefined ? { env: { ...(base.env ?? {}), ...options.env } } : {}),
            ...(options.workingDirectory !== undefined
                ? { workingDirectory: options.workingDirectory }
                : this.workingDirectory !== undefined
                  ? { workingDirectory: this.workingDirectory }
                  : {}),
            ...(options.idleTimeoutMinutes !== undefined ? { idleTimeoutMs: options.idleTimeoutMinutes * 60_000 } : {}),
        });
    }

    /* ---- the create request ---------------------------------------------------------------- */

    private createParams(): CreateParams {
        const o = this.opts;
        const p: CreateParams = { id: this.id, provider: this.sbxdProvider };
        if (this.image) p.image = this.image;
        if (o.env && Object.keys(o.env).length) p.env = { ...o.env };
        if (this.workingDirectory) p.working_dir = this.workingDirectory;
        if (o.timeoutMs !== undefined) p.timeout_ms = o.timeoutMs;
        if (o.idleTimeoutMs !== undefined) p.idle_timeout_ms = o.idleTimeoutMs;
        const opt: Record<string, unknown> = {};
        const set = (k: string, v: unknown) => {
            if (v !== undefined) opt[k] = v;
        };
        if (this.sbxdProvider === 'docker') {
            set('name', o.name);
            set('command', o.command);
            const vols = [...volumeList(o.volumes), ...[...this.binds.values()].map(volumeOf)];
            set('volumes', vols.length ? vols : undefined);
            set('network', o.network);
            set('privileged', o.privileged);
            set('memory', toBytesOption(o.memory));
            set('memory_swap', toBytesOption(o.memorySwap));
            set('cpu_shares', o.cpuShares);
            set('cpu_quota', o.cpuQuota);
            set('cpu_period', o.cpuPeriod);
            set('pids_limit', o.pidsLimit);
            set('readonly_rootfs', o.readonlyRootfs);
            set('cap_drop', o.capDrop);
            set('cap_add', o.capAdd);
            set('security_opt', o.securityOpt);
            if (o.ulimits) opt.ulimits = Object.fromEntries(o.ulimits.map((u) => [u.name, { soft: u.soft, hard: u.hard }]));
            set('tmpfs', o.tmpfs);
            set('user', o.user);
            set('labels', o.labels);
        } else if (this.sbxdProvider === 'modal') {
            set('app_name', o.appName);
            set('cpu', o.cpu);
            set('memory_mb', o.memoryMb);
        }
        Object.assign(opt, o.providerOptions ?? {});
        if (Object.keys(opt).length) p.options = opt;
        return p;
    }
}

/* ---- code mode ------------------------------------------------------------------------ */

export interface SbxdCodeModeTransportOptions {
    socketPath?: string;
    client?: SbxdClient;
    /** The isolate provider (default 'js'). */
    provider?: string;
    /** Heap cap of the isolate in MiB. */
    memoryLimitMb?: number;
}

type RunOpts = Parameters<CodeModeTransport['run']>[0];

interface RunCtx {
    toolIds: Map<string, string>; // external name -> tool id
    dispatch: RunOpts['dispatch'];
    onExternalCall?: RunOpts['onExternalCall'];
    onExternalResult?: RunOpts['onExternalResult'];
}

/**
 * Mastra's CodeModeTransport on sbxd's JavaScript isolate provider: each run
 * gets a fresh isolate sandbox whose `external_<tool>` calls come back to this
 * process as `tool.call` requests and go to `dispatch`.
 */
export class SbxdCodeModeTransport implements CodeModeTransport {
    readonly requiresSandbox = false;
    readonly client: SbxdClient;
    readonly provider: string;
    private readonly memoryLimitMb?: number;
    private readonly runs = new Map<string, RunCtx>();
    private readonly registered = new Set<string>();
    private seq = 0;

    constructor(options: SbxdCodeModeTransportOptions = {}) {
        this.client = options.client ?? new SbxdClient(options.socketPath ? { socketPath: options.socketPath } : {});
        this.provider = options.provider ?? 'js';
        this.memoryLimitMb = options.memoryLimitMb;
    }

    private register(name: string): void {
        if (this.registered.has(name)) return;
        this.registered.add(name);
        this.client.registerTool(name, async (args, call) => {
            const run = this.runs.get(call.sandbox);
            const toolId = run?.toolIds.get(call.name);
            if (!run || toolId === undefined) {
                const e = new Error(`Tool "${call.name}" is not available in Code Mode`);
                e.name = 'NotAllowedError';
                throw e;
            }
            const t0 = Date.now();
            try {
                run.onExternalCall?.(toolId, args);
            } catch {
                /* observers never break a run */
            }
            try {
                const r = await run.dispatch(toolId, args);
                // Checked here so the failure names the tool (the client would also refuse it).
                if (r !== undefined) JSON.stringify(r);
                try {
                    // Three arguments, error undefined: Mastra's transports call it so.
                    run.onExternalResult?.(toolId, Date.now() - t0, undefined);
                } catch {
                    /* observers never break a run */
                }
                return r === undefined ? null : r;
            } catch (e) {
                try {
                    run.onExternalResult?.(toolId, Date.now() - t0, e);
                } catch {
                    /* observers never break a run */
                }
                throw e;
            }
        });
    }

    async run(opts: RunOpts): Promise<CodeModeToolResult> {
        const { program, toolIds, dispatch, timeout, abortSignal, onExternalCall, onExternalResult } = opts;
        const logs: string[] = [];
        const aborted = (): CodeModeToolResult => ({
            success: false,
            logs,
            error: { name: 'AbortError', message: 'Code Mode execution was aborted' },
        });
        if (abortSignal?.aborted) return aborted();
        const names = new Map<string, string>();
        for (const id of toolIds) {
            const ext = sanitizeToolId(id);
            names.set(ext, id);
            this.register(ext);
        }
        const sandboxId = `codemode-${process.pid}-${Date.now().toString(36)}-${++this.seq}`;
        this.runs.set(sandboxId, { toolIds: names, dispatch, onExternalCall, onExternalResult });
        let created = false;
        try {
            await this.client.createSandbox({
                id: sandboxId,
                provider: this.provider,
                tools: [...names.keys()],
                ...(this.memoryLimitMb ? { memory_limit_mb: this.memoryLimitMb } : {}),
            });
            created = true;
            if (abortSignal?.aborted) return aborted();
            const lines = { stdout: '', stderr: '' };
            const take = (s: 'stdout' | 'stderr', d: string) => {
                lines[s] += d;
                let i: number;
                while ((i = lines[s].indexOf('\n')) >= 0) {
                    logs.push(lines[s].slice(0, i));
                    lines[s] = lines[s].slice(i + 1);
                }
            };
            // The abort listener is wired before the spawn: the program's first tool
            // call may reach dispatch (and abort) before spawn() has answered.
            let proc: SbxdProcess | null = null;
            let wasAborted = false;
            const onAbort = () => {
                wasAborted = true;
                if (proc) void proc.kill().catch(() => false);
            };
            abortSignal?.addEventListener('abort', onAbort, { once: true });
            let exit: ExitRecord;
            try {
                proc = await this.client.spawn(
                    { sandbox: sandboxId, command: program, timeout_ms: Math.max(1, Math.ceil(timeout)) },
                    { onStdout: (d) => take('stdout', d), onStderr: (d) => take('stderr', d), maxRetainedBytes: 0 },
                );
                // An abort that came while the spawn was on its way: end the program now.
                if (wasAborted || abortSignal?.aborted) onAbort();
                exit = await proc.wait();
            } finally {
                abortSignal?.removeEventListener('abort', onAbort);
            }
            for (const s of ['stdout', 'stderr'] as const) if (lines[s]) logs.push(lines[s]);
            if (wasAborted) return aborted();
            if (exit.timed_out)
                return { success: false, logs, error: { name: 'TimeoutError', message: `Code Mode execution timed out after ${timeout}ms` } };
            // The exit record of process.wait carries the program's result, exception and logs.
            const rec = await this.client.wait(sandboxId, proc.pid).catch(() => exit);
            const finalLogs = Array.isArray(rec.logs) ? rec.logs : logs;
            if (rec.exception) {
                return {
                    success: false,
                    logs: finalLogs,
                    error: { name: rec.exception.name || 'Error', message: rec.exception.message ?? String(rec.exception) },
                };
            }
            if (exit.exit_code !== 0)
                return {
                    success: false,
                    logs: finalLogs,
                    error: { name: 'Error', message: exit.error ?? `program exited with code ${exit.exit_code}` },
                };
            return { success: true, result: rec.result ?? undefined, logs: finalLogs };
        } catch (e) {
            const err = e as Error;
            return { success: false, logs, error: { name: err.name ?? 'Error', message: err.message ?? String(e) } };
        } finally {
            this.runs.delete(sandboxId);
            if (created) await this.client.destroySandbox(sandboxId).catch(() => {});
        }
    }
}
export { SbxdFilesystem } from './mastra_fs.js';
export type { SbxdFilesystemOptions } from './mastra_fs.js';
