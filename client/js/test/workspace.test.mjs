// Sandboxes as workspaces (issue 18) from the TypeScript client: terminals.
import assert from 'node:assert/strict';
import { group, test, until } from './harness.mjs';
import { SbxdClient, SbxdError, ErrorCode } from '../dist/index.js';
import { SbxdSandbox } from '../dist/mastra.js';

const SOCK = process.env.SBXD_SOCKET;
const DSOCK = process.env.SBXD_DOCKER_SOCKET;
const DOCKER_SKIP = DSOCK ? undefined : process.env.SBXD_DOCKER_SKIP || 'no Docker engine';
const DIMAGE = process.env.SBXD_DOCKER_IMAGE || 'sbx-test/busybox';

group('terminals', () => {
    test('spawn({pty}) runs on a terminal of that size; resize() reaches the program', async () => {
        const c = new SbxdClient({ socketPath: DSOCK });
        const sb = await c.createSandbox({ provider: 'docker', image: DIMAGE });
        try {
            const p = await c.spawn({
                sandbox: sb.id,
                command: "tty; stty size; trap 'stty size' WINCH; while :; do sleep 0.05; done",
                pty: { cols: 90, rows: 20 },
            });
            await until(() => p.stdout.includes('20 90\r\n'));
            assert.match(p.stdout, /\/dev\/pts\//);
            await p.resize(100, 33);
            await until(() => p.stdout.includes('33 100\r\n'));
            const list = await c.listProcesses(sb.id);
            assert.equal(list.find((x) => x.pid === p.pid)?.pty, true);
            await p.kill();
            assert.equal(p.stderr, '');
        } finally {
            await c.destroySandbox(sb.id).catch(() => {});
            c.close();
        }
    });

    test('a process without a terminal cannot be resized (InvalidParams)', async () => {
        const c = new SbxdClient({ socketPath: DSOCK });
        const sb = await c.createSandbox({ provider: 'docker', image: DIMAGE });
        try {
            const p = await c.spawn({ sandbox: sb.id, command: 'sleep 30' });
            await assert.rejects(c.resize(sb.id, p.pid, 80, 24), (e) => e instanceof SbxdError && e.code === ErrorCode.InvalidParams);
            await p.kill();
        } finally {
            await c.destroySandbox(sb.id).catch(() => {});
            c.close();
        }
    });
}, { skip: DOCKER_SKIP });

group('terminals on an isolate', () => {
    test('pty on duktape is NotSupported (-32011) naming provider and feature', async () => {
        const c = new SbxdClient({ socketPath: SOCK });
        const sb = await c.createSandbox({ provider: 'duktape' });
        try {
            await assert.rejects(c.exec({ sandbox: sb.id, command: '1', pty: true }), (e) => {
                assert.ok(e instanceof SbxdError);
                assert.equal(e.code, ErrorCode.NotSupported);
                assert.equal(e.data.provider, 'duktape');
                assert.equal(e.data.feature, 'pty');
                return true;
            });
        } finally {
            await c.destroySandbox(sb.id).catch(() => {});
            c.close();
        }
    });
});

group('stats', () => {
    test('stats() samples a running docker sandbox; a stream notifies', async () => {
        const c = new SbxdClient({ socketPath: DSOCK });
        const sb = await c.createSandbox({ provider: 'docker', image: DIMAGE });
        try {
            const st = await c.stats(sb.id);
            assert.equal(st.id, sb.id);
            assert.ok(st.memory.current > 0);
            assert.ok(st.pids.current >= 1);
            assert.equal(typeof st.cpu.percent, 'number');
            const seen = [];
            c.on('sandbox.stats', (p) => seen.push(p));
            await c.stats(sb.id, { stream: true });
            await until(() => seen.length >= 1, 15000);
            assert.equal(seen[0].id, sb.id);
            await c.stats(sb.id, { stream: false });
        } finally {
            await c.destroySandbox(sb.id).catch(() => {});
            c.close();
        }
    });

    test('Mastra getInfo() carries resources from sandbox.stats', async () => {
        const s = new SbxdSandbox({ provider: 'docker', image: DIMAGE, socketPath: DSOCK });
        await s._start();
        try {
            const info = await s.getInfo();
            assert.ok(info.resources, 'resources present');
            assert.ok(info.resources.memoryUsedMB > 0);
            assert.ok(info.resources.memoryMB > 0);
            assert.equal(typeof info.resources.cpuPercent, 'number');
        } finally {
            await s._destroy();
        }
    });
}, { skip: DOCKER_SKIP });

group('ports', () => {
    test('ports.expose() reaches a server in a network: none sandbox; Mastra getPortUrl', async () => {
        const s = new SbxdSandbox({ provider: 'docker', image: DIMAGE, socketPath: DSOCK });
        await s._start();
        const c = s.client;
        try {
            await c.exec({ sandbox: s.id, command: 'mkdir -p /www && echo hi-port > /www/index.html' });
            await c.spawn({ sandbox: s.id, command: 'exec httpd -f -p 127.0.0.1:8000 -h /www' });
            await new Promise((r) => setTimeout(r, 300));
            const p = await c.ports.expose(s.id, 8000);
            assert.equal(p.host, '127.0.0.1');
            const body = await (await fetch(p.url)).text();
            assert.equal(body, 'hi-port\n');
            const url = await s.networking.getPortUrl(8000);
            assert.equal(url, p.url);
            assert.equal(await s.networking.getPortUrl(70000), null);
            await c.ports.unexpose(s.id, 8000);
            await assert.rejects(fetch(p.url));
        } finally {
            await s._destroy();
        }
    });
}, { skip: DOCKER_SKIP });
