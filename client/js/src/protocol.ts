/*
 * The sbxd protocol (proto/PROTOCOL.md) as TypeScript types.
 *
 * METHOD_PARAMS and NOTIFICATION_PARAMS list every method, notification and
 * param name at run time; the compile-time checks at the bottom make those
 * lists and the interfaces agree exactly, and test/protocol.test.mjs compares
 * the lists with PROTOCOL.md itself, so the client cannot drift from the spec.
 */

/** JSON-RPC error codes (proto/sbx_proto.h). */
export const ErrorCode = {
    ParseError: -32700,
    InvalidRequest: -32600,
    MethodNotFound: -32601,
    InvalidParams: -32602,
    InternalError: -32603,
    SandboxNotFound: -32000,
    WrongState: -32001,
    ProviderUnavailable: -32002,
    PermissionDenied: -32003,
    ProcessNotFound: -32004,
    LimitExceeded: -32005,
    ProviderError: -32006,
    MessageTooLarge: -32007,
    ShuttingDown: -32008,
    ToolCallFailed: -32009,
    /* files (fs.*) */
    FileOperationFailed: -32010,
    NotSupported: -32011,
} as const;
export type ErrorCodeName = keyof typeof ErrorCode;

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type Command = string | string[];
/** A `null` value removes the key (set_env, clone, per-command env). */
export type EnvMap = Record<string, string | null>;

export type SandboxStatus =
    | 'pending'
    | 'starting'
    | 'running'
    | 'stopping'
    | 'stopped'
    | 'destroying'
    | 'destroyed'
    | 'error';

export interface Sandbox {
    id: string;
    provider: string;
    status: SandboxStatus;
    owner_uid: number;
    created_at: string;
    started_at?: string;
    expires_at?: string;
    timeout_ms: number;
    idle_timeout_ms: number;
    working_dir?: string;
    env?: Record<string, string>;
    error?: string;
    processes: number;
    tools?: string[];
    metadata?: Record<string, unknown>;
    /** sandbox.create only: the id named an existing sandbox of the caller. */
    reconnected?: boolean;
    /** sandbox.create only: how the existing sandbox differs from what was asked. */
    warnings?: string[];
}

export interface ProviderInfo {
    name: string;
    available: boolean;
    reason?: string;
    default: boolean;
    info?: Record<string, unknown>;
}

export interface DaemonInfo {
    version: string;
    protocol: number | string;
    uptime_s: number;
    pid: number;
    uid: number;
    admin: boolean;
    providers: ProviderInfo[];
    counts: { sessions: number; sandboxes: number; processes: number };
    limits: Record<string, unknown>;
}

/** The exit record of a process (process.exec without output, process.wait). */
export interface ExitRecord {
    pid: number;
    exit_code: number;
    signal: number;
    timed_out: boolean;
    killed: boolean;
    error: string | null;
    duration_ms?: number;
    result?: Json;
    exception?: { name: string; message: string; stack?: string } | null;
    isolate_reset?: boolean;
    retried?: boolean;
    sandbox_restarted?: boolean;
    /** js: the program's console lines. */
    logs?: string[];
    logs_truncated?: boolean;
    /** Modal: part of the output could not be read. */
    output_incomplete?: boolean;
    remote_exit_code?: number;
}

export interface ExecResult extends ExitRecord {
    stdout?: string;
    stderr?: string;
    stdout_b64?: string;
    stderr_b64?: string;
    truncated: boolean;
}

export interface ProcessInfo {
    pid: number;
    command: string;
    status: 'running' | 'exited';
    started_at: string;
    exit_code?: number;
    stdout_bytes: number;
    stderr_bytes: number;
    /** The process runs on a terminal. */
    pty?: boolean;
}

export interface AttachResult {
    running: boolean;
    stdout_offset: number;
    stderr_offset: number;
    stdout_start: number;
    stderr_start: number;
}

/* ---- params ---------------------------------------------------------------- */

