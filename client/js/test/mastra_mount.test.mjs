// Mounts on the docker provider at $SBXD_DOCKER_SOCKET: sandbox.mount /
// sandbox.unmount (host directories into a running container, decided by
// sbxd's policy) and SbxdSandbox's mount/unmount (Mastra's supportsMounting)
// on them, a Workspace's LocalFilesystem mounts. What Mastra's
// mount-operations and read-only-mount/file-sync scenarios check, plus:
// files visible on both sides, unmount, binds at create (mountAtCreate), an
// ungranted path refused with the policy's words (a client of uid 65534;
// $SBXD_MOUNT_GRANTED is the prefix the config grants it).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { group, test } from './harness.mjs';
import { SbxdClient, ErrorCode } from '../dist/index.js';
import { SbxdSandbox, SbxdFilesystem } from '../dist/mastra.js';
import { LocalFilesystem, MountError, Workspace } from '@mastra/core/workspace';

const SOCK = process.env.SBXD_SOCKET;
const DSOCK = process.env.SBXD_DOCKER_SOCKET;
const SKIP = DSOCK ? undefined : process.env.SBXD_DOCKER_SKIP || 'no Docker engine';
const GRANTED = process.env.SBXD_MOUNT_GRANTED;
const run = promisify(execFile);
const tmp = (p) => {
    const d = fs.mkdtempSync(path.join(os.tmpdir(), p));
    fs.chmodSync(d, 0o777);
    return d;
};

group('sandbox.mount (docker)', () => {
    let c, sb, dir;
    const sh = async (cmd) => c.exec({ sandbox: sb.id, command: cmd });
    test('mount, files both ways, read-only, unmount', async () => {
        c = new SbxdClient({ socketPath: DSOCK });
        sb = await c.createSandbox({ provider: 'docker', id: `smnt-${process.pid}` });
        dir = tmp('sbxd-smnt-');
        fs.writeFileSync(path.join(dir, 'h.txt'), 'host\n');
        assert.deepEqual(await c.mount(sb.id, dir, '/mnt/a/b'), { source: fs.realpathSync(dir), target: '/mnt/a/b', read_only: false });
        assert.equal((await sh('cat /mnt/a/b/h.txt && echo sb > /mnt/a/b/s.txt')).stdout, 'host\n');
        assert.equal(fs.readFileSync(path.join(dir, 's.txt'), 'utf8'), 'sb\n');
        assert.match((await sh('grep " /mnt/a/b " /proc/self/mountinfo')).stdout, /nosuid,nodev/);
        await c.mount(sb.id, dir, '/ro', { readOnly: true });
        const w = await sh('echo x > /ro/x.txt');
        assert.notEqual(w.exit_code, 0);
        assert.match(w.stderr, /Read-only/i);
        assert.deepEqual(await c.unmount(sb.id, '/mnt/a/b'), { target: '/mnt/a/b' });
        assert.equal((await sh('ls -A /mnt/a/b')).stdout, '', 'nothing there once unmounted');
        assert.ok(fs.existsSync(path.join(dir, 's.txt')), 'the host keeps its files');
    });
    test('refusals: bad params, a target mounted already (or twice at once), a path sbxd did not mount, a missing source', async () => {
        const bad = (e, code, re) => e.code === code && (!re || re.test(e.message));
        await assert.rejects(c.mount(sb.id, 'rel/dir', '/x'), (e) => bad(e, ErrorCode.InvalidParams, /source/));
        await assert.rejects(c.mount(sb.id, dir, 'x'), (e) => bad(e, ErrorCode.InvalidParams, /target/));
        await assert.rejects(c.call('sandbox.mount', { id: sb.id, source: dir, target: '/x', read_only: 'yes' }), (e) => bad(e, ErrorCode.InvalidParams));
        await assert.rejects(c.mount(sb.id, dir, '/ro'), (e) => bad(e, ErrorCode.InvalidParams) && e.data.source === fs.realpathSync(dir) && e.data.read_only === true);
        const both = await Promise.allSettled([c.mount(sb.id, dir, '/twice'), c.mount(sb.id, dir, '/twice')]);
        assert.equal(both.filter((r) => r.status === 'fulfilled').length, 1, 'two at once: one mount');
        assert.equal(both.find((r) => r.status === 'rejected').reason.code, ErrorCode.InvalidParams);
        assert.equal((await sh('grep -c " /twice " /proc/self/mountinfo')).stdout.trim(), '1');
        await assert.rejects(c.unmount(sb.id, '/etc'), (e) => bad(e, ErrorCode.InvalidParams, /not a mount sandbox.mount made/));
        await assert.rejects(c.unmount(sb.id, '/mnt/a/b'), (e) => bad(e, ErrorCode.InvalidParams), 'unmounted already');
        await assert.rejects(c.mount(sb.id, '/nonexistent-sbxd-dir', '/y'), (e) => e.code === ErrorCode.PermissionDenied || e.code === ErrorCode.FileOperationFailed);
        await assert.rejects(c.mount('no-such-sandbox', dir, '/y'), (e) => bad(e, ErrorCode.SandboxNotFound));
    });
    test('a stopped sandbox is -32001', async () => {
        await c.stopSandbox(sb.id);
        await assert.rejects(c.mount(sb.id, dir, '/z'), (e) => e.code === ErrorCode.WrongState);
    });
    test('teardown', async () => {
        await c.destroySandbox(sb.id);
        c.close();
        fs.rmSync(dir, { recursive: true, force: true });
    });
}, { skip: SKIP });

