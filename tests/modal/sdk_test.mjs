// Drives the official Modal JS SDK (modal@0.11.1, the newest release; pinned
// in fake/package-lock.json) against the local fake in ./fake, to prove that
// the fake speaks the protocol the way today's SDK expects: the control plane
// and the TaskCommandRouter both over verified TLS (the fake's own CA, handed
// to grpc-js through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH; the control plane is
// on 127.0.0.2 because the SDK dials the router in plain h2c when the control
// plane is on localhost/127.0.0.1), V2 sandboxes (the SDK's default) and V1
// ones (MODAL_SANDBOX_V2=0). A second suite talks to the same fake with a plain gRPC
// client built from proto/modal/modal_api.proto, pinning down details that
// other (C) clients rely on. The fake is started once, on a free port, with a
// fresh state dir, and stopped at the end.
// Run with:  node --test tests/modal/sdk_test.mjs
// (or tests/modal/run_sdk_test.sh, which installs the npm packages first).

import { describe, it, before, after } from 'node:test';
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const fakeDir = path.join(here, 'fake');
const sdkEntry = path.join(fakeDir, 'node_modules', 'modal', 'dist', 'index.js');

const TOKEN_ID = 'ak-sbxd-fake-test';
const TOKEN_SECRET = 'as-sbxd-fake-secret';
const APP = 'sbxd-sdk-test';
const SB_NAME = 'sdk-test-sb';

let fake;          // child process
let fakeExit;      // promise resolved on exit
let fakeStderr = '';
let stateDir;
let grpcPort;
let controlPort;
let routerPort;
let caFile;
const HOST = '127.0.0.2';
const SDK_VERSION = '0.11.1';
const CLIENT = `modal-js/${SDK_VERSION}`;
let modal;         // the SDK module
let app;
let sb;            // first sandbox
let sbRoot;
let snapImage;
let sb2;           // sandbox restored from the snapshot

function startFake() {
  return new Promise((resolve, reject) => {
    stateDir = mkdtempSync(path.join(tmpdir(), 'sbxd-modal-fake-'));
    fake = spawn(process.execPath, [
      path.join(fakeDir, 'server.js'), '--port', '0', '--state', stateDir,
      '--token-id', TOKEN_ID, '--token-secret', TOKEN_SECRET, '--exit-on-stdin-eof',
      '--tls', '--host', HOST,
    ], { stdio: ['pipe', 'pipe', 'pipe'] });
    fakeExit = new Promise((r) => fake.once('exit', (code, signal) => r({ code, signal })));
    fake.stderr.setEncoding('utf8');
    fake.stderr.on('data', (d) => {
      fakeStderr += d;
      if (fakeStderr.length > 200000) fakeStderr = fakeStderr.slice(-100000);
    });
    let out = '';
    const timer = setTimeout(() => reject(new Error(`fake did not start:\n${fakeStderr}`)), 15000);
    fake.stdout.setEncoding('utf8');
    fake.stdout.on('data', (d) => {
      out += d;
      const l = out.match(/^LISTENING (\d+)\n/);
      const c = out.match(/\nCONTROL (\d+)\n/);
      const r = out.match(/\nROUTER (\d+)\n/);
      const a = out.match(/\nCA (.+)\n/);
      if (l && c && r && a) {
        clearTimeout(timer);
        grpcPort = Number(l[1]);
        controlPort = Number(c[1]);
        routerPort = Number(r[1]);
        caFile = a[1];
        resolve();
      }
    });
    fake.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`fake exited early (${code}):\n${fakeStderr}`));
    });
  });
}

