// client.files(id) (E2B's shape over fs.*) against the docker provider at
// $SBXD_DOCKER_SOCKET; isolates' -32011 against $SBXD_SOCKET.
import assert from 'node:assert/strict';
import { randomBytes, createHash } from 'node:crypto';
import { group, test, until } from './harness.mjs';
import { SbxdClient, ErrorCode } from '../dist/index.js';

const SOCK = process.env.SBXD_SOCKET;
const DSOCK = process.env.SBXD_DOCKER_SOCKET;
const DOCKER_SKIP = DSOCK ? undefined : process.env.SBXD_DOCKER_SKIP || 'no Docker engine';
const DIMAGE = process.env.SBXD_DOCKER_IMAGE || 'sbx-test/busybox';
const sha = (b) => createHash('sha256').update(b).digest('hex');

group('files (docker)', () => {
    test('write, read, list, info, exists, makeDir, rename, remove, watchDir', async () => {
        const c = new SbxdClient({ socketPath: DSOCK });
        const sb = await c.createSandbox({ provider: 'docker', image: DIMAGE });
        try {
            const f = c.files(sb.id);
            const info = await f.write('/workspace/a.txt', 'héllo');
            assert.equal(info.size, 6);
            assert.equal(await f.read('/workspace/a.txt'), 'héllo');
            const big = randomBytes(9 * 1024 * 1024 + 7); // three chunks
            await f.write('/workspace/deep/big.bin', big);
            assert.equal(sha(await f.read('/workspace/deep/big.bin', { format: 'bytes' })), sha(big));
            const stream = await f.read('/workspace/deep/big.bin', { format: 'stream' });
            let n = 0;
            for await (const part of stream) n += part.length;
            assert.equal(n, big.length);
            const blob = new Blob([big.subarray(0, 1000)]);
            await f.write('/workspace/blob.bin', blob);
            assert.equal((await f.getInfo('/workspace/blob.bin')).size, 1000);
            await f.write([
                { path: '/workspace/m/1', data: 'one' },
                { path: '/workspace/m/2', data: new TextEncoder().encode('two') },
            ]);
            assert.deepEqual((await f.list('/workspace/m')).map((e) => e.name), ['1', '2']);
            assert.equal(await f.exists('/workspace/m/1'), true);
            assert.equal(await f.exists('/workspace/nope'), false);
            assert.equal(await f.makeDir('/workspace/d1/d2'), true);
            assert.equal(await f.makeDir('/workspace/d1/d2'), false);
            await f.rename('/workspace/a.txt', '/workspace/d1/a.txt');
            assert.equal(await f.read('/workspace/d1/a.txt'), 'héllo');
            const events = [];
            const w = await f.watchDir('/workspace/d1', (e) => events.push(e), { recursive: true });
            await f.write('/workspace/d1/d2/new.txt', 'x');
            await f.remove('/workspace/d1/a.txt');
            await until(() => events.some((e) => e.type === 'remove'), 5000);
            assert.ok(events.some((e) => e.type === 'create' && e.name === '/workspace/d1/d2/new.txt'));
            await w.stop();
            await f.remove('/workspace/d1');
            assert.equal(await f.exists('/workspace/d1'), false);
            await assert.rejects(f.read('/workspace/nope'), (e) => e.code === ErrorCode.FileOperationFailed && e.data.errno === 'ENOENT');
        } finally {
            await c.destroySandbox(sb.id).catch(() => {});
            c.close();
        }
    });
}, { skip: DOCKER_SKIP });

group('files (isolates)', () => {
    test('duktape answers -32011 naming the provider', async () => {
        const c = new SbxdClient({ socketPath: SOCK });
        const sb = await c.createSandbox({ provider: 'duktape' });
        try {
            await assert.rejects(c.files(sb.id).read('/x'), (e) => e.code === ErrorCode.NotSupported && e.data.provider === 'duktape');
        } finally {
            await c.destroySandbox(sb.id).catch(() => {});
            c.close();
        }
    });
}, { skip: SOCK ? undefined : 'no sbxd with duktape' });
