// Big files through streams (files.read(path, {format: 'stream'}),
// files.write(path, ReadableStream | Readable)) over the raw transport, on
// the docker provider at $SBXD_DOCKER_SOCKET: bytes exact both ways by digest
// (checked inside the sandbox too), web and Node streams, a slow reader that
// does not grow memory, errors on the stream.
import assert from 'node:assert/strict';
import { randomBytes, createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { createReadStream, writeFileSync, unlinkSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { group, test, sleep } from './harness.mjs';
import { SbxdClient, ErrorCode } from '../dist/index.js';

const DSOCK = process.env.SBXD_DOCKER_SOCKET;
const SKIP = DSOCK ? undefined : process.env.SBXD_DOCKER_SKIP || 'no Docker engine';
const IMAGE = process.env.SBXD_DOCKER_IMAGE || 'sbx-test/debian:bookworm';
const sha = (b) => createHash('sha256').update(b).digest('hex');
const MB = 1 << 20;

/** A web ReadableStream of buf in pieces of `part` bytes, pulled (so the writer's pace is the source's). */
function webStream(buf, part = 100_000) {
    let o = 0;
    return new ReadableStream({
        pull(ctl) {
            if (o >= buf.length) return ctl.close();
            ctl.enqueue(new Uint8Array(buf.subarray(o, o + part)));
            o += part;
        },
    });
}

/** Counts the fs.stream connections this client's files make (the raw transport in use). */
function countRaw(c) {
    let n = 0;
    const orig = c.call.bind(c);
    c.call = (m, p, s) => {
        if ((m === 'fs.read' || m === 'fs.write') && p.transport === 'raw') n++;
        return orig(m, p, s);
    };
    return () => n;
}

group('files streams (docker)', () => {
    let c, sb, f;
    const sh = async (cmd) => (await c.exec({ sandbox: sb.id, command: cmd })).stdout.trim();
    const big = randomBytes(50 * MB + 12345);
    test('setup', async () => {
        c = new SbxdClient({ socketPath: DSOCK });
        sb = await c.createSandbox({ provider: 'docker', image: IMAGE, id: `fst-${process.pid}` });
        f = c.files(sb.id);
    });
    test('random 50 MB up through a web ReadableStream and back through a stream, by digest, over raw', async () => {
        const raw = countRaw(c);
        await f.write('/workspace/s/web.bin', webStream(big));
        assert.equal((await sh('sha256sum /workspace/s/web.bin')).split(' ')[0], sha(big), 'the sandbox has the bytes');
        const h = createHash('sha256');
        let n = 0;
        let parts = 0;
        let most = 0;
        for await (const part of await f.read('/workspace/s/web.bin', { format: 'stream' })) {
            assert.ok(part instanceof Uint8Array && !Buffer.isBuffer(part), 'chunks are plain Uint8Arrays');
            h.update(part);
            n += part.length;
            parts++;
            most = Math.max(most, part.length);
        }
        assert.equal(n, big.length);
        assert.equal(h.digest('hex'), sha(big));
        // The socket's 64 KiB reads are joined up to RAW_READ_CHUNK (1 MiB), never much past it.
        assert.ok(most <= MB + 128 * 1024, `the largest chunk is ${most} bytes`);
        assert.ok(parts < big.length / (128 * 1024), `${parts} chunks for ${big.length} bytes: the reads are joined`);
        assert.ok(raw() >= 2, `raw transfers used (${raw()})`);
    }, { timeout: 120000 });
    test('a Node Readable up (unknown length: segments renamed into place) and bytes back', async () => {
        await sh('mkdir -p /workspace/s && echo old > /workspace/s/node.bin && chmod 600 /workspace/s/node.bin');
        await f.write('/workspace/s/node.bin', Readable.from([big.subarray(0, 20 * MB), big.subarray(20 * MB)]));
        assert.equal((await sh('sha256sum /workspace/s/node.bin')).split(' ')[0], sha(big));
        assert.equal(await sh('stat -c %a /workspace/s/node.bin'), '600', 'the replaced file keeps its mode');
        assert.equal(await sh('ls -a /workspace/s | grep -c sbx- || true'), '0', 'no temporary file left');
        assert.equal(sha(await f.read('/workspace/s/node.bin', { format: 'bytes' })), sha(big));
    }, { timeout: 120000 });
    test('fs.createReadStream of a host file goes as one transfer (its size from the file)', async () => {
        const tmp = path.join(os.tmpdir(), `sbxd-fst-${process.pid}.bin`);
        writeFileSync(tmp, big.subarray(0, 5 * MB));
        try {
            const raw = countRaw(c);
            await f.write('/workspace/s/rs.bin', createReadStream(tmp));
            assert.equal(raw(), 1);
            assert.equal((await sh('sha256sum /workspace/s/rs.bin')).split(' ')[0], sha(big.subarray(0, 5 * MB)));
            const part = createReadStream(tmp, { start: 10 });
            await f.write('/workspace/s/rs2.bin', part); // a window: length not known up front, segments
            assert.equal((await f.getInfo('/workspace/s/rs2.bin')).size, 5 * MB - 10);
        } finally {
            unlinkSync(tmp);
        }
    }, { timeout: 60000 });
    test('a stream with its size given goes as one transfer; a Uint8Array and a Blob over raw too', async () => {
        const raw = countRaw(c);
        await f.write('/workspace/s/sized.bin', webStream(big.subarray(0, 3 * MB)), { size: 3 * MB });
        assert.equal(raw(), 1);
        assert.equal((await sh('sha256sum /workspace/s/sized.bin')).split(' ')[0], sha(big.subarray(0, 3 * MB)));
        await f.write('/workspace/s/blob.bin', new Blob([big.subarray(0, 2 * MB)]));
        assert.equal((await f.getInfo('/workspace/s/blob.bin')).size, 2 * MB);
        await assert.rejects(f.write('/workspace/s/short.bin', webStream(big.subarray(0, MB)), { size: 2 * MB }), RangeError);
        assert.equal(await f.exists('/workspace/s/short.bin'), false, 'a short stream leaves no file');
    }, { timeout: 60000 });
    test('a slow reader keeps the client flat: a stopped consumer stops the transfer', async () => {
        await sh('head -c 200000000 /dev/urandom > /workspace/s/slow.bin');
        const rss0 = process.memoryUsage().rss;
        const reader = (await f.read('/workspace/s/slow.bin', { format: 'stream' })).getReader();
        let n = 0;
        while (n < 8 * MB) n += (await reader.read()).value.length;
        await sleep(3000); // nothing read: without backpressure the other ~190 MB arrive here
        const grown = process.memoryUsage().rss - rss0;
        console.log(`# slow reader: RSS grew ${Math.round(grown / MB)} MB with 8 MB read of 200 MB`);
        assert.ok(grown < 64 * MB, `RSS grew ${Math.round(grown / MB)} MB while the reader slept`);
        for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            n += value.length;
        }
        assert.equal(n, 200000000, 'the rest still comes, whole');
    }, { timeout: 120000 });
    test('a missing file is ENOENT on the stream; a cancelled read frees the transfer', async () => {
        const s = await f.read('/workspace/s/nope', { format: 'stream' }).catch((e) => e);
        const err = s instanceof Error ? s : await s.getReader().read().catch((e) => e);
        assert.equal(err.code, ErrorCode.FileOperationFailed);
        assert.equal(err.data.errno, 'ENOENT');
        for (let i = 0; i < 20; i++) {
            // more than limits.fs_transfers_per_uid (16): each cancel must give its slot back
            const st = await f.read('/workspace/s/web.bin', { format: 'stream' });
            const r = st.getReader();
            await r.read();
            await r.cancel();
        }
        assert.equal(sha(await f.read('/workspace/s/sized.bin', { format: 'bytes' })), sha(big.subarray(0, 3 * MB)));
    }, { timeout: 60000 });
    test('SBXD_FS_TRANSPORT=json keeps base64 chunks, same bytes', async () => {
        process.env.SBXD_FS_TRANSPORT = 'json';
        try {
            const c2 = new SbxdClient({ socketPath: DSOCK });
            const raw = countRaw(c2);
            const g = c2.files(sb.id);
            await g.write('/workspace/s/json.bin', webStream(big.subarray(0, 9 * MB)));
            assert.equal(sha(await g.read('/workspace/s/json.bin', { format: 'bytes' })), sha(big.subarray(0, 9 * MB)));
            assert.equal(raw(), 0);
            c2.close();
        } finally {
            delete process.env.SBXD_FS_TRANSPORT;
        }
    }, { timeout: 60000 });
    test('teardown', async () => {
        await c.destroySandbox(sb.id);
        c.close();
    });
}, { skip: SKIP });
