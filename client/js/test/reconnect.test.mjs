// Reconnection as a framework relies on it (issue 16, item 11), against a real
// sbxd on a real Docker engine. Mastra's conformance suite
// (workspaces/_test-utils/src/sandbox/domains/reconnection.ts, lifecycle.ts)
// stops and starts a sandbox back to back and expects each to be done when it
// resolves: start() resolves with the sandbox running (DockerSandbox awaits the
// container), a stop() right after it works, files and id survive, and a new
// instance with the same id reconnects to a running sandbox. These tests check
// those behaviours on SbxdSandbox, plus the wire behaviour underneath
// (sandbox.create on a stopped id answers "running", not "starting").
import assert from 'node:assert/strict';
import { group, test } from './harness.mjs';
import { SbxdClient, ErrorCode } from '../dist/index.js';
import { SbxdSandbox } from '../dist/mastra.js';

const DSOCK = process.env.SBXD_DOCKER_SOCKET;
const SKIP = DSOCK ? undefined : process.env.SBXD_DOCKER_SKIP || 'no Docker engine';
const IMAGE = 'sbx-test/debian:bookworm';

let seq = 0;
const uid = (p) => `${p}-${process.pid}-${++seq}`;
const make = (o = {}) => new SbxdSandbox({ provider: 'docker', image: IMAGE, socketPath: DSOCK, ...o });

group('reconnection', () => {
    test('a new instance on a stopped sandbox: start() resolves with it running, and runs commands', async () => {
        const first = make({ id: uid('rc-stopped') });
        await first._start();
        await first.executeCommand('sh -c "echo kept > /workspace/kept.txt"');
        await first._stop();
        const again = make({ id: first.id });
        try {
            await again._start();
            assert.equal(again.status, 'running');
            assert.equal(again.sandbox.status, 'running', 'sbxd answered the reconnect once running');
            assert.equal(again.sandbox.reconnected, true);
            const r = await again.executeCommand('cat /workspace/kept.txt');
            assert.equal(r.exitCode, 0);
            assert.equal(r.stdout.trim(), 'kept');
        } finally {
            await again._destroy();
            first.client.close();
            again.client.close();
        }
    }, { timeout: 180000 });

    test('stop() right after a reconnecting start() stops it (no "it is starting")', async () => {
        const first = make({ id: uid('rc-backtoback') });
        await first._start();
        await first._stop();
        const again = make({ id: first.id });
        try {
            await again._start();
            await again._stop();
            assert.equal(again.status, 'stopped');
            const c = new SbxdClient({ socketPath: DSOCK });
            assert.equal((await c.getSandbox(first.id)).status, 'stopped');
            c.close();
        } finally {
            await again._destroy();
            first.client.close();
            again.client.close();
        }
    }, { timeout: 180000 });

    test('stop/start resilience: three cycles keep the id, the files and a working shell', async () => {
        const sb = make({ id: uid('rc-cycles') });
        await sb._start();
        try {
            const id = sb.id;
            await sb.executeCommand('sh -c "echo cycle > /workspace/c.txt"');
            for (let i = 0; i < 3; i++) {
                await sb._stop();
                assert.equal(sb.status, 'stopped');
                await sb._start();
                assert.equal(sb.status, 'running');
                assert.equal(sb.id, id);
                const pwd = await sb.executeCommand('pwd');
                assert.equal(pwd.exitCode, 0);
                assert.ok(pwd.stdout.trim().length > 0);
            }
            assert.equal((await sb.executeCommand('cat /workspace/c.txt')).stdout.trim(), 'cycle');
        } finally {
            await sb._destroy();
            sb.client.close();
        }
    }, { timeout: 300000 });

    test('a stop and a reconnect sent together both finish: the later one wins, neither fails', async () => {
        const first = make({ id: uid('rc-race') });
        await first._start();
        await first._stop();
        const c = new SbxdClient({ socketPath: DSOCK });
        const again = make({ id: first.id });
        try {
            // The reconnect starts it; the stop arrives while it starts and waits.
            const starting = again._start();
            await new Promise((r) => setTimeout(r, 50));
            const stopped = await c.stopSandbox(first.id);
            await starting;
            assert.equal(stopped.status, 'stopped');
            assert.equal((await c.getSandbox(first.id)).status, 'stopped');
            // And a destroy during a start waits for it.
            const restarting = c.startSandbox(first.id);
            await new Promise((r) => setTimeout(r, 50));
            const gone = await c.destroySandbox(first.id);
            assert.equal((await restarting).status, 'running');
            assert.equal(gone.status, 'destroyed');
            await assert.rejects(c.getSandbox(first.id), (e) => e.code === ErrorCode.SandboxNotFound);
        } finally {
            await again._destroy();
            c.close();
            first.client.close();
            again.client.close();
        }
    }, { timeout: 180000 });
}, { skip: SKIP });
