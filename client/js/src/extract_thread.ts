/*
 * extract_thread.ts - files.downloadDir's extraction on a worker thread of
 * its own (extract_worker.ts), given the raw read's token: the worker reads
 * the archive from the socket and makes the files with plain synchronous
 * calls, which for a tree of small files is faster than the same calls
 * each sent to libuv's threads and back (see tar_extract.ts), and leaves
 * this thread's event loop free. Its memory is what extractTar's is on this
 * thread: the raw stream's queue and a piece of a file at a time.
 */
import { Worker } from 'node:worker_threads';
import { SbxdError } from './errors.js';
import { rawStream } from './files_raw.js';
import { extractTar, type ExtractResult } from './tar_extract.js';
import { TarError } from './tar_read.js';

interface Described {
    name?: string;
    message: string;
    code?: unknown;
    data?: Record<string, unknown>;
    method?: string;
    entry?: string;
    offset?: number;
}

/** The worker's error as the class it was. */
function rebuild(e: Described): Error {
    if (e.name === 'TarError') return new TarError(String(e.code ?? 'EIO'), e.message, e.entry, e.offset);
    if (e.name === 'SbxdError' && typeof e.code === 'number') return new SbxdError(e.method ?? 'fs.read', e.code, e.message, e.data);
    const err = new Error(e.message) as Error & { code?: unknown };
    if (e.name) err.name = e.name;
    if (e.code !== undefined) err.code = e.code;
    return err;
}

/**
 * Extracts the raw read `token` (files_raw.ts rawToken) into dest on a
 * worker thread; where no worker can be started, on this one.
 */
export async function extractInThread(socketPath: string, token: string, dest: string): Promise<ExtractResult> {
    let w: Worker;
    try {
        w = new Worker(new URL('./extract_worker.js', import.meta.url), { workerData: { socketPath, token, dest } });
    } catch {
        return extractTar(rawStream(socketPath, token), dest);
    }
    let failedToRun = false;
    try {
        return await new Promise<ExtractResult>((resolve, reject) => {
            w.once('message', (m: { done: ExtractResult } | { error: Described }) =>
                'done' in m ? resolve(m.done) : reject(rebuild(m.error)),
            );
            // The worker catches what extraction throws: an uncaught error is its module not
            // loading (a bundle without extract_worker.js), before the token was used.
            w.once('error', (err) => {
                failedToRun = true;
                reject(err);
            });
            w.once('exit', (code) => reject(new Error(`the extraction thread ended (exit ${code}) without an answer`)));
        });
    } catch (err) {
        if (!failedToRun) throw err;
        return extractTar(rawStream(socketPath, token), dest);
    } finally {
        void w.terminate();
    }
}
