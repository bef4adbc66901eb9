#!/usr/bin/env node
// Fake Modal control plane for sbxd tests.
//
// It speaks the gRPC sandbox API of modal.client.ModalClient, as used by the
// official JS SDK modal@0.5.6 (see ../../../../shared/modal-protocol.md), and
// loads the same cut-down proto that the C provider is generated from
// (proto/modal/modal_api.proto), so the two always agree on the wire format.
// "Sandboxes" are plain folders, and "exec" runs real local processes.
// There is NO isolation: this is a test double, not a sandbox.
//
// Usage:
//   node server.js --port 0 --state DIR [--token-id ID --token-secret SECRET]
//        [--control-port 0] [--token-ttl 3600] [--build-delay-ms 100]
//        [--max-output-bytes 67108864] [--exit-on-stdin-eof] [--verbose]
//
// Once ready it prints to stdout, in this order:
//   LISTENING <grpc port>     plaintext HTTP/2 (h2c) gRPC on 127.0.0.1
//   CONTROL <http port>       HTTP/1.1 JSON control endpoint on 127.0.0.1
// Diagnostics go to stderr. SIGTERM/SIGINT kill every child process group and
// exit 0. With --exit-on-stdin-eof the server also shuts down when its stdin
// reaches EOF, so it cannot outlive a test harness that holds the pipe.
//
// Files:
//   DIR/sandboxes/<sandbox_id>/root   the sandbox's "filesystem"
//   DIR/images/<image_id>/            snapshot contents (SandboxSnapshotFs)
//   DIR/images/<image_id>.json        snapshot metadata (reloaded at start)
//   DIR/auth.key                      key that signs auth tokens (so tokens
//                                     survive a restart on the same DIR)
//
// Path mapping: an absolute path P inside the sandbox is the host path
// <root>P. Sandbox/exec `workdir` is mapped like that and created if missing;
// a relative exec workdir is taken relative to the sandbox workdir. Commands
// themselves see the host filesystem (no chroot), so tests should use relative
// paths or $MODAL_SANDBOX_ROOT.
//
// Environment of exec'd processes (and of the sandbox entrypoint), later
// entries win: PATH (the fake's PATH), HOME=<root>/root, LANG=C.UTF-8,
// [TERM from pty_info], sandbox secrets (env of SandboxCreate), exec secrets,
// then MODAL_SANDBOX_ROOT=<root>, MODAL_SANDBOX_ID, MODAL_TASK_ID,
// MODAL_EXEC_ID (exec only). Nothing else from the fake's environment leaks in.
//
// Exit codes (ContainerExecWait.exit_code and the final exit_code batch of
// ContainerExecGetOutput carry the same value):
//   normal exit             -> the process's exit status
//   killed by signal S      -> 128 + S (so SandboxTerminate's SIGKILL -> 137)
//   exec timeout_secs hit   -> the whole process group gets SIGKILL and the
//                              exit code is 124 (like coreutils timeout(1), and
//                              like the SDK's mapping of a sandbox TIMEOUT to
//                              124). Real Modal kills the exec on timeout too;
//                              its exact reported code is not documented.
//   command not found       -> ContainerExec still succeeds (as in a real
//                              container, the failure happens in the exec);
//                              a message goes to stderr, exit code 127
//                              (126 if not executable).
//
// Sandbox results (SandboxWait.result / SandboxGetTaskId.task_result):
//   SandboxTerminate         -> status 3 TERMINATED (SDK: 137)
//   timeout_secs expired     -> status 4 TIMEOUT    (SDK: 124); 0 means 300 s
//   entrypoint exited        -> status 1 SUCCESS (exit 0) / 2 FAILURE, exitcode
//   fault kill_sandbox       -> status 3 TERMINATED with an exception text;
//                               exec RPCs about it then answer NOT_FOUND
// When a sandbox ends, all its processes (entrypoint + execs) are SIGKILLed.
// The entrypoint (default ["sleep","48h"]) is really run, with cwd = workdir.
//
// Long polls: `timeout` fields are float seconds, capped at 300 s. A timeout of
// 0 (or absent) means "answer at once". The SDK always sends 55 (10 for
// SandboxWait).
//
// Control endpoint (HTTP/1.1, JSON bodies, all on 127.0.0.1:<CONTROL port>):
//   GET    /health                    {"ok":true}
//   POST   /fault  {...}              arm faults; keys (any combination):
//     "break_output_after_batches": N   next ContainerExecGetOutput stream ends
//          with UNAVAILABLE (14) right after it has sent N batches (N=0: at
//          once); if its long-poll expires first it also ends with 14; if it
//          delivers the final exit_code batch first, it ends normally.
//          Extra keys: "fd": 1|2 (only streams for that fd; recommended, since
//          the SDK opens fd 1 and fd 2 together), "exec_id", "streams": K
//          (how many streams to break, default 1).
//     "kill_sandbox": "<sandbox_id>"    sandbox dies behind the client's back
//     "fail_next": {"method": "ContainerExec", "code": 5, "message": "...",
//                   "times": 1}         next call(s) of that RPC fail with code
//     "hold_next": {"method": "SandboxSnapshotFs", "ms": 30000}  the next
//          unary call of that RPC waits ms before it is handled, even if its
//          sandbox dies meanwhile (a server slow to notice)
//     "outage_after": "ContainerExec"   the next call of that RPC is carried
//          out, and then an outage of "seconds" (default 2) starts before the
//          reply leaves: the client sees its connection reset and cannot know
//          whether the call was done (it was)
//   GET    /faults                    armed faults
//   DELETE /faults                    disarm all
//   POST   /outage {"seconds": S, "mode": "refuse"|"reset"}
//          a control-plane outage of S seconds: every open connection to the
//          gRPC port is reset at once, and until it ends new connections are
//          refused ("refuse", the default: the port is closed, so a client
//          knows nothing was sent) or accepted and reset at once ("reset": a
//          client cannot tell whether a request got through; none does).
//          Processes keep running and their output is kept meanwhile.
//   GET    /outage                    {active, mode, ends_in_ms, outages, resets}
//   DELETE /outage                    end the outage now
//   GET    /calls[?method=M&since=SEQ]  calls received: [{seq, method, time
//          (ms since epoch), metadata:{...}, request:{...}, code, error,
//          duration_ms}]; bytes fields appear as {"bytes_len", "base64"}
//   DELETE /calls                     forget recorded calls
//   GET    /sandboxes                 sandbox state (see sandboxInfo())
//   GET    /execs                     exec state (see execInfo())
//   GET    /images                    images
//   POST   /secret {"name", "environment"?, "env": {...}}  create a named secret
//
// RPCs that are not implemented answer UNIMPLEMENTED (12) through grpc-js.

'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const http = require('http');
const net = require('net');
const crypto = require('crypto');
const { spawn } = require('child_process');
const { EventEmitter } = require('events');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

function parseArgs(argv) {
  const o = {
    port: 0,
    controlPort: 0,
    state: null,
    tokenId: null,
    tokenSecret: null,
    tokenTtl: 3600,
    buildDelayMs: 100,
    maxOutputBytes: 64 * 1024 * 1024,
    exitOnStdinEof: false,
    verbose: false,
    proto: path.resolve(__dirname, '../../../proto/modal/modal_api.proto'),
  };
  const need = (i) => {
    if (i + 1 >= argv.length) usage(`missing value for ${argv[i]}`);
    return argv[i + 1];
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    switch (a) {
      case '--port': o.port = Number(need(i)); i++; break;
      case '--control-port': o.controlPort = Number(need(i)); i++; break;
      case '--state': o.state = need(i); i++; break;
      case '--token-id': o.tokenId = need(i); i++; break;
      case '--token-secret': o.tokenSecret = need(i); i++; break;
      case '--token-ttl': o.tokenTtl = Number(need(i)); i++; break;
      case '--build-delay-ms': o.buildDelayMs = Number(need(i)); i++; break;
      case '--max-output-bytes': o.maxOutputBytes = Number(need(i)); i++; break;
      case '--proto': o.proto = path.resolve(need(i)); i++; break;
      case '--exit-on-stdin-eof': o.exitOnStdinEof = true; break;
      case '--verbose': case '-v': o.verbose = true; break;
      case '--help': case '-h': usage(null); break;
      default: usage(`unknown argument ${a}`);
    }
  }
  if (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535) usage('bad --port');
  if (!Number.isInteger(o.controlPort) || o.controlPort < 0 || o.controlPort > 65535) usage('bad --control-port');
  if ((o.tokenId === null) !== (o.tokenSecret === null)) usage('--token-id and --token-secret go together');
  if (!(o.tokenTtl > 0)) usage('bad --token-ttl');
  if (!(o.buildDelayMs >= 0)) usage('bad --build-delay-ms');
  if (!(o.maxOutputBytes > 0)) usage('bad --max-output-bytes');
  if (!o.state) usage('--state DIR is required');
  return o;
}

