// SbxdSandbox with provider 'modal' (ModalSandbox's options) against sbxd's
// Modal provider on the local fake control plane (tests/modal/fake). The fake
// runs commands as local processes, its sandbox "filesystem" is a folder, and
// the working directory maps into it: commands use relative paths.
import assert from 'node:assert/strict';
import { group, test, until } from './harness.mjs';
import { SbxdClient, ErrorCode } from '../dist/index.js';
import { SbxdSandbox } from '../dist/mastra.js';

const MSOCK = process.env.SBXD_MODAL_SOCKET;
const SKIP = MSOCK ? undefined : process.env.SBXD_MODAL_SKIP || 'no fake Modal control plane';
let seq = 0;
const uid = (p) => `${p}-${process.pid}-${++seq}`;
const make = (o = {}) => new SbxdSandbox({ provider: 'modal', socketPath: MSOCK, baseImage: 'ubuntu:22.04', ...o });

group('mastra sandbox on modal (fake)', () => {
    test('start, executeCommand with create-time and per-call env, exit codes, spawn with stdin, kill, destroy', async () => {
        const sb = make({ id: uid('mm'), env: { FROM: 'create' }, timeoutMs: 600000, appName: 'sbxd-tsclient' });
        await sb._start();
        try {
            assert.equal(sb.status, 'running');
            const info = await sb.getInfo();
            assert.equal(info.metadata.sbxdProvider, 'modal');
            assert.equal(info.metadata.image, 'ubuntu:22.04');
            const r = await sb.executeCommand('sh', ['-c', 'echo "$FROM $X"'], { env: { X: 'per-call' } });
            assert.equal(r.exitCode, 0, r.stderr);
            assert.equal(r.stdout.trim(), 'create per-call');
            assert.equal((await sb.executeCommand('sh -c "exit 3"')).exitCode, 3);
            const h = await sb.processes.spawn('head -1');
            await h.sendStdin('via modal\n');
            assert.equal((await h.wait()).stdout.trim(), 'via modal');
            const s = await sb.processes.spawn('sleep 60');
            assert.equal(await sb.processes.kill(s.pid), true);
            assert.equal((await s.wait()).success, false);
            assert.match(sb.getInstructions(), /modal/);
        } finally {
            await sb._destroy();
        }
        const c = new SbxdClient({ socketPath: MSOCK });
        await assert.rejects(c.getSandbox(sb.id), (e) => e.code === ErrorCode.SandboxNotFound);
        c.close();
    }, { timeout: 120000 });

    test('reconnect by id keeps the sandbox; stop() then start() restores its files', async () => {
        const sb = make({ id: uid('mm-re') });
        await sb._start();
        try {
            await sb.executeCommand('sh -c "echo kept > state.txt"');
            const again = make({ id: sb.id });
            await again._start();
            assert.equal(again.sandbox.reconnected, true);
            assert.equal((await again.executeCommand('cat state.txt')).stdout.trim(), 'kept');
            await sb._stop();
            assert.equal(sb.status, 'stopped');
            await sb._start();
            assert.equal(sb.status, 'running');
            assert.equal((await sb.executeCommand('cat state.txt')).stdout.trim(), 'kept', 'restored from the snapshot');
        } finally {
            await sb._destroy();
        }
    }, { timeout: 120000 });
}, { skip: SKIP });
