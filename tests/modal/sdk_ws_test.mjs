// Drives the official Modal JS SDK (modal@0.11.1, pinned in fake/package-lock.json)
// through what sbxd's issue 18 uses on Modal, against the local fake
// (fake/workspace.js), to show the fake answers them as the SDK expects:
// tunnels of ports declared at create (encryptedPorts / unencryptedPorts, then
// sb.tunnels(), fetched through), exec on a terminal (pty: true), the
// outbound allow lists (NetworkAccess), and SandboxGetResourceUsage through
// the SDK's own client. Same setup as sdk_test.mjs: TLS on both connections
// with the fake's CA, the control plane on 127.0.0.2.
// Run with: node --test tests/modal/sdk_ws_test.mjs (or run_sdk_test.sh).

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import https from 'node:https';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const fakeDir = path.join(here, 'fake');
const HOST = '127.0.0.2';
const CLIENT = 'modal-js/0.11.1';
let fake;
let fakeExit;
let stateDir;
let controlPort;
let caFile;
let modal;
let c;
let app;

function startFake() {
  stateDir = mkdtempSync(path.join(tmpdir(), 'sbxd-modal-ws-'));
  fake = spawn(process.execPath, [path.join(fakeDir, 'server.js'), '--port', '0', '--state', stateDir,
    '--token-id', 'ak-ws', '--token-secret', 'as-ws', '--exit-on-stdin-eof', '--tls', '--host', HOST],
  { stdio: ['pipe', 'pipe', 'inherit'] });
  fakeExit = new Promise((r) => fake.once('exit', (code) => r(code)));
  return new Promise((resolve, reject) => {
    let out = '';
    fake.stdout.setEncoding('utf8');
    fake.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/^LISTENING (\d+)\nCONTROL (\d+)\nROUTER \d+\nCA (.+)\n/);
      if (m) resolve([Number(m[1]), Number(m[2]), m[3]]);
    });
    fake.once('exit', () => reject(new Error('the fake exited')));
  });
}

const ctl = async (route) => (await fetch(`http://127.0.0.1:${controlPort}${route}`)).json();
const calls = (method) => ctl(`/calls?method=${method}`);

// A port nothing listens on now (the sandbox's server takes it next).
const freePort = () => new Promise((resolve) => {
  const s = net.createServer().listen(0, '127.0.0.1', () => {
    const { port } = s.address();
    s.close(() => resolve(port));
  });
});

const get = (mod, url, opts = {}) => new Promise((resolve, reject) => {
  mod.get(url, opts, (res) => {
    let body = '';
    res.setEncoding('utf8');
    res.on('data', (d) => { body += d; });
    res.on('end', () => resolve(body));
  }).on('error', reject);
});