async function ctl(method, route, body) {
  const res = await fetch(`http://127.0.0.1:${controlPort}${route}`, {
    method,
    headers: body ? { 'content-type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const json = await res.json();
  if (!res.ok) throw new Error(`control ${method} ${route}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

const calls = (method) => ctl('GET', `/calls${method ? `?method=${method}` : ''}`);
const lastSeq = async () => ((await calls()).at(-1) || { seq: 0 }).seq;
const callsSince = (since, method) => ctl('GET', `/calls?since=${since}${method ? `&method=${method}` : ''}`);
const sandboxState = async (id) => (await ctl('GET', '/sandboxes')).find((s) => s.sandbox_id === id);

async function run(sandbox, argv, params) {
  const p = await sandbox.exec(argv, params);
  const [stdout, stderr] = await Promise.all([p.stdout.readText(), p.stderr.readText()]);
  const code = await p.wait();
  return { stdout, stderr, code, p };
}

before(async () => {
  await startFake();
  process.env.MODAL_SERVER_URL = `https://${HOST}:${grpcPort}`;
  process.env.GRPC_DEFAULT_SSL_ROOTS_FILE_PATH = caFile;
  delete process.env.MODAL_SANDBOX_V2;
  process.env.MODAL_TOKEN_ID = TOKEN_ID;
  process.env.MODAL_TOKEN_SECRET = TOKEN_SECRET;
  process.env.MODAL_CONFIG_PATH = path.join(stateDir, 'no-such-modal.toml');
  delete process.env.MODAL_PROFILE;
  delete process.env.MODAL_ENVIRONMENT;
  delete process.env.MODAL_IMAGE_BUILDER_VERSION;
  assert.ok(existsSync(sdkEntry), `SDK not installed at ${sdkEntry} (run npm ci in ${fakeDir})`);
  const pkg = JSON.parse(readFileSync(path.join(fakeDir, 'node_modules', 'modal', 'package.json'), 'utf8'));
  assert.equal(pkg.version, SDK_VERSION);
  modal = await import(pathToFileURL(sdkEntry).href);
});

after(async () => {
  if (fake && fake.exitCode === null && fake.signalCode === null) {
    fake.kill('SIGTERM');
    const t = setTimeout(() => fake.kill('SIGKILL'), 5000);
    const r = await fakeExit;
    clearTimeout(t);
    assert.equal(r.code, 0, `fake exit: ${JSON.stringify(r)}\n${fakeStderr}`);
  }
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
});

// The same operations sbxd offers, on a V2 sandbox (the SDK's default) and
// on a V1 one (MODAL_SANDBOX_V2=0, what the SDK still uses for GPUs).
for (const v2 of [true, false]) {
  describe(`modal@${SDK_VERSION} SDK against the fake, ${v2 ? 'V2' : 'V1'} sandboxes`, () => {
    const NAME = `${SB_NAME}-${v2 ? 'v2' : 'v1'}`;
    let c;           // this suite's ModalClient
    let s;           // its sandbox
    let root;
    let snap;
    let s2;
    const idShape = v2 ? /^sbv2-/ : /^sb-[A-Za-z0-9]{22}$/;

    before(async () => {
      if (v2) delete process.env.MODAL_SANDBOX_V2;
      else process.env.MODAL_SANDBOX_V2 = '0';
      c = new modal.ModalClient();
      app = await c.apps.fromName(APP, { createIfMissing: true });
    });
    after(() => c && c.close());

    it('creates a sandbox with env, workdir, name, limits and an open port', async () => {
      const image = c.images.fromRegistry('alpine:3.21');
      s = await c.sandboxes.create(app, image, {
        env: { FOO: 'bar', SPACED: 'a b' }, workdir: '/workspace', name: NAME,
        timeoutMs: 120000, cpu: 0.5, memoryMiB: 256, unencryptedPorts: [18080],
      });
      assert.match(s.sandboxId, idShape);
      const st = await sandboxState(s.sandboxId);
      assert.equal(st.status, 'running');
      assert.equal(st.v2, v2);
      assert.equal(st.workdir, '/workspace');
      assert.equal(st.name, NAME);
      assert.equal(st.timeout_secs, 120);
      assert.deepEqual(st.env, { FOO: 'bar', SPACED: 'a b' });
      assert.equal(st.resources.milli_cpu, 500);
      assert.equal(st.resources.memory_mb, 256);
      assert.deepEqual(st.open_ports, [18080]);
      root = st.root;
    });

    it('exec echo hello goes through the router: stdout "hello\\n", exit 0', async () => {
      const since = await lastSeq();
      const r = await run(s, ['echo', 'hello']);
      assert.deepEqual([r.stdout, r.stderr, r.code], ['hello\n', '', 0]);
      const got = await callsSince(since);
      const start = got.find((x) => x.method === 'TaskExecStart');
      assert.ok(start, 'TaskExecStart was called');
      assert.equal(start.service, 'router');
      assert.equal(start.client, CLIENT);
      assert.match(start.request.exec_id, /^[0-9a-f-]{36}$/);
      assert.equal(start.request.stdout_config, 1);
      assert.ok(got.some((x) => x.method === 'TaskExecStdioRead'));
      assert.ok(got.some((x) => x.method === 'TaskExecWait'));
      assert.ok(!got.some((x) => x.method.startsWith('ContainerExec')));
      if (!v2) assert.ok(got.some((x) => x.method === 'TaskGetCommandRouterAccess'));
    });

    it('exec sees the sandbox env, the workdir and MODAL_SANDBOX_ROOT; its own env and workdir', async () => {
      let r = await run(s, ['sh', '-c', 'echo "$FOO|$SPACED|$MODAL_SANDBOX_ROOT"; pwd']);
      assert.equal(r.stdout, `bar|a b|${root}\n${path.join(root, 'workspace')}\n`);
      r = await run(s, ['sh', '-c', 'echo "$BAR"; pwd'], { env: { BAR: 'baz' }, workdir: '/tmp/x' });
      assert.equal(r.stdout, `baz\n${path.join(root, 'tmp', 'x')}\n`);
    });

    it('stdin by offset: write, write, close; cat echoes it', async () => {
      const since = await lastSeq();
      const p = await s.exec(['cat']);
      await p.stdin.writeText('ping\n');
      await p.stdin.writeText('pong\n');
      await p.stdin.close();
      assert.equal(await p.stdout.readText(), 'ping\npong\n');
      assert.equal(await p.wait(), 0);
      const w = await callsSince(since, 'TaskExecStdinWrite');
      assert.deepEqual(w.map((x) => [x.request.offset || 0, !!x.request.eof]), [[0, false], [5, false], [10, true]]);
    });

    it('binary output, exit codes, stderr apart from stdout, a signal is 128+n', async () => {
      let p = await s.exec(['printf', '\\000\\377abc'], { mode: 'binary' });
      assert.deepEqual([...await p.stdout.readBytes()], [0, 255, 97, 98, 99]);
      assert.equal(await p.wait(), 0);
      p = await s.exec(['sh', '-c', 'exit 3']);
      assert.equal(await p.wait(), 3);
      const r = await run(s, ['sh', '-c', 'echo out; echo err >&2; exit 1']);
      assert.deepEqual([r.stdout, r.stderr, r.code], ['out\n', 'err\n', 1]);
      p = await s.exec(['sh', '-c', 'kill -TERM $$']);
      assert.equal(await p.wait(), 143);
    });

    it('exec timeout kills the process and reports 124', async () => {
      const t0 = Date.now();
      const p = await s.exec(['sleep', '30'], { timeoutMs: 1000 });
      assert.equal(await p.wait(), 124);
      assert.ok(Date.now() - t0 < 10000);
    });

    it('a stdio stream dropped mid-output is resumed at its offset: no byte lost or repeated', async () => {
      await ctl('POST', '/fault', { drop_stdio_after_bytes: 7, fd: 1 });
      const since = await lastSeq();
      const r = await run(s, ['sh', '-c', 'for i in 1 2 3 4 5; do echo line$i; sleep 0.1; done']);
      assert.equal(r.stdout, 'line1\nline2\nline3\nline4\nline5\n');
      const reads = (await callsSince(since, 'TaskExecStdioRead')).filter((x) => (x.request.file_descriptor || 0) === 0);
      assert.ok(reads.length >= 2, 'expected a reconnect');
      assert.equal(reads[0].code, 14);
      assert.equal(reads[1].request.offset, 7);
    });

    it('a TaskExecStart whose reply was lost is retried with the same exec id and runs once', async () => {
      await ctl('POST', '/fault', { fail_after: { method: 'TaskExecStart', code: 14 } });
      const since = await lastSeq();
      const r = await run(s, ['sh', '-c', 'echo x >> runs; wc -l < runs']);
      assert.equal(r.stdout.trim(), '1');
      const starts = await callsSince(since, 'TaskExecStart');
      assert.equal(starts.length, 2);
      assert.equal(starts[0].request.exec_id, starts[1].request.exec_id);
      const ex = (await ctl('GET', '/execs')).find((e) => e.exec_id === starts[0].request.exec_id);
      assert.equal(ex.via, 'router');
    });

    it('a retry policy in grpc-status-details-bin is obeyed, with the throttle headers', async () => {
      const method = v2 ? 'SandboxTagsGetV2' : 'SandboxTagsGet';
      await ctl('POST', '/fault', { fail_next: { method, code: 8, message: 'slow down', retry_after_secs: 0.3 } });
      const since = await lastSeq();
      const t0 = Date.now();
      await s.getTags();
      assert.ok(Date.now() - t0 >= 250, 'waited as the server asked');
      const got = await callsSince(since, method);
      assert.deepEqual(got.map((x) => x.code), [8, 0]);
      assert.equal(got[0].metadata['x-throttle-retry-attempt'], '0');
      assert.equal(got[1].metadata['x-throttle-retry-attempt'], '1');
      assert.ok(got[1].metadata['x-throttle-retry-delay']);
      assert.equal(got[0].metadata['x-modal-host'], HOST);
    });

    it('tags, tunnels', async () => {
      await s.setTags({ owner: 'sbxd', kind: 'test' });
      assert.deepEqual(await s.getTags(), { owner: 'sbxd', kind: 'test' });
      const t = await s.tunnels();
      // The fake's own listeners (workspace.js); sdk_ws_test.mjs goes through them.
      assert.equal(t[18080].unencryptedHost, '127.0.0.1');
      assert.ok(t[18080].unencryptedPort > 0 && t[18080].port > 0);
    });

    it('files through the filesystem tool: write, read, stat, list, mkdir, remove', async () => {
      const fsys = s.filesystem;
      await fsys.writeText('hi there', '/workspace/d/hello.txt');
      assert.equal(readFileSync(path.join(root, 'workspace', 'd', 'hello.txt'), 'utf8'), 'hi there');
      assert.equal(await fsys.readText('/workspace/d/hello.txt'), 'hi there');
      const st = await fsys.stat('/workspace/d/hello.txt');
      assert.deepEqual([st.type, st.size, st.name], ['file', 8, 'hello.txt']);
      await fsys.makeDirectory('/workspace/d/sub');
      const names = (await fsys.listFiles('/workspace/d')).map((e) => `${e.name}:${e.type}`);
      assert.deepEqual(names, ['hello.txt:file', 'sub:directory']);
      await fsys.remove('/workspace/d', { recursive: true });
      await assert.rejects(fsys.stat('/workspace/d'), (e) => /No such file/.test(e.message));
      const used = await ctl('GET', '/execs');
      assert.ok(used.some((e) => e.command[0] === '/__modal/.bin/modal-sandbox-fs-tools'));
    });

    it('snapshots the filesystem on the router (TaskSnapshotFilesystem, TTL)', async () => {
      const r = await run(s, ['sh', '-c', 'echo snapshot-data > data.txt']);
      assert.equal(r.code, 0);
      const since = await lastSeq();
      snap = await s.snapshotFilesystem();
      assert.match(snap.imageId, /^im-/);
      const got = await callsSince(since, 'TaskSnapshotFilesystem');
      assert.equal(got.length, 1);
      assert.match(got[0].request.snapshot_id, /^[0-9a-f-]{36}$/);
      const im = (await ctl('GET', '/images')).find((x) => x.image_id === snap.imageId);
      assert.equal(im.via, 'TaskSnapshotFilesystem');
      assert.ok(im.ttl_seconds > 0);
    });

    // modalmisc (issue 20): what sbxd's fs.watch and sandbox.snapshot {ttl} use.
    it('filesystem.watch: the tool\'s Watch streams Create/Modify/Remove; closing the iterator ends it', async () => {
      await run(s, ['mkdir', '-p', 'wdir']);
      const since = await lastSeq();
      const it = s.filesystem.watch('/workspace/wdir', { recursive: true })[Symbol.asyncIterator]();
      const seen = [];
      const want = ['Create', 'Modify', 'Remove'];
      const next = it.next();
      await new Promise((r) => setTimeout(r, 1000)); // the tool says nothing when it is ready
      await run(s, ['sh', '-c', 'echo a > wdir/f; sleep 0.2; echo b >> wdir/f; sleep 0.2; rm wdir/f']);
      for (let ev = await next; !ev.done; ev = await it.next()) {
        seen.push(ev.value.eventType);
        assert.deepEqual(ev.value.paths, ['/workspace/wdir/f']);
        if (want.every((k) => seen.includes(k))) break;
      }
      await it.return();
      assert.ok(want.every((k) => seen.includes(k)), `events: ${seen}`);
      const start = (await callsSince(since, 'TaskExecStart'))
        .find((x) => x.request.command_args[0] === '/__modal/.bin/modal-sandbox-fs-tools');
      const cmd = JSON.parse(start.request.command_args[1]);
      assert.deepEqual([cmd.Watch.path, cmd.Watch.recursive], ['/workspace/wdir', true]);
      const eof = await callsSince(since, 'TaskExecStdinWrite');
      assert.ok(eof.some((x) => x.request.exec_id === start.request.exec_id && x.request.eof));
      let ex;
      for (let i = 0; i < 50; i++) {
        ex = (await ctl('GET', '/execs')).find((e) => e.exec_id === start.request.exec_id);
        if (ex.exit_code !== null) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(ex.exit_code, 0);
    });

    it('snapshotFilesystem({ttlMs}) sends ttl_seconds; ttlMs null is -1 (never expires)', async () => {
      const since = await lastSeq();
      const a = await s.snapshotFilesystem({ ttlMs: 60000 });
      const b = await s.snapshotFilesystem({ ttlMs: null });
      const got = await callsSince(since, 'TaskSnapshotFilesystem');
      assert.deepEqual(got.map((x) => Number(x.request.ttl_seconds)), [60, -1]);
      const ims = await ctl('GET', '/images');
      assert.equal(ims.find((x) => x.image_id === a.imageId).ttl_seconds, 60);
      const never = ims.find((x) => x.image_id === b.imageId);
      assert.deepEqual([never.ttl_seconds, never.expires_at], [-1, null]);
    });

    it('terminate: the sandbox ends, wait() gives 137, a running exec is killed (signal 9)', async () => {
      const p = await s.exec(['sleep', '30']);
      await s.terminate();
      assert.equal(await s.wait(), 137);
      assert.equal(await p.wait(), 137);
      assert.equal((await sandboxState(s.sandboxId)).status, 'terminated');
    });

    it('restores from the snapshot; the name is taken; fromName finds it', async () => {
      s2 = await c.sandboxes.create(app, snap, { name: NAME, workdir: '/workspace' });
      assert.match(s2.sandboxId, idShape);
      const r = await run(s2, ['cat', 'data.txt']);
      assert.equal(r.stdout, 'snapshot-data\n');
      await assert.rejects(c.sandboxes.create(app, snap, { name: NAME }), modal.AlreadyExistsError);
      const again = await c.sandboxes.fromName(APP, NAME);
      assert.equal(again.sandboxId, s2.sandboxId);
      assert.equal((await run(again, ['echo', 'reconnected'])).stdout, 'reconnected\n');
      await assert.rejects(c.sandboxes.fromName(APP, 'no-such-sandbox'), modal.NotFoundError);
      assert.equal(await s2.poll(), null);
      await s2.terminate();
      assert.equal(await s2.wait(), 137);
    });

    it('images.fromId finds the snapshot; images.delete deletes it', async () => {
      const im = await c.images.fromId(snap.imageId);
      assert.equal(im.imageId, snap.imageId);
      await c.images.delete(snap.imageId);
      await assert.rejects(c.images.fromId(snap.imageId), modal.NotFoundError);
    });

    it('a sandbox whose timeout expires ends with TIMEOUT (124)', async () => {
      const t = await c.sandboxes.create(app, c.images.fromRegistry('alpine:3.21'), { timeoutMs: 1000 });
      const t0 = Date.now();
      assert.equal(await t.wait(), 124);
      assert.ok(Date.now() - t0 < 10000);
    });

    it('fault kill_sandbox: the sandbox dies behind the client\'s back', async () => {
      const k = await c.sandboxes.create(app, c.images.fromRegistry('alpine:3.21'), {});
      assert.equal((await run(k, ['echo', 'alive'])).stdout, 'alive\n');
      const p = await k.exec(['sleep', '30']);
      await ctl('POST', '/fault', { kill_sandbox: k.sandboxId });
      assert.equal(await k.poll(), 137);
      await assert.rejects(p.wait(), (e) => e.code === 5);  // NOT_FOUND
      const fresh = await c.sandboxes.fromId(k.sandboxId);
      await assert.rejects(fresh.exec(['true']), /killed|finished|completed/);
    });
  });
}

describe(`modal@${SDK_VERSION}: what the SDK sent`, () => {
  it('the fake logged the RPCs per client: the SDK used the router, never ContainerExec', async () => {
    const per = await ctl('GET', '/clients');
    const mine = per[CLIENT];
    assert.ok(mine, `no calls logged for ${CLIENT}: ${Object.keys(per)}`);
    for (const m of ['TaskExecStart', 'TaskExecStdioRead', 'TaskExecStdinWrite', 'TaskExecWait',
      'TaskSnapshotFilesystem', 'TaskExecStdinWriteStream']) {
      assert.ok(mine.router[m] > 0, `${m} not used`);
    }
    for (const m of ['SandboxCreateV2', 'SandboxCreate', 'TaskGetCommandRouterAccess', 'ImageDelete']) {
      assert.ok(mine.control[m] > 0, `${m} not used`);
    }
    for (const m of ['ContainerExec', 'ContainerExecGetOutput', 'ContainerExecPutInput', 'ContainerExecWait',
      'SandboxSnapshotFs']) {
      assert.equal(mine.control[m], undefined, `${m} was used`);
    }
  });

  it('wrong token secret gives UNAUTHENTICATED; auth headers were sent on every control-plane call', async () => {
    const bad = new modal.ModalClient({ tokenId: TOKEN_ID, tokenSecret: 'as-wrong' });
    try {
      await assert.rejects(bad.cpClient.authTokenGet({}), (e) => e.code === 16 && /invalid/i.test(e.message));
    } finally {
      bad.close();
    }
    const all = await ctl('GET', `/calls?client=${CLIENT}`);
    const good = all.filter((x) => x.service === 'control' && x.method !== 'AuthTokenGet' && x.code !== 16);
    assert.ok(good.length > 20);
    for (const x of good) {
      assert.equal(x.metadata['has-auth-token'], true, `${x.method} without x-modal-auth-token`);
      assert.equal(x.metadata['x-modal-token-id'], TOKEN_ID);
      assert.equal(x.metadata['x-modal-client-type'], '8');
    }
    for (const x of all.filter((y) => y.service === 'router')) {
      assert.equal(x.metadata['has-router-token'], true, `${x.method} without its bearer token`);
    }
  });
});

// Lower-level checks of the fake with a plain gRPC client built from the same
// cut-down proto the C provider uses. These pin down behaviour a C client
// relies on and the SDK does not exercise.
describe('fake control plane: protocol details for other clients', () => {
  let raw;
  let md;
  let appId;
  let imageId;
  let taskId;
  let sandboxId;
  const unary = (m, r, meta = md) => new Promise((res, rej) =>
    raw[m](r, meta, (e, v) => (e ? rej(e) : res(v))));
  const stream = (m, r) => new Promise((res) => {
    const msgs = [];
    const st = raw[m](r, md);
    st.on('data', (d) => msgs.push(d));
    st.on('error', () => {});
    st.on('status', (x) => res({ msgs, code: x.code, details: x.details }));
  });
  const text = (msgs) => msgs.flatMap((b) => b.items || [])
    .map((i) => Buffer.from(i.message_bytes || i.message || '').toString()).join('');

  before(async () => {
    const req = createRequire(path.join(fakeDir, 'package.json'));
    const grpc = req('@grpc/grpc-js');
    const loader = req('@grpc/proto-loader');
    const def = loader.loadSync(path.join(here, '..', '..', 'proto', 'modal', 'modal_api.proto'),
      { keepCase: true, longs: Number, enums: Number, defaults: false, oneofs: true });
    const Client = grpc.makeGenericClientConstructor(def['modal.client.ModalClient'], 'ModalClient');
    raw = new Client(`${HOST}:${grpcPort}`, grpc.credentials.createSsl(readFileSync(caFile)));
    md = new grpc.Metadata();
    md.set('x-modal-token-id', TOKEN_ID);
    md.set('x-modal-token-secret', TOKEN_SECRET);
  });

  after(() => raw && raw.close());

  it('needs x-modal-auth-token; AuthTokenGet returns a JWT with exp about now+3600', async () => {
    await assert.rejects(unary('AppGetOrCreate', { app_name: 'raw' }), (e) => e.code === 16);
    const { token } = await unary('AuthTokenGet', {});
    const payload = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString());
    assert.ok(Math.abs(payload.exp - Date.now() / 1000 - 3600) < 60);
    md.set('x-modal-auth-token', token);
  });

  it('app lookup without create is NOT_FOUND; image build streams logs, then the result', async () => {
    await assert.rejects(unary('AppGetOrCreate', { app_name: 'raw-app' }), (e) => e.code === 5);
    appId = (await unary('AppGetOrCreate', { app_name: 'raw-app', object_creation_type: 1 })).app_id;
    const ig = await unary('ImageGetOrCreate', { app_id: appId, image: { dockerfile_commands: ['FROM debian:12'] } });
    assert.equal(ig.result, undefined);
    imageId = ig.image_id;
    const j = await stream('ImageJoinStreaming', { image_id: imageId, timeout: 55 });
    assert.equal(j.code, 0);
    assert.ok(j.msgs.filter((m) => m.task_logs && m.task_logs.length).length >= 2);
    assert.equal(j.msgs.at(-1).result.status, 1);
  });

  it('entrypoint runs; its output is in SandboxGetLogs (one batch, eof); its exit ends the sandbox', async () => {
    const { sandbox_id } = await unary('SandboxCreate', {
      app_id: appId, definition: { image_id: imageId, entrypoint_args: ['sh', '-c', 'read x; echo "ep $x"; exit 4'] },
    });
    await unary('SandboxStdinWrite', { sandbox_id, index: 1, input: Buffer.from('in\n') });
    await unary('SandboxStdinWrite', { sandbox_id, index: 2, eof: true });
    const w = await unary('SandboxWait', { sandbox_id, timeout: 10 });
    assert.deepEqual([w.result.status, w.result.exitcode], [2, 4]);
    const logs = await stream('SandboxGetLogs', { sandbox_id, file_descriptor: 1, timeout: 55, last_entry_id: '0-0' });
    assert.equal(logs.code, 0);
    assert.equal(logs.msgs.length, 1);
    assert.equal(logs.msgs[0].eof, true);
    assert.equal(logs.msgs[0].items[0].data, 'ep in\n');
    const t = await unary('SandboxGetTaskId', { sandbox_id });
    assert.ok(t.task_id && t.task_result && t.task_result.status === 2);
  });

  it('long polls end empty: GetOutput OK without exit_code, Wait completed=false', async () => {
    sandboxId = (await unary('SandboxCreate', { app_id: appId, definition: { image_id: imageId, workdir: '/w' } })).sandbox_id;
    taskId = (await unary('SandboxGetTaskId', { sandbox_id: sandboxId })).task_id;
    const { exec_id } = await unary('ContainerExec', { task_id: taskId, command: ['sh', '-c', 'read x; echo "got $x"'] });
    const o = await stream('ContainerExecGetOutput', { exec_id, timeout: 0.2, file_descriptor: 1, get_raw_bytes: true });
    assert.deepEqual([o.code, o.msgs.length], [0, 0]);
    assert.deepEqual(await unary('ContainerExecWait', { exec_id, timeout: 0.2 }), { completed: false });
    // stdin messages are applied in message_index order; a repeated index is ignored
    await unary('ContainerExecPutInput', { exec_id, input: { message_index: 2, eof: true } });
    await unary('ContainerExecPutInput', { exec_id, input: { message_index: 1, message: Buffer.from('hi\n') } });
    await unary('ContainerExecPutInput', { exec_id, input: { message_index: 1, message: Buffer.from('dup\n') } });
    const w = await unary('ContainerExecWait', { exec_id, timeout: 10 });
    assert.deepEqual([w.exit_code, w.completed], [0, true]);
    const all = await stream('ContainerExecGetOutput', { exec_id, timeout: 10, file_descriptor: 1, get_raw_bytes: true });
    assert.equal(text(all.msgs), 'got hi\n');
    assert.deepEqual(all.msgs.map((b) => b.batch_index), [1, 2]);
    assert.equal(all.msgs[1].exit_code, 0, 'exit_code 0 must be present on the last batch');
    // asking past the end still gets the final batch; get_raw_bytes=false fills `message`
    const past = await stream('ContainerExecGetOutput', { exec_id, timeout: 10, file_descriptor: 1, last_batch_index: 7 });
    assert.deepEqual(past.msgs.map((b) => [b.batch_index, b.exit_code]), [[2, 0]]);
    const txt = await stream('ContainerExecGetOutput', { exec_id, timeout: 10, file_descriptor: 1 });
    assert.equal(txt.msgs[0].items[0].message, 'got hi\n');
  });

  it('exit codes: signal -> 128+n, missing command -> 127, stderr_output=STDOUT merges', async () => {
    let { exec_id } = await unary('ContainerExec', { task_id: taskId, command: ['sh', '-c', 'kill -TERM $$'] });
    assert.equal((await unary('ContainerExecWait', { exec_id, timeout: 10 })).exit_code, 143);
    ({ exec_id } = await unary('ContainerExec', { task_id: taskId, command: ['no-such-command-sbxd'] }));
    assert.equal((await unary('ContainerExecWait', { exec_id, timeout: 10 })).exit_code, 127);
    ({ exec_id } = await unary('ContainerExec', { task_id: taskId, command: ['sh', '-c', 'echo a; echo b >&2'], stderr_output: 3 }));
    const o = await stream('ContainerExecGetOutput', { exec_id, timeout: 10, file_descriptor: 1, get_raw_bytes: true });
    assert.equal(text(o.msgs), 'a\nb\n');
  });

  it('fault break_output_after_batches 0 fails the stream at once with UNAVAILABLE', async () => {
    await ctl('POST', '/fault', { break_output_after_batches: 0, fd: 1 });
    const { exec_id } = await unary('ContainerExec', { task_id: taskId, command: ['echo', 'x'] });
    const o = await stream('ContainerExecGetOutput', { exec_id, timeout: 10, file_descriptor: 1, get_raw_bytes: true });
    assert.deepEqual([o.code, o.msgs.length], [14, 0]);
    const again = await stream('ContainerExecGetOutput', { exec_id, timeout: 10, file_descriptor: 1, get_raw_bytes: true });
    assert.equal(text(again.msgs), 'x\n');
  });

  it('fault kill_sandbox: open streams and waits get NOT_FOUND, new execs NOT_FOUND', async () => {
    const { exec_id } = await unary('ContainerExec', { task_id: taskId, command: ['sleep', '30'] });
    const out = stream('ContainerExecGetOutput', { exec_id, timeout: 30, file_descriptor: 1, get_raw_bytes: true });
    const wait = unary('ContainerExecWait', { exec_id, timeout: 30 }).then(() => 0, (e) => e.code);
    await new Promise((r) => setTimeout(r, 100));
    await ctl('POST', '/fault', { kill_sandbox: sandboxId });
    assert.equal((await out).code, 5);
    assert.equal(await wait, 5);
    await assert.rejects(unary('ContainerExec', { task_id: taskId, command: ['true'] }), (e) => e.code === 5);
    const r = await unary('SandboxWait', { sandbox_id: sandboxId, timeout: 1 });
    assert.equal(r.result.status, 3);
  });

  it('unknown RPCs are UNIMPLEMENTED; bad control requests are rejected', async () => {
    const code = await new Promise((res) => raw.makeUnaryRequest('/modal.client.ModalClient/FunctionGet',
      () => Buffer.alloc(0), (b) => b, {}, md, (e) => res(e && e.code)));
    assert.equal(code, 12);
    await assert.rejects(ctl('POST', '/fault', { no_such_fault: 1 }), /400/);
    await assert.rejects(ctl('POST', '/fault', { kill_sandbox: 'sb-nope' }), /404/);
  });
});