function usage(msg) {
  if (msg) process.stderr.write(`server.js: ${msg}\n`);
  process.stderr.write(
    'usage: node server.js --port N --state DIR [--token-id ID --token-secret S]\n' +
    '       [--control-port N] [--token-ttl SECS] [--build-delay-ms MS]\n' +
    '       [--max-output-bytes N] [--exit-on-stdin-eof] [--verbose] [--proto FILE]\n');
  process.exit(msg ? 2 : 0);
}

const opts = parseArgs(process.argv.slice(2));

function log(...args) {
  if (opts.verbose) process.stderr.write(`[modal-fake] ${args.join(' ')}\n`);
}
function warn(...args) {
  process.stderr.write(`[modal-fake] ${args.join(' ')}\n`);
}

const MAX_POLL_SECS = 300;
const DEFAULT_SANDBOX_TIMEOUT_SECS = 300;
const EXIT_GRACE_MS = 1000;      // wait this long for pipes after exit
const MAX_LOG_BYTES = 1 << 20;   // per fd, sandbox entrypoint logs
const MAX_CALLS = 20000;

const STATUS = grpc.status;
const GS = { UNSPECIFIED: 0, SUCCESS: 1, FAILURE: 2, TERMINATED: 3, TIMEOUT: 4, INIT_FAILURE: 5 };
const FD_STDOUT = 1;
const FD_STDERR = 2;
const OUT_DEVNULL = 1;
const OUT_STDOUT = 3;

// ---------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------

const stateDir = path.resolve(opts.state);
const sandboxesDir = path.join(stateDir, 'sandboxes');
const imagesDir = path.join(stateDir, 'images');
fs.mkdirSync(sandboxesDir, { recursive: true });
fs.mkdirSync(imagesDir, { recursive: true });

const apps = new Map();          // app_id -> {app_id, name, environment}
const appsByName = new Map();    // env \0 name -> app_id
const images = new Map();        // image_id -> image
const imagesByKey = new Map();   // definition key -> image_id
const secrets = new Map();       // secret_id -> {secret_id, name, environment, env}
const secretsByName = new Map(); // env \0 name -> secret_id
const sandboxes = new Map();     // sandbox_id -> sandbox
const tasks = new Map();         // task_id -> sandbox
const execs = new Map();         // exec_id -> exec
const calls = [];
let callSeq = 0;
const faults = { breakOutput: [], failNext: [], outageAfter: [], holdNext: [] };

function newId(prefix) {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  const bytes = crypto.randomBytes(22);
  let s = '';
  for (const b of bytes) s += alphabet[b % alphabet.length];
  return `${prefix}-${s}`;
}

function normEnv(e) {
  return e ? e : 'main';
}

// Snapshot images survive restarts (their folders are in DIR/images).
for (const f of fs.readdirSync(imagesDir)) {
  if (!f.endsWith('.json')) continue;
  try {
    const meta = JSON.parse(fs.readFileSync(path.join(imagesDir, f), 'utf8'));
    if (meta.image_id && fs.existsSync(meta.dir)) {
      images.set(meta.image_id, { ...meta, logs: [], events: newEmitter() });
    }
  } catch (e) {
    warn(`ignoring bad image metadata ${f}: ${e.message}`);
  }
}

function newEmitter() {
  const e = new EventEmitter();
  e.setMaxListeners(0);
  return e;
}

// ---------------------------------------------------------------------------
// Auth tokens: HS256 JWTs signed with a key kept in the state dir.
// ---------------------------------------------------------------------------

const authKeyFile = path.join(stateDir, 'auth.key');
let authKey;
try {
  authKey = fs.readFileSync(authKeyFile);
} catch {
  authKey = crypto.randomBytes(32);
  fs.writeFileSync(authKeyFile, authKey, { mode: 0o600 });
}