export interface CreateParams {
    id?: string;
    provider?: string;
    image?: string;
    snapshot?: string;
    env?: Record<string, string>;
    working_dir?: string;
    /** Lifetime; absent: the provider's default (Docker: none). */
    timeout_ms?: number;
    /** Default timeout of the sandbox's commands. */
    command_timeout_ms?: number;
    idle_timeout_ms?: number;
    start?: boolean;
    on_start?: Command;
    on_stop?: Command;
    on_destroy?: Command;
    instructions?: string;
    instructions_append?: string;
    tools?: string[];
    memory_limit_mb?: number;
    fresh_isolate?: boolean;
    /** js: keep the global object between programs. */
    persistent?: boolean;
    options?: Record<string, unknown>;
}

export interface ExecParams {
    sandbox: string;
    command: Command;
    env?: EnvMap;
    cwd?: string;
    timeout_ms?: number;
    stdin?: string;
    stdin_b64?: string;
    stream?: boolean;
    /** How output bytes are spelled on the wire: 'utf8' (default) or 'auto' (base64 when shorter). */
    output_encoding?: OutputEncoding;
    /** Run on a terminal of this size (true: 80x24); all output is stdout. */
    pty?: PtySize | boolean;
    /** Asks for a `process.started` notification carrying this token and the pid,
     * before any output and before the result (so an exec can be killed early). */
    start_token?: string;
}

/** A terminal's window size (PROTOCOL.md, Terminals). */
export interface PtySize {
    cols: number;
    rows: number;
}

export type OutputEncoding = 'utf8' | 'auto';

export interface SnapshotInfo {
    snapshot: string;
    provider: string;
    owner_uid: number;
    created_at: string;
    sandbox: string;
    sandboxes: number;
    image?: string;
}

/** A method without params. */
export type NoParams = Record<never, never>;

