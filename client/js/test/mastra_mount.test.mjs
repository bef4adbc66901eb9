// SbxdSandbox's mount/unmount (Mastra's supportsMounting) on the docker
// provider at $SBXD_DOCKER_SOCKET: a Workspace's LocalFilesystem mounts become
// bind mounts of their host directories, decided by sbxd's policy. What
// Mastra's mount-operations and read-only-mount/file-sync scenarios check,
// plus: files visible on both sides, an ungranted path refused with the
// policy's words (a client of another uid, $SBXD_MOUNT_GRANTED the prefix
// the config grants uid 65534), unmount.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { group, test } from './harness.mjs';
import { SbxdSandbox, SbxdFilesystem } from '../dist/mastra.js';
import { LocalFilesystem, MountError, Workspace } from '@mastra/core/workspace';

const DSOCK = process.env.SBXD_DOCKER_SOCKET;
const SKIP = DSOCK ? undefined : process.env.SBXD_DOCKER_SKIP || 'no Docker engine';
const GRANTED = process.env.SBXD_MOUNT_GRANTED;
const run = promisify(execFile);

group('mastra mounts (docker)', () => {
    let sb, ws, dir, rodir;
    const sh = async (cmd) => sb.executeCommand('sh', ['-c', cmd]);
    test('setup: a Workspace with a read-write and a read-only LocalFilesystem mount', async () => {
        dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbxd-mnt-'));
        rodir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbxd-mnt-ro-'));
        fs.chmodSync(dir, 0o777);
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
    test('mount() of a path the container was not created with, and of a non-local filesystem, say why', async () => {
        const late = await sb.mount(new LocalFilesystem({ basePath: dir }), '/late');
        assert.equal(late.success, false);
        assert.match(late.error, /not bound when the sandbox was created/);
        const other = await sb.mount(new SbxdFilesystem({ sandbox: sb.id, client: sb.client }), '/x');
        assert.equal(other.success, false);
        const again = await sb.mount(new LocalFilesystem({ basePath: dir }), '/data');
        assert.equal(again.success, true, 'mounting the same bind again is idempotent');
        const wrong = await sb.mount(new LocalFilesystem({ basePath: rodir }), '/data');
        assert.equal(wrong.success, false);
    });
    test('unmount of a live bind is a MountError and leaves it working', async () => {
        await assert.rejects(sb.unmount('/data'), MountError);
        assert.equal((await sh('cat /data/api.txt')).stdout, 'via the workspace');
    });
    test('unmount before start: the sandbox is created without the bind', async () => {
        const sb2 = new SbxdSandbox({ provider: 'docker', socketPath: DSOCK, id: `mnt2-${process.pid}` });
        const pending = await sb2.mount(new LocalFilesystem({ basePath: dir }), '/gone');
        assert.equal(pending.success, false);
        assert.equal(sb2.mounts.get('/gone').state, 'pending');
        await sb2.unmount('/gone');
        assert.equal(sb2.mounts.has('/gone'), false);
        await sb2._start();
        try {
            assert.notEqual((await sb2.executeCommand('sh', ['-c', 'ls /gone'])).exitCode, 0);
        } finally {
            await sb2._destroy();
        }
    });
    test('teardown', async () => {
        await sb._destroy();
        fs.rmSync(dir, { recursive: true, force: true });
        fs.rmSync(rodir, { recursive: true, force: true });
    });
}, { skip: SKIP });

group('mastra mounts (policy)', () => {
    test('as uid 65534: the granted path is mounted, the ungranted one refused with the policy\'s words', async () => {
        const other = fs.mkdtempSync(path.join(os.tmpdir(), 'sbxd-mnt-no-'));
        const ok = fs.mkdtempSync(path.join(GRANTED, 'ok-'));
        fs.chmodSync(ok, 0o777);
        fs.writeFileSync(path.join(ok, 'in.txt'), 'granted\n');
        try {
            const spec = JSON.stringify({ '/ok': [ok, false], '/no': [other, false] });
            const { stdout } = await run(
                process.execPath,
                [new URL('./mount_as_user.mjs', import.meta.url).pathname, `mntu-${process.pid}`, spec,
                    'cat /ok/in.txt; echo out > /ok/out.txt; ls /no >/dev/null 2>&1 || echo absent'],
                { uid: 65534, gid: 65534, env: { ...process.env, HOME: '/tmp' }, timeout: 60000 },
            );
            const r = JSON.parse(stdout.trim().split('\n').pop());
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
}, {
    skip: SKIP ?? (process.getuid?.() !== 0 ? 'needs root to run a client as uid 65534'
        : !GRANTED ? 'SBXD_MOUNT_GRANTED unset (tests/providers/tsclient.sh sets it)' : undefined),
});
