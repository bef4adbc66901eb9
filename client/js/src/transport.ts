/*
 * transport.ts - what the files helpers (files.ts, files_raw.ts) need of a
 * connection: typed calls, notifications, and the socket path a raw stream
 * opens a second connection to. SbxdClient implements it; files depend on
 * this interface, not on the client, so the client can sit above them.
 */
import type { Method, NotificationName, Notifications, Params, Result } from './protocol.js';

export interface FsTransport {
    readonly socketPath: string;
    call<M extends Method>(method: M, params: Params<M>, signal?: AbortSignal): Promise<Result<M>>;
    on<N extends NotificationName>(name: N, listener: (params: Notifications[N]) => void): () => void;
}
