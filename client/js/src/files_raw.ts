/*
 * files_raw.ts - big files over sbxd's raw transport (proto/PROTOCOL.md,
 * "Raw transfers"): fs.read/fs.write with transport "raw" answer a token,
 * and a second connection to the same socket, opened with one fs.stream
 * line, carries the bytes without JSON or base64 around them.
 *
 * Backpressure both ways: a read's web stream pauses the socket while its
 * queue is full (the daemon then stops reading the sandbox, so a slow
 * consumer holds at most a queue's worth here and a chunk in sbxd); a write
 * sends a part only when the socket has drained the last.
 */
import * as net from 'node:net';
import { SbxdError } from './errors.js';
import type { FsTransport } from './transport.js';

/** Bytes a raw read's stream queues before it pauses the socket. */
export const RAW_READ_QUEUE = 1 << 20;
/**
 * A raw read hands its consumer chunks of up to this many bytes: what the
 * socket delivered in one turn of Node's loop (64 KiB a read) joined into
 * one. Each chunk costs a promise or two in every web-stream and Node-stream
 * stage after it, so 64 KiB ones made a pipe to a file half as fast.
 */
export const RAW_READ_CHUNK = 1 << 20;
/** Bytes a raw write hands to its socket before it waits for them to go out. */
export const RAW_WINDOW = 4 << 20;

function streamError(method: string, e: { code?: number; message?: string; data?: Record<string, unknown> }): SbxdError {
    return new SbxdError(method, e.code ?? -32603, e.message ?? 'raw transfer failed', e.data);
}

function openStream(socketPath: string, token: string): net.Socket {
    const s = net.createConnection({ path: socketPath });
    s.write(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'fs.stream', params: { token } }) + '\n');
    return s;
}

/** Splits a byte stream into its first line (without the newline) and the rest. */
function takeLine(buf: Buffer): [string, Buffer] | null {
    const i = buf.indexOf(10);
    if (i < 0) return null;
    return [buf.subarray(0, i).toString('utf8'), buf.subarray(i + 1)];
}

/** fs.read's params for an archive (PROTOCOL.md, Archives), passed through. */
export interface ReadExtra {
    format?: 'tar';
    follow?: boolean;
    name?: string;
}

/** What fs.read answers when it gives no token: a JSON chunk (an archive's has its `handle`). */
export type ReadFallback = { first?: { data_b64?: string; eof: boolean; length: number; handle?: number } };

/**
 * Asks for a read over the raw transport: its token, or null when the
 * daemon does not offer it (then `fallback` has the JSON answer it gave
 * instead). The token is good for one rawStream, from any thread.
 */
export async function rawToken(
    client: FsTransport,
    sandbox: string,
    path: string,
    offset: number,
    fallback: ReadFallback,
    extra: ReadExtra = {},
): Promise<string | null> {
    const r = await client.call('fs.read', {
        sandbox,
        path,
        ...(offset ? { offset } : {}),
        ...extra,
        transport: 'raw',
        encoding: 'base64',
    });
    if (r.transport !== 'raw' || !r.token) {
        fallback.first = r;
        return null;
    }
    return r.token;
}