export interface Methods {
    'daemon.ping': { params: NoParams; result: { pong: boolean; time: string } };
    'daemon.info': { params: NoParams; result: DaemonInfo };
    'sandbox.create': { params: CreateParams; result: Sandbox };
    'sandbox.get': { params: { id: string }; result: Sandbox };
    'sandbox.list': {
        params: { provider?: string; status?: SandboxStatus };
        result: { sandboxes: Sandbox[] };
    };
    'sandbox.start': { params: { id: string }; result: Sandbox };
    'sandbox.stop': { params: { id: string }; result: Sandbox };
    'sandbox.destroy': { params: { id: string }; result: { id: string; status: 'destroyed' } };
    'sandbox.snapshot': {
        /** ttl: seconds the backend image lives (-1 never); Modal only, others take -1 alone. */
        params: { id: string; ttl?: number };
        result: {
            snapshot: string;
            provider: string;
            created_at: string;
            /** Modal: the TTL applied (after the config's clamp), -1 for never. */
            ttl_s?: number;
            expires_at?: string;
            /** "modal default" on the SandboxSnapshotFs fallback, which has no TTL. */
            ttl?: string;
        };
    };
    'snapshot.list': {
        params: { provider?: string };
        result: { snapshots: SnapshotInfo[]; errors?: Array<{ provider: string; message: string }> };
    };
    'snapshot.delete': { params: { snapshot: string }; result: { snapshot: string; deleted: boolean } };
    'sandbox.clone': {
        params: {
            id: string;
            new_id?: string;
            env?: EnvMap;
            working_dir?: string;
            idle_timeout_ms?: number;
            start?: boolean;
        };
        result: Sandbox;
    };
    'sandbox.set_env': { params: { id: string; env: EnvMap }; result: { env: Record<string, string> } };
    'sandbox.instructions': { params: { id: string }; result: { text: string } };
    'process.exec': { params: ExecParams; result: ExecResult };
    'process.spawn': { params: ExecParams; result: { pid: number } };
    'process.write': {
        params: { sandbox: string; pid: number; data?: string; data_b64?: string };
        result: { written: number };
    };
    'process.close_stdin': { params: { sandbox: string; pid: number }; result: Record<string, never> };
    'process.kill': {
        params: { sandbox: string; pid: number; signal?: string | number };
        result: { already_exited: boolean };
    };
    'process.wait': { params: { sandbox: string; pid: number; timeout_ms?: number }; result: ExitRecord };
    'process.list': { params: { sandbox: string }; result: { processes: ProcessInfo[] } };
    'process.attach': {
        params: {
            sandbox: string;
            pid: number;
            offset?: number;
            stdout_offset?: number;
            stderr_offset?: number;
            follow?: boolean;
            output_encoding?: OutputEncoding;
            /** Only output that arrived at or after this time: Unix seconds, or RFC 3339. */
            since?: number | string;
            /** Each process.output carries `time` (RFC 3339, nine fraction digits). */
            timestamps?: boolean;
        };
        result: AttachResult;
    };
    'process.detach': { params: { sandbox: string; pid: number }; result: Record<string, never> };
    /* files (PROTOCOL.md "Files") */
    'fs.read': {
        params: {
            sandbox: string;
            /** Absent on an archive's later calls, which name its `handle`. */
            path?: string;
            offset?: number;
            length?: number;
            encoding?: 'utf8' | 'base64';
            format?: 'tar';
            /** An archive's next chunk (PROTOCOL.md, Archives). */
            handle?: number;
            /** With handle: let the archive go before its eof (answered {aborted: true}). */
            abort?: boolean;
            /** An archive of path through a symlink at path itself (docker cp -L). */
            follow?: boolean;
            /** An archive's top entry named so (one path component) instead of path's base name. */
            name?: string;
            /** "Raw transfers": answered with a token for an fs.stream connection. */
            transport?: 'json' | 'raw';
        };
        result: FsReadResult & Partial<FsRawToken> & { aborted?: boolean };
    };
    'fs.write': {
        params: {
            sandbox: string;
            path?: string;
            data?: string;
            data_b64?: string;
            mode?: number;
            append?: boolean;
            mkdir_parents?: boolean;
            more?: boolean;
            handle?: number;
            abort?: boolean;
            format?: 'tar';
            /** With transport "raw": the exact byte count the fs.stream connection sends. */
            size?: number;
            transport?: 'json' | 'raw';
        };
        result: { path: string; size: number; handle?: number; aborted?: boolean } & Partial<FsRawToken>;
    };
    'fs.list': {
        params: { sandbox: string; path: string; depth?: number; cursor?: string; limit?: number };
        result: { path: string; entries: FsEntry[]; cursor?: string };
    };
    'fs.stat': { params: { sandbox: string; path: string; follow?: boolean }; result: FsStat };
    'fs.mkdir': {
        params: { sandbox: string; path: string; parents?: boolean; mode?: number };
        result: { path: string; created: boolean };
    };
    'fs.remove': { params: { sandbox: string; path: string; recursive?: boolean }; result: { path: string; removed: boolean } };
    'fs.rename': { params: { sandbox: string; path: string; to: string; overwrite?: boolean }; result: { path: string; to: string } };
    'fs.watch': { params: { sandbox: string; path: string; recursive?: boolean }; result: { watch: number; path: string } };
    'fs.unwatch': { params: { sandbox: string; watch: number }; result: Record<string, never> };
    'process.resize': { params: { sandbox: string; pid: number } & PtySize; result: PtySize };
    'sandbox.stats': { params: { id: string; stream?: boolean; size?: boolean }; result: SandboxStats };
    'sandbox.expose': {
        params: { id: string; port: number; host_port?: number; host?: string; unix?: boolean };
        result: ExposedPort;
    };
    'sandbox.unexpose': { params: { id: string; port: number }; result: { port: number } };
    /* host directories in a running sandbox (PROTOCOL.md "Mounts") */
    'sandbox.mount': {
        params: { id: string; source: string; target: string; read_only?: boolean };
        result: { source: string; target: string; read_only: boolean };
    };
    'sandbox.unmount': { params: { id: string; target: string }; result: { target: string } };
}

/** A port of a sandbox reachable from the host (sandbox.expose; metadata.ports). */
export interface ExposedPort {
    port: number;
    host: string;
    host_port: number;
    url: string;
    connections?: number;
    connections_total?: number;
    bytes_in?: number;
    bytes_out?: number;
    /** the socket's path when exposed with unix: true (host is then "unix") */
    unix?: string;
}

