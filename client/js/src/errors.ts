/*
 * errors.ts - the client's two error classes, on the floor below everything
 * that throws them (client.ts, files.ts, files_raw.ts), so none of those has
 * to import the file that imports it.
 */
import { ErrorCode } from './protocol.js';

/** A JSON-RPC error answered by sbxd, with its stable code and data object. */
export class SbxdError extends Error {
    override readonly name: string = 'SbxdError';
    readonly code: number;
    readonly data: Record<string, unknown>;
    readonly method: string;
    constructor(method: string, code: number, message: string, data?: Record<string, unknown>) {
        super(message);
        this.code = code;
        this.data = data ?? {};
        this.method = method;
    }
    /** The ErrorCode key of `code` (e.g. 'SandboxNotFound'), or undefined. */
    get codeName(): string | undefined {
        for (const [k, v] of Object.entries(ErrorCode)) if (v === this.code) return k;
        return undefined;
    }
}

/** The connection failed or dropped before an answer came. */
export class SbxdConnectionError extends Error {
    override readonly name: string = 'SbxdConnectionError';
    readonly socketPath: string;
    constructor(message: string, socketPath: string, options?: { cause?: unknown }) {
        super(message, options);
        this.socketPath = socketPath;
    }
}