function b64url(buf) {
  return Buffer.from(buf).toString('base64').replace(/=+$/, '').replace(/\+/g, '-').replace(/\//g, '_');
}

function makeToken(tokenId) {
  const now = Math.floor(Date.now() / 1000);
  const header = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
  const payload = b64url(JSON.stringify({
    iss: 'sbxd-modal-fake', sub: tokenId, iat: now, exp: now + Math.round(opts.tokenTtl),
    jti: crypto.randomBytes(8).toString('hex'),
  }));
  const sig = b64url(crypto.createHmac('sha256', authKey).update(`${header}.${payload}`).digest());
  return `${header}.${payload}.${sig}`;
}

// Returns null if fine, otherwise an error message.
function checkToken(token) {
  const parts = token.split('.');
  if (parts.length !== 3) return 'x-modal-auth-token is not a JWT issued by this server';
  const sig = b64url(crypto.createHmac('sha256', authKey).update(`${parts[0]}.${parts[1]}`).digest());
  if (sig !== parts[2]) return 'x-modal-auth-token has a bad signature (not issued by this server)';
  let payload;
  try {
    payload = JSON.parse(Buffer.from(parts[1].replace(/-/g, '+').replace(/_/g, '/'), 'base64').toString('utf8'));
  } catch {
    return 'x-modal-auth-token payload is not JSON';
  }
  if (!(payload.exp > Date.now() / 1000)) return 'x-modal-auth-token has expired; call AuthTokenGet again';
  return null;
}

// ---------------------------------------------------------------------------
// Errors and call plumbing
// ---------------------------------------------------------------------------

class RpcError extends Error {
  constructor(code, details) {
    super(details);
    this.code = code;
    this.details = details;
  }
}

function fail(code, details) {
  throw new RpcError(code, details);
}

function toGrpcError(e) {
  if (e instanceof RpcError) return { code: e.code, details: e.details };
  warn(`internal error: ${e && e.stack ? e.stack : e}`);
  return { code: STATUS.INTERNAL, details: `fake server internal error: ${e && e.message ? e.message : e}` };
}

const MD_KEYS = [
  'x-modal-token-id', 'x-modal-client-type', 'x-modal-client-version',
  'x-modal-libmodal-version', 'x-idempotency-key', 'x-retry-attempt', 'x-retry-delay',
  'user-agent', 'grpc-accept-encoding',
];

function mdGet(md, key) {
  const v = md.get(key);
  if (!v || v.length === 0) return undefined;
  return typeof v[0] === 'string' ? v[0] : v[0].toString();
}

function jsonSafe(v, depth = 0) {
  if (depth > 8) return '...';
  if (Buffer.isBuffer(v) || v instanceof Uint8Array) {
    const b = Buffer.from(v);
    return { bytes_len: b.length, base64: b.subarray(0, 4096).toString('base64') };
  }
  if (Array.isArray(v)) return v.map((x) => jsonSafe(x, depth + 1));
  if (v && typeof v === 'object') {
    const o = {};
    for (const [k, x] of Object.entries(v)) o[k] = jsonSafe(x, depth + 1);
    return o;
  }
  return v;
}

function recordCall(method, call) {
  const md = {};
  for (const k of MD_KEYS) {
    const v = mdGet(call.metadata, k);
    if (v !== undefined) md[k] = v;
  }
  md['has-auth-token'] = mdGet(call.metadata, 'x-modal-auth-token') !== undefined;
  const rec = {
    seq: ++callSeq, method, time: Date.now(), metadata: md,
    request: jsonSafe(call.request || {}), code: null, error: null, duration_ms: null,
  };
  calls.push(rec);
  if (calls.length > MAX_CALLS) calls.splice(0, calls.length - MAX_CALLS);
  log(`call #${rec.seq} ${method} ${JSON.stringify(rec.request).slice(0, 300)}`);
  return rec;
}

function finishRecord(rec, err) {
  rec.code = err ? err.code : 0;
  rec.error = err ? err.details : null;
  rec.duration_ms = Date.now() - rec.time;
  if (err) log(`call #${rec.seq} ${rec.method} -> code ${err.code}: ${err.details}`);
}

function checkAuth(method, md) {
  const id = mdGet(md, 'x-modal-token-id');
  const secret = mdGet(md, 'x-modal-token-secret');
  if (!id || !secret) {
    return new RpcError(STATUS.UNAUTHENTICATED,
      'missing x-modal-token-id / x-modal-token-secret headers (they are required on every call)');
  }
  if (opts.tokenId !== null && (id !== opts.tokenId || secret !== opts.tokenSecret)) {
    return new RpcError(STATUS.UNAUTHENTICATED,
      `Token ID or secret is invalid: x-modal-token-id '${id}' / x-modal-token-secret do not match the fake's --token-id/--token-secret`);
  }
  if (method !== 'AuthTokenGet') {
    const tok = mdGet(md, 'x-modal-auth-token');
    if (!tok) {
      return new RpcError(STATUS.UNAUTHENTICATED,
        'missing x-modal-auth-token header: call AuthTokenGet first and send its token on every other call');
    }
    const why = checkToken(tok);
    if (why) return new RpcError(STATUS.UNAUTHENTICATED, why);
  }
  return null;
}

function takeFailFault(method) {
  const i = faults.failNext.findIndex((f) => f.method === method);
  if (i < 0) return null;
  const f = faults.failNext[i];
  if (--f.times <= 0) faults.failNext.splice(i, 1);
  return new RpcError(f.code, f.message);
}

// A call armed with hold_next waits this long before it is handled (a slow
// server that does not notice the sandbox dying meanwhile).
function takeHoldFault(method) {
  const i = faults.holdNext.findIndex((f) => f.method === method);
  if (i < 0) return 0;
  const f = faults.holdNext[i];
  faults.holdNext.splice(i, 1);
  log(`fault: holding ${method} for ${f.ms} ms`);
  return f.ms;
}

// Per-call context: knows whether the client went away.
function makeCtx(call) {
  const ctx = newEmitter();
  ctx.cancelled = false;
  call.on('cancelled', () => {
    ctx.cancelled = true;
    ctx.emit('cancelled');
  });
  return ctx;
}

function unary(method, fn) {
  return (call, callback) => {
    const rec = recordCall(method, call);
    const ctx = makeCtx(call);
    let done = false;
    const reply = (err, resp) => {
      if (done) return;
      done = true;
      finishRecord(rec, err);
      if (err) callback(err);
      else callback(null, resp || {});
    };
    const pre = checkAuth(method, call.metadata) || takeFailFault(method);
    if (pre) return reply(toGrpcError(pre));
    const hold = takeHoldFault(method);
    Promise.resolve()
      .then(() => hold && new Promise((resolve) => setTimeout(resolve, hold)))
      .then(() => {
        if (ctx.cancelled) throw new RpcError(STATUS.CANCELLED, 'the client cancelled the call');
        return fn(call.request, ctx, call);
      })
      .then((r) => reply(null, r), (e) => reply(toGrpcError(e)));
  };
}

function serverStream(method, fn) {
  return (call) => {
    const rec = recordCall(method, call);
    const ctx = makeCtx(call);
    let done = false;
    const finish = (err) => {
      if (done) return;
      done = true;
      finishRecord(rec, err);
      if (ctx.cancelled) return;
      if (err) call.emit('error', err);
      else call.end();
    };
    const pre = checkAuth(method, call.metadata) || takeFailFault(method);
    if (pre) return finish(toGrpcError(pre));
    Promise.resolve()
      .then(() => fn(call.request, ctx, call))
      .then(() => finish(null), (e) => finish(toGrpcError(e)));
  };
}

// Write one message on a server stream, honouring back-pressure.
function send(call, ctx, msg) {
  return new Promise((resolve) => {
    if (ctx.cancelled) return resolve(false);
    if (call.write(msg)) return resolve(true);
    const done = (v) => {
      call.removeListener('drain', onDrain);
      ctx.removeListener('cancelled', onCancel);
      resolve(v);
    };
    const onDrain = () => done(true);
    const onCancel = () => done(false);
    call.once('drain', onDrain);
    ctx.once('cancelled', onCancel);
  });
}

// Wait until one of `events` fires on `em`, `ms` passes, or the call is cancelled.
function waitFor(em, events, ms, ctx) {
  return new Promise((resolve) => {
    let timer = null;
    const handlers = [];
    const done = (why) => {
      if (timer) clearTimeout(timer);
      for (const [e, h] of handlers) em.removeListener(e, h);
      if (ctx) ctx.removeListener('cancelled', onCancel);
      resolve(why);
    };
    const onCancel = () => done('cancelled');
    if (ctx && ctx.cancelled) return resolve('cancelled');
    for (const e of events) {
      const h = () => done(e);
      handlers.push([e, h]);
      em.once(e, h);
    }
    if (ctx) ctx.once('cancelled', onCancel);
    timer = setTimeout(() => done('timeout'), Math.max(0, ms));
  });
}

function pollMs(timeout) {
  const t = Number(timeout) || 0;
  if (!(t > 0)) return 0;
  return Math.min(t, MAX_POLL_SECS) * 1000;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------

function killGroup(pid, signal = 'SIGKILL') {
  if (!pid) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the group is already gone.
  }
}

function exitCodeOf(code, signal) {
  if (code !== null && code !== undefined) return code;
  const n = os.constants.signals[signal];
  return 128 + (n || 0);
}

// Maps a path inside the sandbox to the host folder, creating it.
function sandboxPath(sb, p, base) {
  let rel;
  if (p === undefined || p === null || p === '') rel = base || '/';
  else if (p.startsWith('/')) rel = p;
  else rel = path.posix.join(base || '/', p);
  const host = path.join(sb.root, path.posix.normalize('/' + rel));
  fs.mkdirSync(host, { recursive: true });
  return host;
}

function processEnv(sb, extra, pty) {
  const home = path.join(sb.root, 'root');
  fs.mkdirSync(home, { recursive: true });
  const env = {
    PATH: process.env.PATH || '/usr/local/bin:/usr/bin:/bin',
    HOME: home,
    LANG: 'C.UTF-8',
  };
  if (pty && pty.enabled) env.TERM = pty.env_term || 'xterm-256color';
  Object.assign(env, sb.env, extra);
  env.MODAL_SANDBOX_ROOT = sb.root;
  env.MODAL_SANDBOX_ID = sb.sandbox_id;
  env.MODAL_TASK_ID = sb.task_id;
  return env;
}

function secretsEnv(ids) {
  const env = {};
  for (const id of ids || []) {
    const s = secrets.get(id);
    if (!s) fail(STATUS.NOT_FOUND, `Secret ${id} not found`);
    Object.assign(env, s.env);
  }
  return env;
}

// ---------------------------------------------------------------------------
// Images
// ---------------------------------------------------------------------------

function imageKey(img) {
  return JSON.stringify({
    cmds: img.dockerfile_commands || [],
    bases: (img.base_images || []).map((b) => [b.docker_tag || '', b.image_id || '']),
    secrets: img.secret_ids || [],
    reg: img.image_registry_config || null,
    gpu: img.gpu_config || null,
  });
}

function imageResult(im) {
  if (im.status === 'built') return { status: GS.SUCCESS };
  if (im.status === 'failed') return { status: GS.FAILURE, exception: im.exception };
  return undefined;
}

// Simulated build: a couple of log lines, then a result.
async function buildImage(im) {
  const step = async (data) => {
    await sleep(opts.buildDelayMs);
    im.logs.push({ entry_id: String(im.logs.length + 1), data });
    im.events.emit('change');
  };
  await step(`Building image ${im.image_id}\n`);
  for (const c of im.dockerfile_commands) await step(`=> ${c}\n`);
  await sleep(opts.buildDelayMs);
  if (im.dockerfile_commands.some((c) => c.includes('fake-build-fail'))) {
    im.status = 'failed';
    im.exception = 'fake build failure requested by "fake-build-fail" in the Dockerfile commands';
  } else {
    im.status = 'built';
  }
  im.finished_at = Date.now();
  im.events.emit('change');
}

function getImage(imageId) {
  const im = images.get(imageId);
  if (!im) fail(STATUS.NOT_FOUND, `Could not find image with ID ${imageId}`);
  return im;
}

// ---------------------------------------------------------------------------
// Sandboxes
// ---------------------------------------------------------------------------

function getSandbox(id) {
  const sb = sandboxes.get(id);
  if (!sb) fail(STATUS.NOT_FOUND, `Sandbox ${id} not found`);
  return sb;
}

function isRunning(sb) {
  return sb.status === 'running';
}

function appendLog(sb, fd, data) {
  const l = sb.logs[fd];
  l.items.push({ entry_id: `${++sb.logSeq}-0`, seq: sb.logSeq, data });
  l.bytes += data.length;
  while (l.bytes > MAX_LOG_BYTES && l.items.length > 1) l.bytes -= l.items.shift().data.length;
}

function startEntrypoint(sb) {
  const argv = sb.entrypoint_args.length ? sb.entrypoint_args : ['sleep', '48h'];
  const ep = { pid: null, child: null, exited: false, stdin: null };
  sb.entrypoint = ep;
  let child;
  try {
    child = spawn(argv[0], argv.slice(1), {
      cwd: sandboxPath(sb, sb.workdir), env: processEnv(sb, {}, sb.pty_info),
      detached: true, stdio: ['pipe', 'pipe', 'pipe'],
    });
  } catch (e) {
    ep.exited = true;
    finishSandbox(sb, 'failed', { status: GS.INIT_FAILURE, exception: `entrypoint ${argv[0]}: ${e.message}` });
    return;
  }
  ep.child = child;
  ep.pid = child.pid;
  ep.stdin = makeStdin(child);
  child.stdout.on('data', (d) => appendLog(sb, FD_STDOUT, d.toString('utf8')));
  child.stderr.on('data', (d) => appendLog(sb, FD_STDERR, d.toString('utf8')));
  child.on('error', (e) => {
    if (ep.exited) return;
    ep.exited = true;
    sb.events.emit('entrypoint-exit');
    appendLog(sb, FD_STDERR, `modal-fake: entrypoint ${argv[0]}: ${e.message}\n`);
    finishSandbox(sb, 'failed', {
      status: GS.FAILURE, exitcode: e.code === 'ENOENT' ? 127 : 126,
      exception: `entrypoint ${argv[0]}: ${e.message}`,
    });
  });
  child.on('exit', (code, signal) => {
    if (ep.exited) return;
    ep.exited = true;
    sb.events.emit('entrypoint-exit');
    const rc = exitCodeOf(code, signal);
    finishSandbox(sb, 'finished', rc === 0
      ? { status: GS.SUCCESS, exitcode: 0 }
      : { status: GS.FAILURE, exitcode: rc, exception: `entrypoint exited with code ${rc}` });
  });
}

// Ends a running sandbox: result recorded, all its processes SIGKILLed.
function finishSandbox(sb, status, result, { killed = false } = {}) {
  if (!isRunning(sb)) return false;
  sb.status = status;
  sb.result = result;
  sb.finished_at = Date.now();
  sb.killed = killed;
  if (sb.timer) clearTimeout(sb.timer);
  sb.timer = null;
  killGroup(sb.entrypoint && sb.entrypoint.pid);
  for (const id of sb.execs) {
    const ex = execs.get(id);
    if (!ex) continue;
    if (killed) {
      ex.gone = true;
      ex.events.emit('gone');
    }
    killGroup(ex.pid);
  }
  log(`sandbox ${sb.sandbox_id} -> ${status}`);
  sb.events.emit('finished');
  return true;
}

// Resolves when the sandbox's processes are gone (or after maxMs).
async function waitProcessesGone(sb, maxMs) {
  const deadline = Date.now() + maxMs;
  const pending = [];
  if (sb.entrypoint && sb.entrypoint.pid && !sb.entrypoint.exited) {
    pending.push([sb.events, 'entrypoint-exit', () => sb.entrypoint.exited]);
  }
  for (const id of sb.execs) {
    const ex = execs.get(id);
    if (ex && ex.exit_code === null) pending.push([ex.events, 'exit', () => ex.exit_code !== null]);
  }
  for (const [em, ev, isDone] of pending) {
    if (isDone()) continue;
    const left = deadline - Date.now();
    if (left <= 0) break;
    await waitFor(em, [ev], left, null);
  }
}

function sandboxInfo(sb) {
  const app = apps.get(sb.app_id);
  return {
    sandbox_id: sb.sandbox_id,
    task_id: sb.task_id,
    name: sb.name,
    app_id: sb.app_id,
    app_name: app ? app.name : null,
    environment: app ? app.environment : null,
    status: sb.status,
    result: sb.result,
    root: sb.root,
    image_id: sb.image_id,
    timeout_secs: sb.timeout_secs,
    idle_timeout_secs: sb.idle_timeout_secs,
    workdir: sb.workdir,
    env: sb.env,
    secret_ids: sb.secret_ids,
    resources: sb.resources,
    network_access: sb.network_access,
    entrypoint_args: sb.entrypoint_args,
    entrypoint_pid: sb.entrypoint ? sb.entrypoint.pid : null,
    pty: !!(sb.pty_info && sb.pty_info.enabled),
    tags: Object.fromEntries(sb.tags),
    execs: [...sb.execs],
    created_at: sb.created_at,
    finished_at: sb.finished_at,
  };
}

// ---------------------------------------------------------------------------
// Stdin feeding (ordered by index, duplicates from retries ignored)
// ---------------------------------------------------------------------------

function makeStdin(child) {
  const st = { next: 1, pending: new Map(), closed: false, bytes: 0, child };
  child.stdin.on('error', () => { /* EPIPE: the process no longer reads */ });
  return st;
}

function feedStdin(st, index, data, eof) {
  if (!st || st.closed) return;
  let idx = Number(index) || 0;
  if (idx === 0) idx = st.next; // unnumbered: take the next slot
  if (idx < st.next || st.pending.has(idx)) return; // a retry of something we have
  st.pending.set(idx, { data, eof });
  while (st.pending.has(st.next)) {
    const m = st.pending.get(st.next);
    st.pending.delete(st.next);
    st.next++;
    if (m.data && m.data.length) {
      st.bytes += m.data.length;
      if (!st.child.stdin.destroyed) st.child.stdin.write(m.data);
    }
    if (m.eof) {
      st.closed = true;
      st.pending.clear();
      if (!st.child.stdin.destroyed) st.child.stdin.end();
      break;
    }
  }
}

// ---------------------------------------------------------------------------
// Exec
// ---------------------------------------------------------------------------

function newOut() {
  return { batches: [], next: 1, final: null };
}

function addBatch(ex, fd, data) {
  const o = ex.out[fd];
  const b = { batch_index: o.next++, fd, data, seq: ++ex.batchSeq };
  o.batches.push(b);
  ex.outBytes += data.length;
  ex.totalBytes[fd] += data.length;
  // Bound memory: drop the oldest batches (across both fds).
  while (ex.outBytes > opts.maxOutputBytes) {
    const a = ex.out[FD_STDOUT].batches[0];
    const c = ex.out[FD_STDERR].batches[0];
    const victimFd = !c || (a && a.seq < c.seq) ? FD_STDOUT : FD_STDERR;
    const v = ex.out[victimFd].batches.shift();
    if (!v) break;
    ex.outBytes -= v.data.length;
    ex.dropped.batches++;
    ex.dropped.bytes += v.data.length;
    if (ex.dropped.batches === 1) {
      warn(`exec ${ex.exec_id}: more than ${opts.maxOutputBytes} bytes of output kept; dropping the oldest batches`);
    }
  }
  ex.events.emit('output');
}

function finalizeOutput(ex) {
  if (ex.outputDone) return;
  ex.outputDone = true;
  if (ex.graceTimer) clearTimeout(ex.graceTimer);
  for (const s of [ex.child && ex.child.stdout, ex.child && ex.child.stderr]) {
    if (s && !s.destroyed) s.destroy();
  }
  for (const fd of [FD_STDOUT, FD_STDERR]) {
    const o = ex.out[fd];
    o.final = { batch_index: o.next++, fd, data: null, final: true, seq: ++ex.batchSeq };
    o.batches.push(o.final);
  }
  ex.events.emit('output');
}

function setExited(ex, rc) {
  if (ex.exit_code !== null) return;
  ex.exit_code = ex.timed_out ? 124 : rc;
  ex.exited_at = Date.now();
  if (ex.timer) clearTimeout(ex.timer);
  log(`exec ${ex.exec_id} exited with ${ex.exit_code}`);
  ex.events.emit('exit');
  // Output is complete once the pipes close; a background grandchild may hold
  // them open, so stop waiting after a grace period.
  if (!ex.outputDone) ex.graceTimer = setTimeout(() => finalizeOutput(ex), EXIT_GRACE_MS);
}

function startExec(sb, req) {
  const command = req.command || [];
  if (command.length === 0) fail(STATUS.INVALID_ARGUMENT, 'command must not be empty');
  const execEnv = secretsEnv(req.secret_ids);
  const execId = newId('ce');
  const cwd = sandboxPath(sb, req.workdir, sb.workdir || '/');
  const env = processEnv(sb, execEnv, req.pty_info);
  env.MODAL_EXEC_ID = execId;
  const ex = {
    exec_id: execId, sandbox_id: sb.sandbox_id, task_id: sb.task_id, command,
    workdir: req.workdir === undefined ? null : req.workdir, cwd,
    timeout_secs: req.timeout_secs || 0, pty: !!(req.pty_info && req.pty_info.enabled),
    stdout_output: req.stdout_output || 0, stderr_output: req.stderr_output || 0,
    env_keys: Object.keys(execEnv),
    pid: null, child: null, started_at: Date.now(), exited_at: null,
    exit_code: null, timed_out: false, spawn_error: null, gone: false,
    out: { [FD_STDOUT]: newOut(), [FD_STDERR]: newOut() },
    batchSeq: 0, outBytes: 0, totalBytes: { [FD_STDOUT]: 0, [FD_STDERR]: 0 },
    dropped: { batches: 0, bytes: 0 }, outputDone: false, graceTimer: null, timer: null,
    stdin: null, events: newEmitter(),
  };
  execs.set(execId, ex);
  sb.execs.add(execId);

  const route = (fd) => {
    const mode = fd === FD_STDOUT ? ex.stdout_output : ex.stderr_output;
    if (mode === OUT_DEVNULL) return null;
    if (fd === FD_STDERR && mode === OUT_STDOUT) return FD_STDOUT;
    return fd;
  };

  let child;
  try {
    child = spawn(command[0], command.slice(1), {
      cwd, env, detached: true, stdio: ['pipe', 'pipe', 'pipe'],
    });
  } catch (e) {
    ex.spawn_error = e.message;
    const fd = route(FD_STDERR);
    if (fd) addBatch(ex, fd, Buffer.from(`modal-fake: exec ${command[0]}: ${e.message}\n`));
    setExited(ex, 126);
    finalizeOutput(ex);
    return ex;
  }
  ex.child = child;
  ex.pid = child.pid;
  ex.stdin = makeStdin(child);
  child.stdout.on('data', (d) => { const fd = route(FD_STDOUT); if (fd) addBatch(ex, fd, d); });
  child.stderr.on('data', (d) => { const fd = route(FD_STDERR); if (fd) addBatch(ex, fd, d); });
  child.on('error', (e) => {
    // Spawn failures (ENOENT, EACCES) arrive here, without an 'exit'.
    if (ex.exit_code !== null) return;
    ex.spawn_error = e.message;
    const fd = route(FD_STDERR);
    if (fd) addBatch(ex, fd, Buffer.from(`modal-fake: exec ${command[0]}: ${e.message}\n`));
    setExited(ex, e.code === 'ENOENT' ? 127 : 126);
    finalizeOutput(ex);
  });
  child.on('exit', (code, signal) => setExited(ex, exitCodeOf(code, signal)));
  child.on('close', () => finalizeOutput(ex));
  if (ex.timeout_secs > 0) {
    ex.timer = setTimeout(() => {
      if (ex.exit_code !== null) return;
      ex.timed_out = true;
      log(`exec ${ex.exec_id} timed out after ${ex.timeout_secs}s`);
      killGroup(ex.pid);
    }, ex.timeout_secs * 1000);
  }
  log(`exec ${execId} in ${sb.sandbox_id}: ${JSON.stringify(command)} cwd=${cwd} pid=${child.pid}`);
  return ex;
}

function getExec(id) {
  const ex = execs.get(id);
  if (!ex) fail(STATUS.NOT_FOUND, `Exec ${id} not found`);
  if (ex.gone) fail(STATUS.NOT_FOUND, `Exec ${id} not found: its sandbox ${ex.sandbox_id} is gone`);
  return ex;
}

function execInfo(ex) {
  return {
    exec_id: ex.exec_id, sandbox_id: ex.sandbox_id, task_id: ex.task_id, command: ex.command,
    workdir: ex.workdir, cwd: ex.cwd, timeout_secs: ex.timeout_secs, pty: ex.pty,
    env_keys: ex.env_keys, pid: ex.pid, started_at: ex.started_at, exited_at: ex.exited_at,
    exit_code: ex.exit_code, timed_out: ex.timed_out, spawn_error: ex.spawn_error, gone: ex.gone,
    output_done: ex.outputDone,
    stdout: { batches: ex.out[FD_STDOUT].next - 1, bytes: ex.totalBytes[FD_STDOUT] },
    stderr: { batches: ex.out[FD_STDERR].next - 1, bytes: ex.totalBytes[FD_STDERR] },
    dropped: ex.dropped,
    stdin: ex.stdin ? { next_index: ex.stdin.next, closed: ex.stdin.closed, bytes: ex.stdin.bytes } : null,
  };
}

function batchMsg(b, raw) {
  const msg = { batch_index: b.batch_index, items: [] };
  if (b.data && b.data.length) {
    msg.items.push(raw
      ? { file_descriptor: b.fd, message_bytes: b.data }
      : { file_descriptor: b.fd, message: b.data.toString('utf8') });
  }
  return msg;
}

// ---------------------------------------------------------------------------
// RPC handlers
// ---------------------------------------------------------------------------

const handlers = {
  AuthTokenGet: unary('AuthTokenGet', (req, ctx, call) => ({
    token: makeToken(mdGet(call.metadata, 'x-modal-token-id')),
  })),

  AppGetOrCreate: unary('AppGetOrCreate', (req) => {
    if (!req.app_name) fail(STATUS.INVALID_ARGUMENT, 'app_name is required');
    const env = normEnv(req.environment_name);
    const key = `${env}\0${req.app_name}`;
    let id = appsByName.get(key);
    if (!id) {
      if ((req.object_creation_type || 0) === 0) {
        fail(STATUS.NOT_FOUND, `App '${req.app_name}' not found in environment '${env}'`);
      }
      id = newId('ap');
      apps.set(id, { app_id: id, name: req.app_name, environment: env, created_at: Date.now() });
      appsByName.set(key, id);
      log(`app ${id} = ${env}/${req.app_name}`);
    } else if (req.object_creation_type === 2) {
      fail(STATUS.ALREADY_EXISTS, `App '${req.app_name}' already exists`);
    }
    return { app_id: id };
  }),

  ImageGetOrCreate: unary('ImageGetOrCreate', (req) => {
    const img = req.image;
    if (!img) fail(STATUS.INVALID_ARGUMENT, 'image is required');
    if (req.app_id && !apps.has(req.app_id)) fail(STATUS.NOT_FOUND, `App ${req.app_id} not found`);
    const cmds = img.dockerfile_commands || [];
    if (cmds.length === 0) fail(STATUS.INVALID_ARGUMENT, 'image has no dockerfile_commands');
    for (const b of img.base_images || []) getImage(b.image_id);
    for (const s of img.secret_ids || []) if (!secrets.has(s)) fail(STATUS.NOT_FOUND, `Secret ${s} not found`);
    const key = imageKey(img);
    const existing = imagesByKey.get(key);
    if (existing && !req.force_build) {
      const im = images.get(existing);
      const result = imageResult(im);
      return result ? { image_id: im.image_id, result } : { image_id: im.image_id };
    }
    const im = {
      image_id: newId('im'), kind: 'registry', dockerfile_commands: cmds,
      tag: cmds[0].startsWith('FROM ') ? cmds[0].slice(5).trim() : null,
      base_images: (img.base_images || []).map((b) => ({ docker_tag: b.docker_tag, image_id: b.image_id })),
      builder_version: req.builder_version || '',
      status: 'building', exception: null, logs: [], events: newEmitter(),
      created_at: Date.now(), finished_at: null, dir: null,
    };
    // Layers on top of a snapshot keep its files (Dockerfile commands are not run).
    for (const b of im.base_images) {
      const base = images.get(b.image_id);
      if (base && base.dir) im.dir = base.dir;
    }
    images.set(im.image_id, im);
    imagesByKey.set(key, im.image_id);
    log(`image ${im.image_id}: ${JSON.stringify(cmds)}`);
    buildImage(im).catch((e) => warn(`build ${im.image_id}: ${e.stack}`));
    return { image_id: im.image_id };
  }),

  ImageJoinStreaming: serverStream('ImageJoinStreaming', async (req, ctx, call) => {
    const im = getImage(req.image_id);
    let last = Number(req.last_entry_id) || 0;
    const deadline = Date.now() + pollMs(req.timeout);
    for (;;) {
      for (const e of im.logs) {
        if (Number(e.entry_id) <= last) continue;
        if (!await send(call, ctx, { task_logs: [{ data: e.data, file_descriptor: FD_STDOUT }], entry_id: e.entry_id })) return;
        last = Number(e.entry_id);
      }
      const result = imageResult(im);
      if (result) {
        await send(call, ctx, { result, entry_id: String(im.logs.length + 1), eof: true });
        return;
      }
      const left = deadline - Date.now();
      if (left <= 0) return; // the client reopens with last_entry_id
      if (await waitFor(im.events, ['change'], left, ctx) === 'cancelled') return;
    }
  }),

  ImageFromId: unary('ImageFromId', (req) => {
    const im = getImage(req.image_id);
    return { image_id: im.image_id };
  }),

  SecretGetOrCreate: unary('SecretGetOrCreate', (req) => {
    const env = normEnv(req.environment_name);
    const type = req.object_creation_type || 0;
    const envDict = req.env_dict || {};
    if (type === 5) {
      if (req.deployment_name) fail(STATUS.INVALID_ARGUMENT, 'ephemeral secrets cannot have a name');
      const id = newId('st');
      secrets.set(id, { secret_id: id, name: null, environment: env, env: { ...envDict }, created_at: Date.now() });
      return { secret_id: id };
    }
    if (!req.deployment_name) fail(STATUS.INVALID_ARGUMENT, 'deployment_name is required');
    const key = `${env}\0${req.deployment_name}`;
    let id = secretsByName.get(key);
    if (id && type === 2) fail(STATUS.ALREADY_EXISTS, `Secret '${req.deployment_name}' already exists`);
    if (!id || type === 3) {
      if (type === 0) fail(STATUS.NOT_FOUND, `Secret '${req.deployment_name}' not found in environment '${env}'`);
      id = id || newId('st');
      secrets.set(id, { secret_id: id, name: req.deployment_name, environment: env, env: { ...envDict }, created_at: Date.now() });
      secretsByName.set(key, id);
    }
    const s = secrets.get(id);
    for (const k of req.required_keys || []) {
      if (!(k in s.env)) fail(STATUS.FAILED_PRECONDITION, `Secret is missing key: ${k}`);
    }
    return { secret_id: id };
  }),

  SandboxCreate: unary('SandboxCreate', (req) => {
    const app = apps.get(req.app_id);
    if (!app) fail(STATUS.NOT_FOUND, `App ${req.app_id} not found`);
    const def = req.definition;
    if (!def) fail(STATUS.INVALID_ARGUMENT, 'definition is required');
    if (!def.image_id) fail(STATUS.INVALID_ARGUMENT, 'definition.image_id is required');
    const im = getImage(def.image_id);
    if (im.status === 'building') fail(STATUS.FAILED_PRECONDITION, `Image ${im.image_id} has not finished building`);
    if (im.status === 'failed') fail(STATUS.FAILED_PRECONDITION, `Image ${im.image_id} failed to build`);
    if (def.workdir !== undefined && !def.workdir.startsWith('/')) {
      fail(STATUS.INVALID_ARGUMENT, `workdir must be an absolute path, got '${def.workdir}'`);
    }
    const env = secretsEnv(def.secret_ids);
    const name = def.name === undefined || def.name === '' ? null : def.name;
    if (name !== null) {
      for (const other of sandboxes.values()) {
        if (other.app_id === app.app_id && other.name === name && isRunning(other)) {
          fail(STATUS.ALREADY_EXISTS, `Sandbox with name '${name}' already exists in app '${app.name}' (${other.sandbox_id})`);
        }
      }
    }
    const id = newId('sb');
    const root = path.join(sandboxesDir, id, 'root');
    if (im.dir) {
      fs.mkdirSync(path.dirname(root), { recursive: true });
      fs.cpSync(im.dir, root, { recursive: true, preserveTimestamps: true, verbatimSymlinks: true });
    } else {
      fs.mkdirSync(root, { recursive: true });
    }
    const sb = {
      sandbox_id: id, task_id: newId('ta'), app_id: app.app_id, name, image_id: im.image_id, root,
      workdir: def.workdir === undefined ? null : def.workdir,
      timeout_secs: def.timeout_secs || DEFAULT_SANDBOX_TIMEOUT_SECS,
      idle_timeout_secs: def.idle_timeout_secs === undefined ? null : def.idle_timeout_secs,
      entrypoint_args: def.entrypoint_args || [],
      secret_ids: def.secret_ids || [], env,
      resources: def.resources || null, network_access: def.network_access || null,
      pty_info: def.pty_info || null, verbose: !!def.verbose,
      status: 'running', result: null, killed: false, created_at: Date.now(), finished_at: null,
      tags: new Map(), execs: new Set(), entrypoint: null, timer: null,
      logs: { [FD_STDOUT]: { items: [], bytes: 0 }, [FD_STDERR]: { items: [], bytes: 0 } }, logSeq: 0,
      events: newEmitter(),
    };
    sandboxes.set(id, sb);
    tasks.set(sb.task_id, sb);
    sb.timer = setTimeout(() => {
      finishSandbox(sb, 'timeout', { status: GS.TIMEOUT, exception: `Sandbox timed out after ${sb.timeout_secs}s` });
    }, sb.timeout_secs * 1000);
    startEntrypoint(sb);
    log(`sandbox ${id} (${name || 'unnamed'}) in app ${app.name}: root=${root}`);
    return { sandbox_id: id };
  }),

  SandboxGetFromName: unary('SandboxGetFromName', (req) => {
    const env = normEnv(req.environment_name);
    const appId = appsByName.get(`${env}\0${req.app_name}`);
    if (!appId) fail(STATUS.NOT_FOUND, `App '${req.app_name}' not found in environment '${env}'`);
    for (const sb of sandboxes.values()) {
      if (sb.app_id === appId && sb.name === req.sandbox_name && isRunning(sb)) return { sandbox_id: sb.sandbox_id };
    }
    fail(STATUS.NOT_FOUND, `No running sandbox named '${req.sandbox_name}' in app '${req.app_name}'`);
  }),

  // Never hangs: one batch with everything logged so far after last_entry_id,
  // marked eof, then OK.
  SandboxGetLogs: serverStream('SandboxGetLogs', async (req, ctx, call) => {
    const sb = getSandbox(req.sandbox_id);
    const fd = req.file_descriptor || FD_STDOUT;
    const lastSeq = parseInt(String(req.last_entry_id || '0-0').split('-')[0], 10) || 0;
    const items = (sb.logs[fd] ? sb.logs[fd].items : []).filter((e) => e.seq > lastSeq);
    const entryId = items.length ? items[items.length - 1].entry_id : (req.last_entry_id || '0-0');
    await send(call, ctx, {
      items: items.map((e) => ({ data: e.data, file_descriptor: fd })),
      entry_id: entryId, eof: true,
    });
  }),

  SandboxStdinWrite: unary('SandboxStdinWrite', (req) => {
    const sb = getSandbox(req.sandbox_id);
    if (isRunning(sb) && sb.entrypoint) feedStdin(sb.entrypoint.stdin, req.index, req.input, !!req.eof);
    return {};
  }),

  SandboxGetTaskId: unary('SandboxGetTaskId', (req) => {
    const sb = getSandbox(req.sandbox_id);
    if (isRunning(sb)) return { task_id: sb.task_id };
    return { task_id: sb.task_id, task_result: sb.result };
  }),

  SandboxWait: unary('SandboxWait', async (req, ctx) => {
    const sb = getSandbox(req.sandbox_id);
    if (isRunning(sb)) await waitFor(sb.events, ['finished'], pollMs(req.timeout), ctx);
    return sb.result ? { result: sb.result } : {};
  }),

  SandboxTerminate: unary('SandboxTerminate', async (req) => {
    const sb = getSandbox(req.sandbox_id);
    if (!isRunning(sb)) return { existing_result: sb.result };
    finishSandbox(sb, 'terminated', { status: GS.TERMINATED, exception: 'Sandbox terminated by SandboxTerminate' });
    // Let the SIGKILLed processes be reaped so that exec results are final
    // by the time the client gets this reply.
    await waitProcessesGone(sb, 2000);
    return {};
  }),

  SandboxSnapshotFs: unary('SandboxSnapshotFs', (req) => {
    const sb = getSandbox(req.sandbox_id);
    if (!isRunning(sb)) {
      return { result: { status: GS.FAILURE, exception: `Sandbox ${sb.sandbox_id} is not running (${sb.status})` } };
    }
    const imageId = newId('im');
    const dir = path.join(imagesDir, imageId);
    try {
      fs.cpSync(sb.root, dir, {
        recursive: true, preserveTimestamps: true, verbatimSymlinks: true,
        filter: (src) => {
          const st = fs.lstatSync(src);
          return st.isDirectory() || st.isFile() || st.isSymbolicLink();
        },
      });
    } catch (e) {
      fs.rmSync(dir, { recursive: true, force: true });
      return { result: { status: GS.FAILURE, exception: `snapshot copy failed: ${e.message}` } };
    }
    const meta = {
      image_id: imageId, kind: 'snapshot', status: 'built', dir, from_sandbox: sb.sandbox_id,
      dockerfile_commands: [], created_at: Date.now(), finished_at: Date.now(),
    };
    fs.writeFileSync(path.join(imagesDir, `${imageId}.json`), JSON.stringify(meta, null, 1));
    images.set(imageId, { ...meta, logs: [], events: newEmitter() });
    log(`snapshot of ${sb.sandbox_id} -> ${imageId}`);
    return { image_id: imageId, result: { status: GS.SUCCESS } };
  }),

  SandboxTagsSet: unary('SandboxTagsSet', (req) => {
    const sb = getSandbox(req.sandbox_id);
    for (const t of req.tags || []) {
      if (!t.tag_name) fail(STATUS.INVALID_ARGUMENT, 'tag_name must not be empty');
    }
    for (const t of req.tags || []) sb.tags.set(t.tag_name, t.tag_value || '');
    return {};
  }),

  SandboxTagsGet: unary('SandboxTagsGet', (req) => {
    const sb = getSandbox(req.sandbox_id);
    return { tags: [...sb.tags].map(([tag_name, tag_value]) => ({ tag_name, tag_value })) };
  }),

  ContainerExec: unary('ContainerExec', (req) => {
    const sb = tasks.get(req.task_id);
    if (!sb) fail(STATUS.NOT_FOUND, `Task ${req.task_id} not found`);
    if (!isRunning(sb)) {
      fail(STATUS.NOT_FOUND, `Task ${req.task_id} (sandbox ${sb.sandbox_id}) is not running: ${sb.status}`);
    }
    const ex = startExec(sb, req);
    claimOutageAfter('ContainerExec');
    return { exec_id: ex.exec_id };
  }),

  ContainerExecGetOutput: serverStream('ContainerExecGetOutput', async (req, ctx, call) => {
    const ex = getExec(req.exec_id);
    const fd = req.file_descriptor;
    if (fd !== FD_STDOUT && fd !== FD_STDERR) {
      fail(STATUS.INVALID_ARGUMENT, `file_descriptor must be 1 (stdout) or 2 (stderr), got ${fd || 0}`);
    }
    const raw = !!req.get_raw_bytes;
    let last = Number(req.last_batch_index) || 0;
    const deadline = Date.now() + pollMs(req.timeout);
    const fault = claimBreakFault(ex.exec_id, fd);
    let sent = 0;
    const breakNow = () => {
      log(`fault: breaking output stream of ${ex.exec_id} fd ${fd} after ${sent} batches`);
      fail(STATUS.UNAVAILABLE, `fake fault: output stream broken after ${sent} batches`);
    };
    if (fault && fault.after === 0) breakNow();
    for (;;) {
      if (ex.gone) fail(STATUS.NOT_FOUND, `Exec ${ex.exec_id} not found: its sandbox ${ex.sandbox_id} is gone`);
      const o = ex.out[fd];
      const todo = o.batches.filter((b) => b.batch_index > last);
      if (todo.length === 0 && o.final && last >= o.final.batch_index) todo.push(o.final); // client is past the end
      for (const b of todo) {
        const msg = batchMsg(b, raw);
        if (b.final) msg.exit_code = ex.exit_code;
        if (!await send(call, ctx, msg)) return;
        last = b.batch_index;
        sent++;
        if (b.final) return;
        if (fault && sent >= fault.after) breakNow();
      }
      // Batches (or the final one) appended while we were sending raised
      // their 'output' event before we started waiting for it: look again.
      if (o.final || o.batches.some((b) => b.batch_index > last)) continue;
      const left = deadline - Date.now();
      if (left <= 0) {
        if (fault) breakNow();
        return; // long poll over: end cleanly, the client reopens
      }
      if (await waitFor(ex.events, ['output', 'gone'], left, ctx) === 'cancelled') return;
    }
  }),

  ContainerExecPutInput: unary('ContainerExecPutInput', (req) => {
    const ex = getExec(req.exec_id);
    const inp = req.input || {};
    if (ex.stdin) feedStdin(ex.stdin, inp.message_index, inp.message, !!inp.eof);
    return {};
  }),

  ContainerExecWait: unary('ContainerExecWait', async (req, ctx) => {
    let ex = getExec(req.exec_id);
    if (ex.exit_code === null) await waitFor(ex.events, ['exit', 'gone'], pollMs(req.timeout), ctx);
    ex = getExec(req.exec_id);
    if (ex.exit_code === null) return { completed: false };
    return { exit_code: ex.exit_code, completed: true };
  }),
};

// The reply of a call armed with outage_after is lost: the outage resets the
// connection before grpc-js can send it (the reply goes out on a later turn).
function claimOutageAfter(method) {
  const i = faults.outageAfter.findIndex((f) => f.method === method);
  if (i < 0) return;
  const f = faults.outageAfter[i];
  faults.outageAfter.splice(i, 1);
  log(`fault: outage of ${f.seconds}s after ${method}`);
  startOutage(f.seconds, 'refuse');
}

function claimBreakFault(execId, fd) {
  const i = faults.breakOutput.findIndex((f) =>
    (f.fd === undefined || f.fd === fd) && (f.exec_id === undefined || f.exec_id === execId));
  if (i < 0) return null;
  const f = faults.breakOutput[i];
  if (--f.streams <= 0) faults.breakOutput.splice(i, 1);
  return { after: f.after };
}

// ---------------------------------------------------------------------------
// Control endpoint
// ---------------------------------------------------------------------------

class HttpError extends Error {
  constructor(status, msg) {
    super(msg);
    this.status = status;
  }
}

function applyFault(body) {
  const known = new Set(['break_output_after_batches', 'fd', 'exec_id', 'streams', 'kill_sandbox', 'fail_next',
    'outage_after', 'seconds', 'hold_next']);
  for (const k of Object.keys(body)) if (!known.has(k)) throw new HttpError(400, `unknown fault key '${k}'`);
  const out = {};
  if (body.break_output_after_batches !== undefined) {
    const n = body.break_output_after_batches;
    if (!Number.isInteger(n) || n < 0) throw new HttpError(400, 'break_output_after_batches must be an integer >= 0');
    const f = { after: n, streams: body.streams === undefined ? 1 : body.streams };
    if (!Number.isInteger(f.streams) || f.streams < 1) throw new HttpError(400, 'streams must be an integer >= 1');
    if (body.fd !== undefined) {
      if (body.fd !== 1 && body.fd !== 2) throw new HttpError(400, 'fd must be 1 or 2');
      f.fd = body.fd;
    }
    if (body.exec_id !== undefined) f.exec_id = String(body.exec_id);
    faults.breakOutput.push(f);
    out.break_output = f;
  } else if (body.fd !== undefined || body.streams !== undefined || body.exec_id !== undefined) {
    throw new HttpError(400, 'fd/streams/exec_id only go with break_output_after_batches');
  }
  if (body.fail_next !== undefined) {
    const f = body.fail_next;
    if (!f || typeof f.method !== 'string') throw new HttpError(400, 'fail_next.method is required');
    if (!handlers[f.method]) throw new HttpError(400, `fail_next.method '${f.method}' is not an RPC of the fake`);
    const code = f.code === undefined ? STATUS.UNAVAILABLE : f.code;
    if (!Number.isInteger(code) || code < 1 || code > 16) throw new HttpError(400, 'fail_next.code must be a gRPC status 1..16');
    const times = f.times === undefined ? 1 : f.times;
    if (!Number.isInteger(times) || times < 1) throw new HttpError(400, 'fail_next.times must be an integer >= 1');
    const ff = { method: f.method, code, message: f.message || `fake fault injected into ${f.method}`, times };
    faults.failNext.push(ff);
    out.fail_next = ff;
  }
  if (body.outage_after !== undefined) {
    if (!handlers[body.outage_after]) throw new HttpError(400, `outage_after '${body.outage_after}' is not an RPC of the fake`);
    const secs = body.seconds === undefined ? 2 : body.seconds;
    if (!(typeof secs === 'number' && secs > 0 && secs <= 600)) throw new HttpError(400, 'seconds must be a number in (0, 600]');
    const f = { method: body.outage_after, seconds: secs };
    faults.outageAfter.push(f);
    out.outage_after = f;
  } else if (body.seconds !== undefined) {
    throw new HttpError(400, 'seconds only goes with outage_after (or POST /outage)');
  }
  if (body.hold_next !== undefined) {
    const f = body.hold_next;
    if (!f || typeof f.method !== 'string') throw new HttpError(400, 'hold_next.method is required');
    if (!handlers[f.method]) throw new HttpError(400, `hold_next.method '${f.method}' is not an RPC of the fake`);
    if (!(Number.isInteger(f.ms) && f.ms > 0 && f.ms <= 600000)) throw new HttpError(400, 'hold_next.ms must be an integer in (0, 600000]');
    const h = { method: f.method, ms: f.ms };
    faults.holdNext.push(h);
    out.hold_next = h;
  }
  if (body.kill_sandbox !== undefined) {
    const sb = sandboxes.get(String(body.kill_sandbox));
    if (!sb) throw new HttpError(404, `no sandbox ${body.kill_sandbox}`);
    const was = finishSandbox(sb, 'killed',
      { status: GS.TERMINATED, exception: 'Sandbox was killed (fake fault kill_sandbox)' }, { killed: true });
    if (!was) {
      // Already finished: still make its execs disappear.
      sb.killed = true;
      for (const id of sb.execs) {
        const ex = execs.get(id);
        if (ex && !ex.gone) { ex.gone = true; ex.events.emit('gone'); }
      }
    }
    out.kill_sandbox = { sandbox_id: sb.sandbox_id, was_running: was };
  }
  return { ok: true, armed: out };
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let n = 0;
    req.on('data', (c) => {
      n += c.length;
      if (n > 1 << 20) reject(new HttpError(413, 'body too large'));
      else chunks.push(c);
    });
    req.on('end', () => {
      const s = Buffer.concat(chunks).toString('utf8');
      if (!s.trim()) return resolve({});
      try {
        const v = JSON.parse(s);
        if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
        resolve(v);
      } catch (e) {
        reject(new HttpError(400, `body must be a JSON object: ${e.message}`));
      }
    });
    req.on('error', reject);
  });
}