// fn() until it stops throwing (the server in the sandbox is starting).
async function retry(fn) {
  for (let i = 0; ; i++) {
    try {
      return await fn();
    } catch (e) {
      if (i > 100) throw e;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

before(async () => {
  let grpcPort;
  [grpcPort, controlPort, caFile] = await startFake();
  Object.assign(process.env, {
    MODAL_SERVER_URL: `https://${HOST}:${grpcPort}`, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH: caFile,
    MODAL_TOKEN_ID: 'ak-ws', MODAL_TOKEN_SECRET: 'as-ws',
    MODAL_CONFIG_PATH: path.join(stateDir, 'none.toml'),
  });
  delete process.env.MODAL_SANDBOX_V2;
  modal = await import(pathToFileURL(path.join(fakeDir, 'node_modules', 'modal', 'dist', 'index.js')).href);
  c = new modal.ModalClient();
  app = await c.apps.fromName('sbxd-ws-test', { createIfMissing: true });
});

after(async () => {
  if (c) c.close();
  fake.kill('SIGTERM');
  assert.equal(await fakeExit, 0);
  rmSync(stateDir, { recursive: true, force: true });
});

describe('modal@0.11.1: tunnels, pty, network access, resource usage', () => {
  let s;
  let tls;
  let tcp;

  it('tunnels of declared ports reach a server in the sandbox (TLS and plain TCP)', async () => {
    [tls, tcp] = [await freePort(), await freePort()];
    s = await c.sandboxes.create(app, c.images.fromRegistry('alpine:3.21'), {
      encryptedPorts: [tls], unencryptedPorts: [tcp], timeoutMs: 120000, cpu: 0.5, memoryMiB: 256,
    });
    const server = `const h=require('http');for(const p of [${tls},${tcp}])` +
      `h.createServer((q,r)=>r.end('port '+p)).listen(p,'127.0.0.1',()=>console.log('up'))`;
    await s.exec([process.execPath, '-e', server]);
    const t = await s.tunnels();
    assert.deepEqual(Object.keys(t).map(Number).sort(), [tls, tcp].sort());
    assert.match(t[tls].url, /^https:\/\/127\.0\.0\.1:\d+$/);
    const [h, port] = t[tcp].tcpSocket;
    assert.equal(await retry(() => get(http, `http://${h}:${port}/`)), `port ${tcp}`);
    assert.equal(await get(https, `${t[tls].url}/`, { ca: readFileSync(caFile) }), `port ${tls}`);
    assert.throws(() => t[tls].tcpSocket, /not configured for unencrypted/);
    const got = await calls('SandboxGetTunnelsV2');
    assert.ok(got.length >= 1 && got.every((r) => r.client === CLIENT && r.code === 0));
  });

  it('exec with pty: a terminal of the SDK\'s size, stdout only', async () => {
    const p = await s.exec(['sh', '-c', 'tty; stty size; echo err >&2'], { pty: true });
    const [out, err] = await Promise.all([p.stdout.readText(), p.stderr.readText()]);
    assert.equal(await p.wait(), 0);
    assert.match(out, /^\/dev\/pts\/\d+\r\n24 80\r\nerr\r\n$/);
    assert.equal(err, '');
    const start = (await calls('TaskExecStart')).at(-1);
    assert.equal(start.client, CLIENT);
    assert.deepEqual([start.request.pty_info.enabled, start.request.pty_info.winsz_cols,
      start.request.pty_info.winsz_rows, start.request.pty_info.pty_type], [true, 80, 24, 2]);
  });

  it('outbound allow lists reach the fake as NetworkAccess; a bad CIDR is refused by it', async () => {
    const a = await c.sandboxes.create(app, c.images.fromRegistry('alpine:3.21'), {
      outboundCidrAllowlist: ['203.0.113.0/24'], outboundDomainAllowlist: ['pypi.org', '*.github.com'],
    });
    const st = (await ctl('/sandboxes')).find((x) => x.sandbox_id === a.sandboxId);
    assert.deepEqual(st.network_access, {
      network_access_type: 3, allowed_cidrs: ['203.0.113.0/24'], allowed_domains: ['pypi.org', '*.github.com'],
    });
    await a.terminate();
    await assert.rejects(c.sandboxes.create(app, c.images.fromRegistry('alpine:3.21'), {
      outboundCidrAllowlist: ['203.0.113.0/33'],
    }), /Invalid CIDR/);
  });

  it('SandboxGetResourceUsage through the SDK\'s client: billed CPU and memory grow', async () => {
    const u1 = await c.cpClient.sandboxGetResourceUsage({ sandboxId: s.sandboxId });
    await new Promise((r) => setTimeout(r, 300));
    const u2 = await c.cpClient.sandboxGetResourceUsage({ sandboxId: s.sandboxId });
    assert.ok(u1.cpuCoreNanosecs > 0 && u2.cpuCoreNanosecs > u1.cpuCoreNanosecs);
    // 0.5 cores and 0.25 GiB asked for: memory GiB-ns is half the core-ns.
    assert.ok(Math.abs(u2.memGibNanosecs / u2.cpuCoreNanosecs - 0.5) < 0.01);
    await s.terminate();
  });
});