group('sandbox.mount (isolates)', () => {
    test('duktape answers -32011 naming the provider', async () => {
        const c = new SbxdClient({ socketPath: SOCK });
        const sb = await c.createSandbox({ provider: 'duktape' });
        try {
            await assert.rejects(c.mount(sb.id, '/tmp', '/x'), (e) => e.code === ErrorCode.NotSupported && e.data.provider === 'duktape');
        } finally {
            await c.destroySandbox(sb.id).catch(() => {});
            c.close();
        }
    });
}, { skip: SOCK ? undefined : 'no sbxd with duktape' });

group('mastra mounts (docker)', () => {
    let sb, ws, dir, rodir;
    const sh = async (cmd) => sb.executeCommand('sh', ['-c', cmd]);
    test('setup: a Workspace with a read-write and a read-only LocalFilesystem mount', async () => {
        dir = tmp('sbxd-mnt-');
        rodir = tmp('sbxd-mnt-ro-');
        fs.writeFileSync(path.join(rodir, 'seed.txt'), 'seed\n');
        sb = new SbxdSandbox({ provider: 'docker', socketPath: DSOCK, id: `mnt-${process.pid}` });
        assert.ok(sb.mounts, 'mounts exists (supportsMounting)');
        assert.ok(sb.mounts.entries instanceof Map);
        ws = new Workspace({
            sandbox: sb,
            mounts: {
                '/data': new LocalFilesystem({ basePath: dir }),
                '/ref': new LocalFilesystem({ basePath: rodir, readOnly: true }),
            },
        });
        await ws.init();
        assert.equal(sb.mounts.get('/data').state, 'mounted', sb.mounts.get('/data').error);
        assert.equal(sb.mounts.get('/ref').state, 'mounted', sb.mounts.get('/ref').error);
    });
    test('getInfo lists the mounts', async () => {
        const info = await sb.getInfo();
        assert.ok(Array.isArray(info.mounts));
        assert.deepEqual(info.mounts.map((m) => `${m.path}:${m.filesystem}`).sort(), ['/data:local', '/ref:local']);
    });
    test('files are the same on both sides: host -> sandbox, sandbox -> host, Workspace API -> sandbox', async () => {
        fs.writeFileSync(path.join(dir, 'from-host.txt'), 'hello from the host\n');
        assert.equal((await sh('cat /data/from-host.txt')).stdout, 'hello from the host\n');
        const w = await sh('mkdir -p /data/sub && echo "hello from the sandbox" > /data/sub/from-sb.txt');
        assert.equal(w.exitCode, 0, w.stderr);
        assert.equal(fs.readFileSync(path.join(dir, 'sub/from-sb.txt'), 'utf8'), 'hello from the sandbox\n');
        await ws.filesystem.writeFile('/data/api.txt', 'via the workspace');
        assert.equal((await sh('cat /data/api.txt')).stdout, 'via the workspace');
        fs.unlinkSync(path.join(dir, 'from-host.txt'));
        assert.notEqual((await sh('cat /data/from-host.txt')).exitCode, 0, 'a file deleted on the host is gone inside');
    });
    test('a read-only mount: readable, not writable from the sandbox', async () => {
        assert.equal((await sh('cat /ref/seed.txt')).stdout, 'seed\n');
        const r = await sh('echo x > /ref/nope.txt');
        assert.notEqual(r.exitCode, 0);
        assert.match(r.stderr, /read-only/i);
        assert.equal(fs.existsSync(path.join(rodir, 'nope.txt')), false);
    });
    test('mount() on the running sandbox: a new path, the same one again, another source, a non-local filesystem', async () => {
        const late = await sb.mount(new LocalFilesystem({ basePath: rodir }), '/late');
        assert.equal(late.success, true, late.error);
        assert.equal((await sh('cat /late/seed.txt')).stdout, 'seed\n');
        assert.equal((await sb.mount(new LocalFilesystem({ basePath: dir }), '/data')).success, true, 'the same bind again');
        const wrong = await sb.mount(new LocalFilesystem({ basePath: rodir }), '/data');
        assert.equal(wrong.success, false);
        assert.match(wrong.error, /already mounted/);
        const other = await sb.mount(new SbxdFilesystem({ sandbox: sb.id, client: sb.client }), '/x');
        assert.equal(other.success, false);
    });
    test('unmount: the files are gone inside, still on the host', async () => {
        await sb.unmount('/data');
        assert.equal(sb.mounts.has('/data'), false);
        assert.notEqual((await sh('cat /data/api.txt')).exitCode, 0);
        assert.equal(fs.readFileSync(path.join(dir, 'api.txt'), 'utf8'), 'via the workspace');
        await sb.unmount('/late');
        assert.equal((await sh('ls -A /late')).stdout, '');
    });
    test('stop and start: the mounts are made again', async () => {
        await sb._stop();
        await sb._start();
        assert.equal(sb.mounts.get('/ref').state, 'mounted', sb.mounts.get('/ref').error);
        assert.equal((await sh('cat /ref/seed.txt')).stdout, 'seed\n');
    });
    test('teardown', async () => {
        await sb._destroy();
        fs.rmSync(dir, { recursive: true, force: true });
        fs.rmSync(rodir, { recursive: true, force: true });
    });
}, { skip: SKIP });