/** The bytes of a raw read whose token rawToken gave, as a web stream (an error on it is an SbxdError). */
export function rawStream(socketPath: string, token: string): ReadableStream<Uint8Array> {
    const sock = openStream(socketPath, token);
    /* States of the reply: the header line, frames (length, bytes), then the
     * trailer line (after a zero length) or an error line (after 0xffffffff). */
    let state: 'head' | 'len' | 'data' | 'tail' | 'err' | 'done' = 'head';
    let pend: Buffer = Buffer.alloc(0);
    let left = 0;
    let ctl!: ReadableStreamDefaultController<Uint8Array>;
    let failed = false;
    /* Frame bytes not yet enqueued: given to the consumer as one chunk at
     * RAW_READ_CHUNK, before the trailer, or at the end of this turn of the
     * loop (a slow stream's bytes are not held back). */
    let acc: Buffer[] = [];
    let accN = 0;
    let flushQueued = false;
    const flush = () => {
        flushQueued = false;
        if (!accN || state === 'done') return;
        const b = acc.length === 1 ? acc[0]! : Buffer.concat(acc, accN);
        ctl.enqueue(new Uint8Array(b.buffer, b.byteOffset, b.length));
        acc = [];
        accN = 0;
    };
    const fail = (e: Error) => {
        if (failed || state === 'done') return;
        failed = true;
        state = 'done';
        sock.destroy();
        ctl.error(e);
    };
    const feed = (chunk: Buffer) => {
        pend = pend.length ? Buffer.concat([pend, chunk]) : chunk;
        while (pend.length && state !== 'done') {
            if (state === 'data') {
                const n = Math.min(left, pend.length);
                acc.push(pend.subarray(0, n));
                accN += n;
                if (accN >= RAW_READ_CHUNK) flush();
                pend = pend.subarray(n);
                left -= n;
                if (!left) state = 'len';
            } else if (state === 'len') {
                if (pend.length < 4) return;
                const n = pend.readUInt32BE(0);
                pend = pend.subarray(4);
                if (n === 0xffffffff) state = 'err';
                else if (n === 0) state = 'tail';
                else {
                    state = 'data';
                    left = n;
                }
            } else {
                const t = takeLine(pend);
                if (!t) return;
                pend = t[1];
                let msg: { error?: { code?: number; message?: string; data?: Record<string, unknown> } };
                try {
                    msg = JSON.parse(t[0]);
                } catch {
                    return fail(new SbxdError('fs.read', -32603, `raw read: a line that is not JSON: ${t[0].slice(0, 80)}`));
                }
                if (msg.error) return fail(streamError('fs.read', msg.error));
                if (state === 'head') state = 'len';
                else if (state === 'tail') {
                    flush();
                    state = 'done';
                    sock.end();
                    ctl.close();
                } else return fail(new SbxdError('fs.read', -32603, 'raw read: an error line without an error'));
            }
        }
        if (accN && !flushQueued && state !== 'done') {
            flushQueued = true;
            setImmediate(flush);
        }
        // The queue is full (counting what waits for the turn's end): stop reading until the consumer pulls.
        if ((ctl.desiredSize ?? 1) - accN <= 0) sock.pause();
    };
    sock.on('data', feed);
    sock.on('error', (e) => fail(new SbxdError('fs.read', -32603, `raw read: ${e.message}`)));
    sock.on('close', () => {
        if (state !== 'done') fail(new SbxdError('fs.read', -32603, 'raw read: the stream ended early'));
    });
    return new ReadableStream<Uint8Array>(
        {
            start: (c) => {
                ctl = c;
            },
            pull: () => {
                sock.resume();
            },
            cancel: () => {
                state = 'done';
                sock.destroy();
            },
        },
        new ByteLengthQueuingStrategy({ highWaterMark: RAW_READ_QUEUE }),
    );
}

/**
 * Writes exactly `size` bytes from `source` to `path` over the raw
 * transport. Returns null (having sent nothing) when the daemon does not
 * offer it. `extra` are fs.write's params (mode, append, mkdir_parents).
 */
export async function rawWrite(
    client: FsTransport,
    sandbox: string,
    path: string,
    size: number,
    source: AsyncIterable<Uint8Array>,
    extra: Record<string, unknown> = {},
): Promise<{ path: string; size: number } | null> {
    let r: { transport?: string; token?: string };
    try {
        r = await client.call('fs.write', { sandbox, path, size, transport: 'raw', ...extra });
    } catch (e) {
        // An older daemon asks for data (-32602): not offered.
        if (e instanceof SbxdError && e.code === -32602 && !/size|transport/.test(e.message)) return null;
        throw e;
    }
    if (r.transport !== 'raw' || !r.token) return null;
    const sock = openStream(client.socketPath, r.token);
    let buf = Buffer.alloc(0);
    let closed = false;
    const answer = new Promise<{ path: string; size: number }>((resolve, reject) => {
        sock.on('data', (d: Buffer) => {
            buf = Buffer.concat([buf, d]);
            const t = takeLine(buf);
            if (!t) return;
            sock.end();
            try {
                const m = JSON.parse(t[0]);
                if (m.error) reject(streamError('fs.write', m.error));
                else resolve(m.result);
            } catch {
                reject(new SbxdError('fs.write', -32603, `raw write: a line that is not JSON: ${t[0].slice(0, 80)}`));
            }
        });
        sock.on('error', (e) => reject(new SbxdError('fs.write', -32603, `raw write: ${e.message}`)));
        sock.on('close', () => {
            closed = true;
            reject(new SbxdError('fs.write', -32603, 'raw write: the stream ended without an answer'));
        });
    });
    answer.catch(() => {});
    let sent = 0;
    /* A window of RAW_WINDOW bytes handed to the socket and not yet written
     * out: the next part is read from the source while the socket sends the
     * last ones, so the pipe to the daemon never runs dry between parts
     * (waiting for 'drain' after each part left it empty once per part). */
    let queued = 0;
    let wake: (() => void) | null = null;
    const flushed = (part: Uint8Array) => () => {
        queued -= part.length;
        wake?.();
    };
    sock.on('close', () => wake?.());
    try {
        for await (const part of source) {
            if (closed) break; // the daemon answered early (an error): stop sending and read it
            if (sent + part.length > size) throw new RangeError(`the source has more than the ${size} bytes announced`);
            sent += part.length;
            queued += part.length;
            sock.write(part, flushed(part));
            while (queued >= RAW_WINDOW && !closed) await new Promise<void>((res) => (wake = res));
            wake = null;
        }
        if (!closed && sent !== size) throw new RangeError(`the source ended after ${sent} of ${size} bytes`);
    } catch (e) {
        sock.destroy(); // fewer than size bytes: the daemon aborts the write, no file
        throw e;
    }
    return answer;
}