/** A resource sample (PROTOCOL.md, Resource stats); also the sandbox.stats notification. */
export interface SandboxStats {
    id: string;
    time: string;
    cpu: { usage_s: number; percent: number; online?: number };
    memory: { current: number; usage?: number; peak: number; limit: number | null };
    pids: { current: number; limit?: number };
    block_io?: { read_bytes: number; write_bytes: number };
    network: { rx_bytes: number; tx_bytes: number } | null;
    disk?: { writable_bytes: number; rootfs_bytes: number };
    worker_pid?: number;
    egress?: { connections: number; connections_total: number; refused: number; bytes_in: number; bytes_out: number };
}
export type FsEntryType = 'file' | 'dir' | 'symlink' | 'fifo' | 'socket' | 'char' | 'block' | 'other';
export interface FsEntry {
    name: string;
    path: string;
    type: FsEntryType;
    size: number;
    mode: number;
    mtime: string;
    target?: string;
}
export interface FsStat extends FsEntry {
    uid: number;
    gid: number;
}
/** The answer to a transport "raw" fs.read/fs.write (PROTOCOL.md "Raw transfers"). */
export interface FsRawToken {
    transport: 'raw';
    token: string;
    expires_ms: number;
}
export interface FsReadResult {
    path: string;
    data?: string;
    data_b64?: string;
    size: number;
    offset: number;
    length: number;
    eof: boolean;
    mtime: string;
    handle?: number;
    /** An archive's answer: "tar", and the entries that passed so far. */
    format?: 'tar';
    entries?: number;
}
export interface FsEventNotification {
    sandbox: string;
    watch: number;
    path: string;
    kind: 'create' | 'modify' | 'delete' | 'rename' | 'overflow';
    ended?: boolean;
}
export type Method = keyof Methods;
export type Params<M extends Method> = Methods[M]['params'];
export type Result<M extends Method> = Methods[M]['result'];

/* ---- notifications and the daemon's request --------------------------------- */

export interface OutputNotification {
    sandbox: string;
    pid: number;
    stream: 'stdout' | 'stderr';
    offset: number;
    /** When sbxd received it, with process.attach's timestamps. */
    time?: string;
    data?: string;
    data_b64?: string;
}
export interface ExitNotification {
    sandbox: string;
    pid: number;
    exit_code: number;
    signal: number;
    timed_out: boolean;
    killed: boolean;
    error: string | null;
}
export interface ProgressNotification {
    sandbox: string;
    stage: string;
    message: string;
    current?: number;
    total?: number;
}
export interface StatusNotification {
    sandbox: string;
    status: SandboxStatus;
    error?: string;
}
/** The pid of a process.exec/spawn that passed `start_token`, before its output. */
export interface StartedNotification {
    sandbox: string;
    pid: number;
    token: string;
}
export interface Notifications {
    'process.started': StartedNotification;
    'process.output': OutputNotification;
    'process.exit': ExitNotification;
    'sandbox.progress': ProgressNotification;
    'sandbox.status': StatusNotification;
    'fs.event': FsEventNotification;
    'sandbox.stats': SandboxStats;
    'sandbox.egress': EgressNotification;
}

/** The egress proxy refused a connection (PROTOCOL.md, Egress). */
export interface EgressNotification {
    sandbox: string;
    host: string;
    port: number;
    decision: 'refused';
    reason: string;
    /** the config key of the lookup bound that refused it, and its value */
    limit?: string;
    max?: number;
}
export type NotificationName = keyof Notifications;

/** Params of the daemon's `tool.call` request. */
export interface ToolCallParams {
    sandbox: string;
    pid: number;
    name: string;
    args: Json;
}

/* ---- the run-time lists, checked against the types ------------------------- */

const EXEC_PARAMS = [
    'sandbox', 'command', 'env', 'cwd', 'timeout_ms', 'stdin', 'stdin_b64', 'stream', 'output_encoding',
    'pty', 'start_token',
] as const;