group('mastra mounts at create (docker)', () => {
    test('mountAtCreate: bound by the create, verified, not detachable while it runs', async () => {
        const dir = tmp('sbxd-mntc-');
        fs.writeFileSync(path.join(dir, 'c.txt'), 'at create\n');
        const sb = new SbxdSandbox({ provider: 'docker', socketPath: DSOCK, id: `mntc-${process.pid}`, mountAtCreate: true });
        const ws = new Workspace({ sandbox: sb, mounts: { '/c': new LocalFilesystem({ basePath: dir }) } });
        try {
            await ws.init();
            assert.equal(sb.mounts.get('/c').state, 'mounted', sb.mounts.get('/c').error);
            assert.equal((await sb.executeCommand('cat', ['/c/c.txt'])).stdout, 'at create\n');
            await assert.rejects(sb.unmount('/c'), MountError);
            assert.equal((await sb.executeCommand('cat', ['/c/c.txt'])).stdout, 'at create\n', 'still there');
        } finally {
            await sb._destroy();
            fs.rmSync(dir, { recursive: true, force: true });
        }
    });
    test('unmount before start: the sandbox is created without it', async () => {
        const dir = tmp('sbxd-mntg-');
        const sb = new SbxdSandbox({ provider: 'docker', socketPath: DSOCK, id: `mntg-${process.pid}`, mountAtCreate: true });
        const pending = await sb.mount(new LocalFilesystem({ basePath: dir }), '/gone');
        assert.equal(pending.success, false);
        assert.equal(sb.mounts.get('/gone').state, 'pending');
        await sb.unmount('/gone');
        assert.equal(sb.mounts.has('/gone'), false);
        await sb._start();
        try {
            assert.notEqual((await sb.executeCommand('sh', ['-c', 'ls /gone'])).exitCode, 0);
        } finally {
            await sb._destroy();
            fs.rmSync(dir, { recursive: true, force: true });
        }
    });
}, { skip: SKIP });

