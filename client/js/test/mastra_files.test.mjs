// SbxdSandbox.writeFiles (Mastra's sandbox interface) on the docker provider
// at $SBXD_DOCKER_SOCKET: the behaviours Mastra's own DockerSandbox writeFiles
// tests check, over sbxd's fs.write.
import assert from 'node:assert/strict';
import { group, test } from './harness.mjs';
import { SbxdSandbox } from '../dist/mastra.js';
import { SandboxAbortError } from '@mastra/core/workspace';

const DSOCK = process.env.SBXD_DOCKER_SOCKET;
const SKIP = DSOCK ? undefined : process.env.SBXD_DOCKER_SKIP || 'no Docker engine';
const IMAGE = process.env.SBXD_DOCKER_IMAGE || 'sbx-test/busybox';

group('mastra writeFiles', () => {
    let sb;
    const sh = async (cmd) => (await sb.executeCommand('sh', ['-c', cmd])).stdout.trim();
    test('setup', async () => {
        sb = new SbxdSandbox({ provider: 'docker', image: IMAGE, socketPath: DSOCK, id: `wf-${process.pid}` });
        await sb._start();
        assert.equal(typeof sb.writeFiles, 'function');
    });
    test('writes string and Buffer contents, creating parent directories', async () => {
        await sb.writeFiles([
            { path: '/workspace/wf/a.txt', content: 'hello' },
            { path: '/workspace/wf/deep/b.bin', content: Buffer.from([0, 1, 2, 255]) },
        ]);
        assert.equal(await sh('cat /workspace/wf/a.txt'), 'hello');
        assert.equal(await sh('od -An -tx1 /workspace/wf/deep/b.bin | tr -d " "'), '000102ff');
    });
    test('relative paths start at the working directory', async () => {
        await sb.writeFiles([{ path: 'rel.txt', content: 'r' }]);
        assert.equal(await sh('cat /workspace/rel.txt'), 'r');
    });
    test('an explicit mode is applied; the default is 0644 as umask allows', async () => {
        await sb.writeFiles([
            { path: '/workspace/wf/run.sh', content: '#!/bin/sh\necho ran\n', mode: 0o755 },
            { path: '/workspace/wf/secret', content: 's', mode: 0o600 },
            { path: '/workspace/wf/plain', content: 'p' },
        ]);
        assert.equal(await sh('stat -c %a /workspace/wf/run.sh /workspace/wf/secret /workspace/wf/plain | tr "\\n" " "'), '755 600 644');
        assert.equal(await sh('/workspace/wf/run.sh'), 'ran');
    });
    test('overwrites an existing file whole', async () => {
        await sb.writeFiles([{ path: '/workspace/wf/a.txt', content: 'x' }]);
        assert.equal(await sh('cat /workspace/wf/a.txt'), 'x');
    });
    test('invalid modes are rejected before anything is written', async () => {
        for (const mode of [0, 0o1000, 1.5, -1])
            await assert.rejects(sb.writeFiles([{ path: '/workspace/wf/bad', content: 'b', mode }]));
        assert.equal(await sh('test -e /workspace/wf/bad && echo there || echo absent'), 'absent');
    });
    test('an already aborted signal rejects with SandboxAbortError and writes nothing', async () => {
        const ac = new AbortController();
        ac.abort();
        await assert.rejects(sb.writeFiles([{ path: '/workspace/wf/aborted', content: 'a' }], { abortSignal: ac.signal }), SandboxAbortError);
        assert.equal(await sh('test -e /workspace/wf/aborted && echo there || echo absent'), 'absent');
    });
    test('teardown', async () => {
        await sb._destroy();
    });
}, { skip: SKIP });