export const METHOD_PARAMS = {
    'daemon.ping': [],
    'daemon.info': [],
    'sandbox.create': [
        'id', 'provider', 'image', 'snapshot', 'env', 'working_dir', 'timeout_ms', 'command_timeout_ms',
        'idle_timeout_ms', 'start', 'on_start', 'on_stop', 'on_destroy', 'instructions',
        'instructions_append', 'tools', 'memory_limit_mb', 'fresh_isolate', 'persistent', 'options',
    ],
    'sandbox.get': ['id'],
    'sandbox.list': ['provider', 'status'],
    'sandbox.start': ['id'],
    'sandbox.stop': ['id'],
    'sandbox.destroy': ['id'],
    'sandbox.snapshot': ['id', 'ttl'],
    'snapshot.list': ['provider'],
    'snapshot.delete': ['snapshot'],
    'sandbox.clone': ['id', 'new_id', 'env', 'working_dir', 'idle_timeout_ms', 'start'],
    'sandbox.set_env': ['id', 'env'],
    'sandbox.instructions': ['id'],
    'process.exec': EXEC_PARAMS,
    'process.spawn': EXEC_PARAMS,
    'process.write': ['sandbox', 'pid', 'data', 'data_b64'],
    'process.close_stdin': ['sandbox', 'pid'],
    'process.kill': ['sandbox', 'pid', 'signal'],
    'process.wait': ['sandbox', 'pid', 'timeout_ms'],
    'process.list': ['sandbox'],
    'process.attach': [
        'sandbox', 'pid', 'offset', 'stdout_offset', 'stderr_offset', 'follow', 'output_encoding', 'since', 'timestamps',
    ],
    'process.detach': ['sandbox', 'pid'],
    'fs.read': ['sandbox', 'path', 'offset', 'length', 'encoding', 'format', 'handle', 'abort', 'follow', 'name', 'transport'],
    'fs.write': [
        'sandbox', 'path', 'data', 'data_b64', 'mode', 'append', 'mkdir_parents', 'more', 'handle', 'abort', 'format',
        'size', 'transport',
    ],
    'fs.list': ['sandbox', 'path', 'depth', 'cursor', 'limit'],
    'fs.stat': ['sandbox', 'path', 'follow'],
    'fs.mkdir': ['sandbox', 'path', 'parents', 'mode'],
    'fs.remove': ['sandbox', 'path', 'recursive'],
    'fs.rename': ['sandbox', 'path', 'to', 'overwrite'],
    'fs.watch': ['sandbox', 'path', 'recursive'],
    'fs.unwatch': ['sandbox', 'watch'],
    'process.resize': ['sandbox', 'pid', 'cols', 'rows'],
    'sandbox.stats': ['id', 'stream', 'size'],
    'sandbox.expose': ['id', 'port', 'host_port', 'host', 'unix'],
    'sandbox.unexpose': ['id', 'port'],
    'sandbox.mount': ['id', 'source', 'target', 'read_only'],
    'sandbox.unmount': ['id', 'target'],
} as const;

export const NOTIFICATION_PARAMS = {
    'process.started': ['sandbox', 'pid', 'token'],
    'process.output': ['sandbox', 'pid', 'stream', 'offset', 'time', 'data', 'data_b64'],
    'process.exit': ['sandbox', 'pid', 'exit_code', 'signal', 'timed_out', 'killed', 'error'],
    'sandbox.progress': ['sandbox', 'stage', 'message', 'current', 'total'],
    'sandbox.status': ['sandbox', 'status', 'error'],
    'fs.event': ['sandbox', 'watch', 'path', 'kind', 'ended'],
    'sandbox.stats': ['id', 'time', 'cpu', 'memory', 'pids', 'block_io', 'network', 'disk', 'worker_pid', 'egress'],
    'sandbox.egress': ['sandbox', 'host', 'port', 'decision', 'reason', 'limit', 'max'],
} as const;

export const TOOL_CALL_PARAMS = ['sandbox', 'pid', 'name', 'args'] as const;

// Compile-time: each list names exactly the keys of its interface.
type Same<A extends PropertyKey, B extends PropertyKey> = [A] extends [B]
    ? [B] extends [A]
        ? true
        : false
    : false;
type MethodCheck = {
    [M in Method]: Same<keyof Params<M>, (typeof METHOD_PARAMS)[M][number]>;
};
type NotificationCheck = {
    [N in NotificationName]: Same<keyof Notifications[N], (typeof NOTIFICATION_PARAMS)[N][number]>;
};
type AllTrue<T> = false extends T[keyof T] ? false : true;
const methodListsMatch: AllTrue<MethodCheck> & Same<Method, keyof typeof METHOD_PARAMS> = true;
const notificationListsMatch: AllTrue<NotificationCheck> &
    Same<NotificationName, keyof typeof NOTIFICATION_PARAMS> &
    Same<keyof ToolCallParams, (typeof TOOL_CALL_PARAMS)[number]> = true;
void methodListsMatch;
void notificationListsMatch;