/** Runs mount_as_user.mjs as uid 65534; its last line, parsed. */
async function asNobody(args, env = {}) {
    const { stdout } = await run(process.execPath, [new URL('./mount_as_user.mjs', import.meta.url).pathname, ...args], {
        uid: 65534,
        gid: 65534,
        env: { ...process.env, HOME: '/tmp', ...env },
        timeout: 60000,
    });
    return JSON.parse(stdout.trim().split('\n').pop());
}

group('mastra mounts (policy)', () => {
    for (const atCreate of [false, true])
        test(`as uid 65534${atCreate ? ', at create' : ''}: the granted path is mounted, the ungranted one refused with the policy's words`, async () => {
            const other = tmp('sbxd-mnt-no-');
            const ok = fs.mkdtempSync(path.join(GRANTED, 'ok-'));
            fs.chmodSync(ok, 0o777);
            fs.writeFileSync(path.join(ok, 'in.txt'), 'granted\n');
            try {
                const spec = JSON.stringify({ '/ok': [ok, false], '/no': [other, false] });
                const r = await asNobody(
                    [`mntu${atCreate ? 'c' : ''}-${process.pid}`, spec, 'cat /ok/in.txt; echo out > /ok/out.txt; ls /no >/dev/null 2>&1 || echo absent'],
                    { SBXD_MOUNT_AT_CREATE: atCreate ? '1' : '0' },
                );
                assert.equal(r.uid, 65534);
                assert.equal(r.error, undefined, r.error);
                assert.equal(r.mounts['/ok'].state, 'mounted', r.mounts['/ok'].error);
                assert.equal(r.mounts['/no'].state, 'error');
                assert.match(r.mounts['/no'].error, /is under no prefix a rule grants you/);
                assert.equal(r.stdout, 'granted\nabsent\n');
                assert.equal(fs.readFileSync(path.join(ok, 'out.txt'), 'utf8'), 'out\n', 'the sandbox wrote through the grant');
            } finally {
                fs.rmSync(other, { recursive: true, force: true });
                fs.rmSync(ok, { recursive: true, force: true });
            }
        });
    test('as uid 65534: root\'s sandbox is not found (-32000)', async () => {
        const c = new SbxdClient({ socketPath: DSOCK });
        const sb = await c.createSandbox({ provider: 'docker', id: `mntr-${process.pid}` });
        try {
            const r = await asNobody(['--call', sb.id, GRANTED, '/x']);
            assert.equal(r.code, ErrorCode.SandboxNotFound);
        } finally {
            await c.destroySandbox(sb.id).catch(() => {});
            c.close();
        }
    });
}, {
    skip: SKIP ?? (process.getuid?.() !== 0 ? 'needs root to run a client as uid 65534'
        : !GRANTED ? 'SBXD_MOUNT_GRANTED unset (tests/providers/tsclient.sh sets it)' : undefined),
});