async function control(req) {
  const u = new URL(req.url, 'http://localhost');
  const route = `${req.method} ${u.pathname.replace(/\/+$/, '') || '/'}`;
  switch (route) {
    case 'GET /health':
      return { ok: true };
    case 'POST /fault':
      return applyFault(await readBody(req));
    case 'GET /faults':
      return { break_output: faults.breakOutput, fail_next: faults.failNext, outage_after: faults.outageAfter,
        hold_next: faults.holdNext };
    case 'DELETE /faults':
      faults.breakOutput.length = 0;
      faults.failNext.length = 0;
      faults.holdNext.length = 0;
      faults.outageAfter.length = 0;
      return { ok: true };
    case 'POST /outage': {
      const b = await readBody(req);
      const secs = b.seconds;
      if (!(typeof secs === 'number' && secs > 0 && secs <= 600)) throw new HttpError(400, 'seconds must be a number in (0, 600]');
      const mode = b.mode === undefined ? 'refuse' : b.mode;
      if (mode !== 'refuse' && mode !== 'reset') throw new HttpError(400, "mode must be 'refuse' or 'reset'");
      startOutage(secs, mode);
      return outageInfo();
    }
    case 'GET /outage':
      return outageInfo();
    case 'DELETE /outage':
      endOutage();
      return outageInfo();
    case 'GET /calls': {
      const m = u.searchParams.get('method');
      const since = Number(u.searchParams.get('since') || 0);
      return calls.filter((c) => (!m || c.method === m) && c.seq > since);
    }
    case 'DELETE /calls':
      calls.length = 0;
      return { ok: true };
    case 'GET /sandboxes':
      return [...sandboxes.values()].map(sandboxInfo);
    case 'GET /execs':
      return [...execs.values()].map(execInfo);
    case 'GET /images':
      return [...images.values()].map((im) => ({
        image_id: im.image_id, kind: im.kind, status: im.status, exception: im.exception || null,
        dockerfile_commands: im.dockerfile_commands, tag: im.tag || null, dir: im.dir || null,
        from_sandbox: im.from_sandbox || null, created_at: im.created_at, finished_at: im.finished_at,
      }));
    case 'POST /secret': {
      const b = await readBody(req);
      if (!b.name || typeof b.name !== 'string') throw new HttpError(400, 'name is required');
      const envDict = b.env || {};
      for (const [k, v] of Object.entries(envDict)) {
        if (typeof v !== 'string') throw new HttpError(400, `env.${k} must be a string`);
      }
      const env = normEnv(b.environment);
      const key = `${env}\0${b.name}`;
      const id = secretsByName.get(key) || newId('st');
      secrets.set(id, { secret_id: id, name: b.name, environment: env, env: { ...envDict }, created_at: Date.now() });
      secretsByName.set(key, id);
      return { secret_id: id };
    }
    default:
      throw new HttpError(404, `no route ${route}`);
  }
}

