/*
 * extract_worker.ts - the thread extract_thread.ts starts for one
 * extraction: it opens the raw stream of the archive whose token it is
 * given (files_raw.ts) and makes the tree with syncOps (tar_extract.ts),
 * each file system call made here in turn instead of sent to libuv's
 * threads and back. The archive's bytes never pass through the thread
 * that started it.
 *
 * workerData: {socketPath, token, dest}. One message back, then it ends:
 * {done: result}, or {error: {name, message, code, data, method, entry,
 * offset}} (an SbxdError from the stream, a TarError, or another error).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { rawStream } from './files_raw.js';
import { extractTar, syncOps } from './tar_extract.js';

const port = parentPort!;
const job = workerData as { socketPath: string; token: string; dest: string };

type Described = Error & { code?: unknown; data?: unknown; method?: unknown; entry?: unknown; offset?: unknown };

extractTar(rawStream(job.socketPath, job.token), job.dest, syncOps).then(
    (done) => port.postMessage({ done }),
    (err: Described) =>
        port.postMessage({
            error: {
                name: err?.name,
                message: String(err?.message ?? err),
                code: err?.code,
                data: err?.data,
                method: err?.method,
                entry: err?.entry,
                offset: err?.offset,
            },
        }),
);