const controlServer = http.createServer((req, res) => {
  control(req).then(
    (v) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(v, null, 1) + '\n');
    },
    (e) => {
      const status = e instanceof HttpError ? e.status : 500;
      if (status === 500) warn(`control error: ${e.stack}`);
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ok: false, error: e.message }) + '\n');
    });
});

// ---------------------------------------------------------------------------
// The gRPC port clients see: a TCP relay in front of grpc-js, so that an
// outage can cut connections and refuse new ones like a real network fault
// ---------------------------------------------------------------------------

const relay = {
  server: null, port: 0, backend: 0, pairs: new Set(),
  outage: null, outages: 0, resets: 0,
};

function relayAccept(client) {
  if (relay.outage) { // mode "reset": accepted, then reset before any byte is read
    relay.resets++;
    client.resetAndDestroy();
    return;
  }
  const up = net.connect(relay.backend, '127.0.0.1');
  const pair = { client, up };
  relay.pairs.add(pair);
  client.setNoDelay(true);
  up.setNoDelay(true);
  const drop = () => {
    relay.pairs.delete(pair);
    if (!client.destroyed) client.destroy();
    if (!up.destroyed) up.destroy();
  };
  client.on('error', drop);
  up.on('error', drop);
  client.on('close', drop);
  up.on('close', drop);
  client.pipe(up);
  up.pipe(client);
}

function relayListen(port, cb) {
  const srv = net.createServer(relayAccept);
  relay.server = srv;
  srv.on('error', (e) => {
    if (e.code === 'EADDRINUSE' && port) { // taken meanwhile: try again shortly
      warn(`relay: port ${port} busy (${e.message}); retrying`);
      setTimeout(() => { if (relay.server === srv) srv.listen(port, '127.0.0.1'); }, 100);
      return;
    }
    warn(`relay error: ${e.message}`);
    shutdown(1);
  });
  srv.listen(port, '127.0.0.1', () => {
    relay.port = srv.address().port;
    if (cb) cb(relay.port);
  });
}

function startOutage(seconds, mode) {
  if (relay.outage) clearTimeout(relay.outage.timer);
  else relay.outages++;
  relay.outage = { mode, until: Date.now() + seconds * 1000, timer: setTimeout(endOutage, seconds * 1000) };
  log(`outage: ${seconds}s, mode ${mode}`);
  for (const { client, up } of [...relay.pairs]) {
    relay.resets++;
    client.resetAndDestroy();
    up.destroy();
  }
  relay.pairs.clear();
  if (mode === 'refuse' && relay.server) {
    relay.server.close();
    relay.server = null;
  } else if (mode === 'reset' && !relay.server) {
    relayListen(relay.port);
  }
}

function endOutage() {
  if (!relay.outage) return;
  clearTimeout(relay.outage.timer);
  relay.outage = null;
  log('outage over');
  if (!relay.server) relayListen(relay.port);
}

function outageInfo() {
  const o = relay.outage;
  return {
    active: !!o, mode: o ? o.mode : null, ends_in_ms: o ? Math.max(0, o.until - Date.now()) : 0,
    outages: relay.outages, resets: relay.resets,
  };
}

// ---------------------------------------------------------------------------
// Startup and shutdown
// ---------------------------------------------------------------------------

function killAllProcesses() {
  for (const sb of sandboxes.values()) killGroup(sb.entrypoint && sb.entrypoint.pid);
  for (const ex of execs.values()) killGroup(ex.pid);
}

const packageDef = protoLoader.loadSync(opts.proto, {
  keepCase: true, longs: Number, enums: Number, defaults: false, oneofs: true,
});
const serviceDef = packageDef['modal.client.ModalClient'];
for (const name of Object.keys(serviceDef)) {
  if (!handlers[name]) {
    warn(`note: ${name} is in the proto but has no handler`);
  }
}

const server = new grpc.Server({
  'grpc.max_receive_message_length': 100 * 1024 * 1024,
  'grpc.max_send_message_length': 100 * 1024 * 1024,
});
const impl = {};
for (const name of Object.keys(serviceDef)) if (handlers[name]) impl[name] = handlers[name];
server.addService(serviceDef, impl);

let shuttingDown = false;
function shutdown(code) {
  if (shuttingDown) return;
  shuttingDown = true;
  log('shutting down');
  killAllProcesses();
  for (const sb of sandboxes.values()) if (sb.timer) clearTimeout(sb.timer);
  server.forceShutdown();
  if (relay.outage) clearTimeout(relay.outage.timer);
  if (relay.server) relay.server.close();
  for (const { client, up } of relay.pairs) { client.destroy(); up.destroy(); }
  controlServer.close();
  if (controlServer.closeAllConnections) controlServer.closeAllConnections();
  setImmediate(() => process.exit(code));
}

process.on('SIGTERM', () => shutdown(0));
process.on('SIGINT', () => shutdown(0));
process.on('SIGHUP', () => shutdown(0));
process.on('exit', killAllProcesses);
process.on('uncaughtException', (e) => {
  warn(`uncaught exception: ${e.stack || e}`);
  shutdown(1);
});

server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, backend) => {
  if (err) {
    warn(`cannot bind gRPC port: ${err.message}`);
    process.exit(1);
  }
  relay.backend = backend;
  controlServer.on('error', (e) => {
    warn(`control server error: ${e.message}`);
    shutdown(1);
  });
  relayListen(opts.port, (port) => controlServer.listen(opts.controlPort, '127.0.0.1', () => {
    const cport = controlServer.address().port;
    process.stdout.write(`LISTENING ${port}\nCONTROL ${cport}\n`);
    log(`state dir ${stateDir}`);
    if (opts.exitOnStdinEof) {
      process.stdin.on('end', () => shutdown(0));
      process.stdin.on('error', () => shutdown(0));
      process.stdin.resume();
    }
  }));
});
