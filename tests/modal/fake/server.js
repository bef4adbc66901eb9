#!/usr/bin/env node
// Fake Modal control plane for sbxd tests.
//
// It speaks the gRPC sandbox API of modal.client.ModalClient and the
// TaskCommandRouter as used by the official JS SDK modal@0.11.1 (exec, stdio,
// stdin, wait and filesystem snapshots on the router; V2 sandboxes; the
// filesystem tool; server-directed retries), and still the ContainerExec
// family that modal@0.5.6 used. It loads the same cut-down protos that the C
// provider is generated from (proto/modal/modal_api.proto and
// task_command_router.proto), so the two always agree on the wire format.
// "Sandboxes" are plain folders, and "exec" runs real local processes.
// There is NO isolation: this is a test double, not a sandbox.
//
// Usage:
//   node server.js --port 0 --state DIR [--token-id ID --token-secret SECRET]
//        [--control-port 0] [--token-ttl 3600] [--build-delay-ms 100]
//        [--max-output-bytes 67108864] [--exit-on-stdin-eof] [--verbose]
//        [--tls] [--host 127.0.0.1] [--router-token-ttl 3600]
//        [--image-builder-version 2025.06] [--stdio-window BYTES]
//
// Once ready it prints to stdout, in this order:
//   LISTENING <grpc port>     the control plane on --host: h2c, or TLS with --tls
//   CONTROL <http port>       HTTP/1.1 JSON control endpoint on 127.0.0.1
//   ROUTER <port>             the TaskCommandRouter on --host, always TLS
//   CA <file>                 the CA that signed both servers' certificate
//                             (SANs 127.0.0.1-3 and localhost), made with
//                             openssl(1) in DIR/tls on first start
// Trap for SDK tests: npm modal dials the router in plain h2c when the control
// plane URL is localhost/127.0.0.1, so run it with --tls --host 127.0.0.2 and
// GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=<CA> (grpc-js then ignores NODE_EXTRA_CA_CERTS).
//
// The router: TaskGetCommandRouterAccess (V2: SandboxGetCommandRouterAccess,
// or in SandboxCreateV2's reply) gives {url: https://<host>:<ROUTER>, jwt}; the
// JWT (--router-token-ttl) names the task and the client that asked, and is
// the only credential router calls carry (authorization: Bearer). Exec ids
// are the client's: a repeated TaskExecStart of a known id is not run again.
// TaskExecStdioRead streams bytes from an offset and ends cleanly at EOF;
// with --stdio-window N an exec's stdout pipe is paused while more than N of
// its bytes were not streamed to anyone yet (a router with backpressure: a
// slow reader stops the writer instead of losing the oldest bytes);
// TaskExecStdinWrite is by offset (an overlap is a retry and is skipped);
// TaskExecWait/Poll answer {code} or {signal}; TaskSnapshotFilesystem is
// idempotent on snapshot_id and records ttl_seconds (-1 never, 0/absent 30 d).
// V2 sandboxes get ids of another shape (sbv2-...), and V1 calls about them
// (or V2 calls about V1 ones) are NOT_FOUND. The filesystem tool
// /__modal/.bin/modal-sandbox-fs-tools is played by fs-tools.js.
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
//     "drop_stdio_after_bytes": N       the next TaskExecStdioRead stream ends
//          with UNAVAILABLE after N bytes (mid-chunk); "fd", "exec_id",
//          "streams" as for break_output_after_batches
//     "fail_after": {"method", "code", "times"}  the call is carried out, but
//          its reply is that error (a lost reply: the client must retry
//          without doing it twice)
//     "refuse_router": N                the next N router-access calls answer
//          FAILED_PRECONDITION (router not enabled for the task)
//     fail_next also takes "retry_after_secs": the error then carries an
//          RPCRetryPolicy in grpc-status-details-bin
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
//   GET    /clients[?since=SEQ]       which RPCs each client used:
//          {client: {control: {method: n}, router: {method: n}}}; a client is
//          its x-modal-libmodal-version (else user-agent); router calls count
//          for the client that fetched their token
//   GET    /calls[?method=M&client=C&service=control|router&since=SEQ]
//          calls received: [{seq, method, service, client, time
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
const { spawn, execFileSync } = require('child_process');
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
    stdioWindow: 0,
    exitOnStdinEof: false,
    verbose: false,
    tls: false,
    host: '127.0.0.1',
    routerTokenTtl: 3600,
    imageBuilderVersion: '2025.06',
    proto: path.resolve(__dirname, '../../../proto/modal/modal_api.proto'),
    routerProto: path.resolve(__dirname, '../../../proto/modal/task_command_router.proto'),
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
      case '--stdio-window': o.stdioWindow = Number(need(i)); i++; break;
      case '--proto': o.proto = path.resolve(need(i)); i++; break;
      case '--router-proto': o.routerProto = path.resolve(need(i)); i++; break;
      case '--tls': o.tls = true; break;
      case '--host': o.host = need(i); i++; break;
      case '--router-token-ttl': o.routerTokenTtl = Number(need(i)); i++; break;
      case '--image-builder-version': o.imageBuilderVersion = need(i); i++; break;
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
  if (!(o.routerTokenTtl > 0)) usage('bad --router-token-ttl');
  if (net.isIP(o.host) !== 4 || !o.host.startsWith('127.')) usage('--host must be a 127.x.y.z address');
  if (!(o.buildDelayMs >= 0)) usage('bad --build-delay-ms');
  if (!(o.maxOutputBytes > 0)) usage('bad --max-output-bytes');
  if (!(o.stdioWindow >= 0)) usage('bad --stdio-window');
  if (!o.state) usage('--state DIR is required');
  return o;
}

function usage(msg) {
  if (msg) process.stderr.write(`server.js: ${msg}\n`);
  process.stderr.write(
    'usage: node server.js --port N --state DIR [--token-id ID --token-secret S]\n' +
    '       [--control-port N] [--token-ttl SECS] [--build-delay-ms MS]\n' +
    '       [--max-output-bytes N] [--stdio-window N] [--exit-on-stdin-eof] [--verbose] [--proto FILE]\n' +
    '       [--tls] [--host 127.x.y.z] [--router-token-ttl SECS] [--router-proto FILE]\n');
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
const faults = {
  breakOutput: [], failNext: [], outageAfter: [], holdNext: [], dropStdio: [], failAfter: [], routerRefuse: 0,
};
const snapshotsById = new Map();  // TaskSnapshotFilesystem snapshot_id -> image_id

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
  if (e instanceof RpcError) {
    const g = { code: e.code, details: e.details };
    if (e.metadata) g.metadata = e.metadata;
    return g;
  }
  warn(`internal error: ${e && e.stack ? e.stack : e}`);
  return { code: STATUS.INTERNAL, details: `fake server internal error: ${e && e.message ? e.message : e}` };
}

const MD_KEYS = [
  'x-modal-token-id', 'x-modal-client-type', 'x-modal-client-version',
  'x-modal-libmodal-version', 'x-idempotency-key', 'x-retry-attempt', 'x-retry-delay',
  'x-throttle-retry-attempt', 'x-throttle-retry-delay', 'x-modal-host',
  'user-agent', 'grpc-accept-encoding',
];

// Which client made a call: the SDK's x-modal-libmodal-version (e.g.
// modal-js/0.11.1), else the user-agent. Router calls carry only a bearer
// token, so they are put down to the client that fetched that token.
function clientOf(md) {
  return mdGet(md, 'x-modal-libmodal-version') || mdGet(md, 'user-agent') || 'unknown';
}

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
  const router = ROUTER_METHODS.has(method);
  let client = clientOf(call.metadata);
  if (router) {
    const p = routerTokenPayload(call.metadata);
    client = p && p.client ? p.client : 'unknown';
    md['has-router-token'] = !!p;
  }
  const rec = {
    seq: ++callSeq, method, service: router ? 'router' : 'control', client, time: Date.now(), metadata: md,
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

// ---------------------------------------------------------------------------
// The command router's tokens and TLS
// ---------------------------------------------------------------------------

const ROUTER_METHODS = new Set([
  'TaskExecStart', 'TaskExecStdioRead', 'TaskExecStdinWrite', 'TaskExecStdinStatus',
  'TaskExecStdinWriteStream', 'TaskExecWait', 'TaskExecPoll', 'TaskSnapshotFilesystem',
  'SandboxStdioReadV2', 'SandboxStdinWriteV2',
]);

function signPayload(payload) {
  const header = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
  const body = b64url(JSON.stringify(payload));
  const sig = b64url(crypto.createHmac('sha256', authKey).update(`${header}.${body}`).digest());
  return `${header}.${body}.${sig}`;
}

// A router JWT names its task and the client that asked for it.
function makeRouterToken(taskId, client) {
  const now = Math.floor(Date.now() / 1000);
  return signPayload({
    iss: 'sbxd-modal-fake-router', aud: 'task-command-router', task_id: taskId, client,
    iat: now, exp: now + Math.round(opts.routerTokenTtl), jti: crypto.randomBytes(8).toString('hex'),
  });
}

// The verified payload of the call's router token (expired ones included,
// so that the log still knows the client), or null.
function routerTokenPayload(md) {
  const a = mdGet(md, 'authorization');
  if (!a || !a.startsWith('Bearer ')) return null;
  const parts = a.slice(7).split('.');
  if (parts.length !== 3) return null;
  const sig = b64url(crypto.createHmac('sha256', authKey).update(`${parts[0]}.${parts[1]}`).digest());
  if (sig !== parts[2]) return null;
  try {
    const p = JSON.parse(Buffer.from(parts[1], 'base64url').toString('utf8'));
    return p.aud === 'task-command-router' ? p : null;
  } catch {
    return null;
  }
}

function checkRouterAuth(md, taskId) {
  const p = routerTokenPayload(md);
  if (!p) {
    return new RpcError(STATUS.UNAUTHENTICATED,
      'missing or bad authorization: Bearer <jwt from TaskGetCommandRouterAccess>');
  }
  if (!(p.exp > Date.now() / 1000)) return new RpcError(STATUS.UNAUTHENTICATED, 'router token has expired');
  if (taskId !== undefined && taskId !== p.task_id) {
    return new RpcError(STATUS.PERMISSION_DENIED, `router token is for task ${p.task_id}, not ${taskId}`);
  }
  return null;
}

// A CA and a server certificate for 127.0.0.1, 127.0.0.2 and localhost, made
// once per state dir with openssl(1); tests hand DIR/tls/ca.pem to clients.
function ensureTls() {
  const dir = path.join(stateDir, 'tls');
  const f = (n) => path.join(dir, n);
  if (!fs.existsSync(f('server.pem'))) {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    const ossl = (...a) => execFileSync('openssl', a, { stdio: ['ignore', 'ignore', 'pipe'] });
    ossl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', f('ca.key'), '-out', f('ca.pem'), '-days', '30', '-subj', '/CN=sbxd modal fake CA',
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
    ossl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', f('server.key'), '-out', f('server.csr'), '-subj', '/CN=sbxd modal fake');
    fs.writeFileSync(f('ext.cnf'),
      'subjectAltName=IP:127.0.0.1,IP:127.0.0.2,IP:127.0.0.3,DNS:localhost\n' +
      'basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n');
    ossl('x509', '-req', '-in', f('server.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'),
      '-CAcreateserial', '-out', f('server.pem'), '-days', '30', '-extfile', f('ext.cnf'));
  }
  return {
    caFile: f('ca.pem'), ca: fs.readFileSync(f('ca.pem')),
    key: fs.readFileSync(f('server.key')), cert: fs.readFileSync(f('server.pem')),
  };
}

function checkAuth(method, md) {
  if (ROUTER_METHODS.has(method)) return checkRouterAuth(md);
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
  const e = new RpcError(f.code, f.message);
  if (f.retry_after_secs !== undefined) {
    e.metadata = new grpc.Metadata();
    e.metadata.set('grpc-status-details-bin', retryPolicyStatus(f.code, f.message, f.retry_after_secs));
  }
  return e;
}

// ---------------------------------------------------------------------------
// Server-directed retries: google.rpc.Status{code=1, message=2, details=3}
// holding one google.protobuf.Any{type_url=1, value=2} of
// modal.client.RPCRetryPolicy{retry_after_secs=1 (float)}, encoded by hand.
// ---------------------------------------------------------------------------

function pbVarint(n) {
  const out = [];
  let v = BigInt.asUintN(64, BigInt(n));
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v) b |= 0x80;
    out.push(b);
  } while (v);
  return Buffer.from(out);
}

function pbField(num, wire, payload) {
  const key = pbVarint((num << 3) | wire);
  if (wire === 0) return Buffer.concat([key, pbVarint(payload)]);
  if (wire === 5) return Buffer.concat([key, payload]);
  const b = Buffer.isBuffer(payload) ? payload : Buffer.from(payload, 'utf8');
  return Buffer.concat([key, pbVarint(b.length), b]);
}

function retryPolicyStatus(code, message, secs) {
  const f = Buffer.alloc(4);
  f.writeFloatLE(secs);
  const policy = pbField(1, 5, f);
  const any = Buffer.concat([
    pbField(1, 2, 'type.googleapis.com/modal.client.RPCRetryPolicy'), pbField(2, 2, policy)]);
  return Buffer.concat([pbField(1, 0, code), pbField(2, 2, message), pbField(3, 2, any)]);
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
      .then((r) => {
        // fail_after: the call was carried out, but its reply is an error.
        const lost = takeFailAfter(method);
        if (lost) reply(toGrpcError(lost));
        else reply(null, r);
      }, (e) => reply(toGrpcError(e)));
  };
}

function takeFailAfter(method) {
  const i = faults.failAfter.findIndex((f) => f.method === method);
  if (i < 0) return null;
  const f = faults.failAfter[i];
  if (--f.times <= 0) faults.failAfter.splice(i, 1);
  log(`fault: ${method} was done, its reply is lost (code ${f.code})`);
  return new RpcError(f.code, `fake fault: the reply of ${method} was lost (the call was carried out)`);
}

// Client-streaming RPCs (TaskExecStdinWriteStream).
function clientStream(method, fn) {
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
    Promise.resolve()
      .then(() => fn(call, ctx, rec))
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

// V1 and V2 sandboxes live in different backends: a V1 call about a V2
// sandbox (or the reverse) finds nothing, as it would at Modal.
function getSandbox(id, v2 = false) {
  const sb = sandboxes.get(id);
  if (!sb || !!sb.v2 !== v2) fail(STATUS.NOT_FOUND, `Sandbox ${id} not found`);
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

// The entrypoint's bytes with their offsets (V2 stdio on the router).
function appendRaw(sb, fd, data) {
  const o = sb.raw[fd];
  o.chunks.push({ off: o.end, data });
  o.end += data.length;
  while (o.end - o.start > MAX_LOG_BYTES && o.chunks.length > 1) {
    const c = o.chunks.shift();
    o.start = c.off + c.data.length;
  }
  sb.events.emit('raw');
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
  child.stdout.on('data', (d) => { appendLog(sb, FD_STDOUT, d.toString('utf8')); appendRaw(sb, FD_STDOUT, d); });
  child.stderr.on('data', (d) => { appendLog(sb, FD_STDERR, d.toString('utf8')); appendRaw(sb, FD_STDERR, d); });
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
  ws.closeTunnels(sb); // workspace.js
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
    v2: !!sb.v2,
    open_ports: sb.open_ports,
    tunnels: sb.tunnels || [],
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

// Router stdin: by byte offset. A write that overlaps what was written is a
// retry (the overlap is skipped); one past the end is refused.
function feedStdinAt(st, offset, data, eof) {
  if (!st) return;
  const off = Number(offset) || 0;
  const d = data ? Buffer.from(data) : Buffer.alloc(0);
  if (st.closed) {
    if (off + d.length > st.bytes) fail(STATUS.FAILED_PRECONDITION, 'stdin is already closed');
    return;
  }
  if (off > st.bytes) {
    fail(STATUS.FAILED_PRECONDITION, `stdin offset ${off} is past the ${st.bytes} bytes written so far`);
  }
  const tail = d.subarray(st.bytes - off);
  if (tail.length) {
    st.bytes += tail.length;
    if (!st.child.stdin.destroyed) st.child.stdin.write(tail);
  }
  if (eof) {
    st.closed = true;
    if (!st.child.stdin.destroyed) st.child.stdin.end();
  }
}

// ---------------------------------------------------------------------------
// Exec
// ---------------------------------------------------------------------------

function newOut() {
  return { batches: [], next: 1, final: null, chunks: [], start: 0, end: 0 };
}

// The bytes of one fd from `offset` on, as kept for TaskExecStdioRead (the
// oldest are dropped past --max-output-bytes, as batches are).
function rawFrom(o, offset) {
  const parts = [];
  for (const c of o.chunks) {
    if (c.off + c.data.length <= offset) continue;
    parts.push(offset > c.off ? c.data.subarray(offset - c.off) : c.data);
  }
  return parts;
}

function addBatch(ex, fd, data) {
  const o = ex.out[fd];
  const b = { batch_index: o.next++, fd, data, seq: ++ex.batchSeq };
  o.batches.push(b);
  o.chunks.push({ off: o.end, data });
  o.end += data.length;
  ex.outBytes += data.length;
  ex.totalBytes[fd] += data.length;
  // Bound memory: drop the oldest batches (across both fds).
  while (ex.outBytes > opts.maxOutputBytes) {
    const a = ex.out[FD_STDOUT].batches[0];
    const c = ex.out[FD_STDERR].batches[0];
    const victimFd = !c || (a && a.seq < c.seq) ? FD_STDOUT : FD_STDERR;
    const v = ex.out[victimFd].batches.shift();
    if (!v) break;
    const rc = ex.out[victimFd].chunks.shift();
    if (rc) ex.out[victimFd].start = rc.off + rc.data.length;
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

function setExited(ex, rc, signal) {
  if (ex.exit_code !== null) return;
  ex.exit_code = ex.timed_out ? 124 : rc;
  ex.exit_signal = !ex.timed_out && signal ? os.constants.signals[signal] || null : null;
  ex.exited_at = Date.now();
  if (ex.timer) clearTimeout(ex.timer);
  log(`exec ${ex.exec_id} exited with ${ex.exit_code}`);
  ex.events.emit('exit');
  // Output is complete once the pipes close; a background grandchild may hold
  // them open, so stop waiting after a grace period.
  if (!ex.outputDone) ex.graceTimer = setTimeout(() => finalizeOutput(ex), EXIT_GRACE_MS);
}

const FS_TOOLS_PATH = '/__modal/.bin/modal-sandbox-fs-tools';

// `over` (router execs): {exec_id, env} chosen by the client.
function startExec(sb, req, over = {}) {
  const command = req.command || [];
  if (command.length === 0) fail(STATUS.INVALID_ARGUMENT, 'command must not be empty');
  const execEnv = { ...secretsEnv(req.secret_ids), ...(over.env || {}) };
  const execId = over.exec_id || newId('ce');
  const cwd = sandboxPath(sb, req.workdir, sb.workdir || '/');
  const env = processEnv(sb, execEnv, req.pty_info);
  env.MODAL_EXEC_ID = execId;
  const ex = {
    exec_id: execId, sandbox_id: sb.sandbox_id, task_id: sb.task_id, command,
    workdir: req.workdir === undefined ? null : req.workdir, cwd,
    timeout_secs: req.timeout_secs || 0, pty: !!(req.pty_info && req.pty_info.enabled),
    pty_info: req.pty_info || null,
    stdout_output: req.stdout_output || 0, stderr_output: req.stderr_output || 0,
    env_keys: Object.keys(execEnv),
    pid: null, child: null, started_at: Date.now(), exited_at: null,
    exit_code: null, exit_signal: null, timed_out: false, spawn_error: null, gone: false,
    via: over.exec_id ? 'router' : 'ContainerExec', client: over.client || null,
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

  // Modal's filesystem tool is played by fs-tools.js (same JSON commands).
  const argv0 = command[0] === FS_TOOLS_PATH
    ? [process.execPath, path.join(__dirname, 'fs-tools.js'), ...command.slice(1)] : command;
  const argv = ex.pty ? ws.ptyArgv(argv0, req.pty_info) : argv0; // workspace.js
  let child;
  try {
    child = spawn(argv[0], argv.slice(1), {
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
  child.stdout.on('data', (d) => {
    const fd = route(FD_STDOUT);
    if (!fd) return;
    addBatch(ex, fd, d);
    const o = ex.out[fd];
    if (opts.stdioWindow && fd === FD_STDOUT && o.end - (o.streamed || 0) > opts.stdioWindow) {
      o.pipe = child.stdout;
      child.stdout.pause();
    }
  });
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
  child.on('exit', (code, signal) => setExited(ex, exitCodeOf(code, signal), signal));
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
    workdir: ex.workdir, cwd: ex.cwd, timeout_secs: ex.timeout_secs, pty: ex.pty, pty_info: ex.pty_info,
    env_keys: ex.env_keys, pid: ex.pid, started_at: ex.started_at, exited_at: ex.exited_at,
    exit_code: ex.exit_code, exit_signal: ex.exit_signal, timed_out: ex.timed_out,
    spawn_error: ex.spawn_error, gone: ex.gone, via: ex.via, client: ex.client,
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

// SandboxCreate and SandboxCreateV2 (v2: the V2 id shape).
function createSandbox(req, v2, extraEnv = {}) {
  const app = apps.get(req.app_id);
  if (!app) fail(STATUS.NOT_FOUND, `App ${req.app_id} not found`);
  const def = req.definition;
  if (!def) fail(STATUS.INVALID_ARGUMENT, 'definition is required');
  for (const t of req.tags || []) {
    if (!t.tag_name) fail(STATUS.INVALID_ARGUMENT, 'tag_name must not be empty');
  }
  if (!def.image_id) fail(STATUS.INVALID_ARGUMENT, 'definition.image_id is required');
  const im = getImage(def.image_id);
  if (im.status === 'building') fail(STATUS.FAILED_PRECONDITION, `Image ${im.image_id} has not finished building`);
  if (im.status === 'failed') fail(STATUS.FAILED_PRECONDITION, `Image ${im.image_id} failed to build`);
  if (def.workdir !== undefined && !def.workdir.startsWith('/')) {
    fail(STATUS.INVALID_ARGUMENT, `workdir must be an absolute path, got '${def.workdir}'`);
  }
  ws.checkNetworkAccess(def.network_access); // workspace.js
  const env = { ...secretsEnv(def.secret_ids), ...extraEnv };
  const name = def.name === undefined || def.name === '' ? null : def.name;
  if (name !== null) {
    for (const other of sandboxes.values()) {
      if (other.app_id === app.app_id && other.name === name && isRunning(other)) {
        fail(STATUS.ALREADY_EXISTS, `Sandbox with name '${name}' already exists in app '${app.name}' (${other.sandbox_id})`);
      }
    }
  }
  // V1 ids are sb- + 22 base62 characters; the SDKs route anything else
  // to the V2 calls, so V2 ids get another shape.
  const id = v2 ? newId('sbv2') : newId('sb');
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
    tags: new Map((req.tags || []).map((t) => [t.tag_name, t.tag_value || ''])), v2,
    open_ports: ((def.open_ports && def.open_ports.ports) || []).map((p) => p.port),
    execs: new Set(), entrypoint: null, timer: null,
    logs: { [FD_STDOUT]: { items: [], bytes: 0 }, [FD_STDERR]: { items: [], bytes: 0 } }, logSeq: 0,
    raw: { [FD_STDOUT]: newOut(), [FD_STDERR]: newOut() },
    events: newEmitter(),
  };
  sandboxes.set(id, sb);
  tasks.set(sb.task_id, sb);
  ws.openTunnels(sb, def.open_ports && def.open_ports.ports); // workspace.js
  sb.timer = setTimeout(() => {
    finishSandbox(sb, 'timeout', { status: GS.TIMEOUT, exception: `Sandbox timed out after ${sb.timeout_secs}s` });
  }, sb.timeout_secs * 1000);
  startEntrypoint(sb);
  log(`sandbox ${id} (${name || 'unnamed'}${v2 ? ', V2' : ''}) in app ${app.name}: root=${root}`);
  return sb;
}

const DEFAULT_SNAPSHOT_TTL_SECS = 30 * 24 * 3600;  // the SDKs' default since 0.8.0

// Copies the sandbox's folder into a new image. extra: {via, ttl_seconds}
// (-1: never expires; absent or 0: the 30-day default).
function snapshotSandbox(sb, extra) {
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
    throw new Error(`snapshot copy failed: ${e.message}`);
  }
  const ttl = extra.ttl_seconds === undefined || extra.ttl_seconds === 0 ? DEFAULT_SNAPSHOT_TTL_SECS : extra.ttl_seconds;
  const meta = {
    image_id: imageId, kind: 'snapshot', status: 'built', dir, from_sandbox: sb.sandbox_id,
    dockerfile_commands: [], created_at: Date.now(), finished_at: Date.now(), via: extra.via,
    ttl_seconds: ttl, expires_at: ttl < 0 ? null : Date.now() + ttl * 1000,
  };
  fs.writeFileSync(path.join(imagesDir, `${imageId}.json`), JSON.stringify(meta, null, 1));
  const im = { ...meta, logs: [], events: newEmitter() };
  images.set(imageId, im);
  log(`snapshot of ${sb.sandbox_id} -> ${imageId} (${extra.via}, ttl ${ttl})`);
  return im;
}

function fromName(req, v2) {
  const env = normEnv(req.environment_name);
  const appId = appsByName.get(`${env}\0${req.app_name}`);
  if (!appId) fail(STATUS.NOT_FOUND, `App '${req.app_name}' not found in environment '${env}'`);
  for (const sb of sandboxes.values()) {
    if (sb.app_id === appId && sb.name === req.sandbox_name && isRunning(sb) && !!sb.v2 === v2) {
      return { sandbox_id: sb.sandbox_id };
    }
  }
  fail(STATUS.NOT_FOUND, `No running sandbox named '${req.sandbox_name}' in app '${req.app_name}'`);
}


// Terminals, tunnels, network access and resource usage (sbxd issue 18).
const ws = require('./workspace')({ fail, STATUS, log, creds: () => tls });

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

  SandboxCreate: unary('SandboxCreate', (req) => ({ sandbox_id: createSandbox(req, false).sandbox_id })),

  SandboxGetFromName: unary('SandboxGetFromName', (req) => fromName(req, false)),
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
    try {
      return { image_id: snapshotSandbox(sb, { via: 'SandboxSnapshotFs' }).image_id, result: { status: GS.SUCCESS } };
    } catch (e) {
      return { result: { status: GS.FAILURE, exception: e.message } };
    }
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

// ---------------------------------------------------------------------------
// Today's SDKs: router access, the V2 family, tunnels, image deletion
// ---------------------------------------------------------------------------

let routerPort = 0;
const routerUrl = () => `https://${opts.host}:${routerPort}`;

// fault refuse_router: access is answered FAILED_PRECONDITION ("not enabled
// for this task"), which is how a client learns to fall back to ContainerExec.
function routerAccess(sb, md) {
  if (faults.routerRefuse > 0) {
    faults.routerRefuse--;
    fail(STATUS.FAILED_PRECONDITION, `Command router access is not enabled for task ${sb.task_id}`);
  }
  if (!isRunning(sb)) fail(STATUS.NOT_FOUND, `Task ${sb.task_id} is not running: ${sb.status}`);
  return { jwt: makeRouterToken(sb.task_id, clientOf(md)), url: routerUrl() };
}

// The tunnels workspace.js opened for the declared ports (those listening yet).
function tunnelsOf(sb) {
  return sb.tunnels || [];
}

function sourcesEnv(sources) {
  const env = {};
  for (const src of sources || []) {
    if (src.secret_id) Object.assign(env, secretsEnv([src.secret_id]));
    if (src.env && src.env.contents) Object.assign(env, src.env.contents);
  }
  return env;
}

function waitResult(sb) {
  return sb.result ? { result: sb.result } : {};
}

Object.assign(handlers, {
  TaskGetCommandRouterAccess: unary('TaskGetCommandRouterAccess', (req, ctx, call) => {
    const sb = tasks.get(req.task_id);
    if (!sb || sb.v2) fail(STATUS.NOT_FOUND, `Task ${req.task_id} not found`);
    return routerAccess(sb, call.metadata);
  }),

  SandboxGetCommandRouterAccess: unary('SandboxGetCommandRouterAccess', (req, ctx, call) => {
    const sb = req.sandbox_id ? getSandbox(req.sandbox_id, true) : tasks.get(req.task_id);
    if (!sb || !sb.v2) fail(STATUS.NOT_FOUND, `Task ${req.task_id} not found`);
    return { ...routerAccess(sb, call.metadata), worker_ipv4_address: '127.0.0.1' };
  }),

  SandboxGetTunnels: unary('SandboxGetTunnels', async (req) => {
    const sb = getSandbox(req.sandbox_id);
    await sb.tunnelsReady;
    return { ...waitResult(sb), tunnels: tunnelsOf(sb) };
  }),

  // Any sandbox, V1 or V2 (workspace.js).
  SandboxGetResourceUsage: unary('SandboxGetResourceUsage', (req) => {
    const sb = sandboxes.get(req.sandbox_id);
    if (!sb) fail(STATUS.NOT_FOUND, `Sandbox ${req.sandbox_id} not found`);
    return ws.resourceUsage(sb);
  }),

  // One environment per name; the image builder version is --image-builder-version.
  EnvironmentGetOrCreate: unary('EnvironmentGetOrCreate', (req) => {
    const name = normEnv(req.deployment_name);
    return {
      environment_id: `en-${crypto.createHash('sha256').update(name).digest('hex').slice(0, 22)}`,
      metadata: { name, settings: { image_builder_version: opts.imageBuilderVersion, webhook_suffix: 'modal.run' } },
    };
  }),

  ImageDelete: unary('ImageDelete', (req) => {
    const im = getImage(req.image_id);
    images.delete(im.image_id);
    for (const [k, v] of imagesByKey) if (v === im.image_id) imagesByKey.delete(k);
    if (im.kind === 'snapshot') {
      fs.rmSync(path.join(imagesDir, `${im.image_id}.json`), { force: true });
      if (im.dir) fs.rmSync(im.dir, { recursive: true, force: true });
    }
    log(`image ${im.image_id} deleted`);
    return {};
  }),

  SandboxCreateV2: unary('SandboxCreateV2', (req, ctx, call) => {
    const extra = { ...((req.ephemeral_secrets && req.ephemeral_secrets.contents) || {}), ...sourcesEnv(req.secret_sources) };
    const sb = createSandbox(req, true, extra);
    return {
      sandbox_id: sb.sandbox_id, task_id: sb.task_id, tunnels: tunnelsOf(sb),
      command_router_access: { jwt: makeRouterToken(sb.task_id, clientOf(call.metadata)), url: routerUrl() },
    };
  }),

  SandboxGetFromNameV2: unary('SandboxGetFromNameV2', (req) => fromName(req, true)),

  SandboxGetTaskIdV2: unary('SandboxGetTaskIdV2', (req) => {
    const sb = getSandbox(req.sandbox_id, true);
    return isRunning(sb) ? { task_id: sb.task_id } : { task_id: sb.task_id, task_result: sb.result };
  }),

  SandboxGetTunnelsV2: unary('SandboxGetTunnelsV2', async (req) => {
    const sb = getSandbox(req.sandbox_id, true);
    await sb.tunnelsReady;
    return { ...waitResult(sb), tunnels: tunnelsOf(sb) };
  }),

  SandboxTagsGetV2: unary('SandboxTagsGetV2', (req) => {
    const sb = getSandbox(req.sandbox_id, true);
    return { tags: [...sb.tags].map(([tag_name, tag_value]) => ({ tag_name, tag_value })) };
  }),

  // Replaces the whole set, as the SDK's setTags documents.
  SandboxTagsSetV2: unary('SandboxTagsSetV2', (req) => {
    const sb = getSandbox(req.sandbox_id, true);
    for (const t of req.tags || []) if (!t.tag_name) fail(STATUS.INVALID_ARGUMENT, 'tag_name must not be empty');
    sb.tags = new Map((req.tags || []).map((t) => [t.tag_name, t.tag_value || '']));
    return {};
  }),

  SandboxTerminateV2: unary('SandboxTerminateV2', async (req) => {
    const sb = getSandbox(req.sandbox_id, true);
    if (!isRunning(sb)) return { existing_result: sb.result };
    finishSandbox(sb, 'terminated', { status: GS.TERMINATED, exception: 'Sandbox terminated by SandboxTerminateV2' });
    await waitProcessesGone(sb, 2000);
    return {};
  }),

  SandboxWaitV2: unary('SandboxWaitV2', async (req, ctx) => {
    const sb = getSandbox(req.sandbox_id, true);
    if (isRunning(sb)) await waitFor(sb.events, ['finished'], pollMs(req.timeout), ctx);
    return waitResult(sb);
  }),
});

// ---------------------------------------------------------------------------
// The TaskCommandRouter (its own TLS port)
// ---------------------------------------------------------------------------

// The task a router call names, checked against its token.
function routerTask(call, taskId) {
  const why = checkRouterAuth(call.metadata, taskId);
  if (why) throw why;
  const sb = tasks.get(taskId);
  if (!sb) fail(STATUS.NOT_FOUND, `Task ${taskId} not found`);
  return sb;
}

// The token is checked when a call starts (as a real server would), not
// again when a long wait ends: again = 1 skips it.
function routerExec(call, req, again = 0) {
  if (!again) routerTask(call, req.task_id);
  const ex = execs.get(req.exec_id);
  if (!ex || ex.task_id !== req.task_id) fail(STATUS.NOT_FOUND, `Exec ${req.exec_id} not found in task ${req.task_id}`);
  if (ex.gone) fail(STATUS.NOT_FOUND, `Exec ${req.exec_id} not found: its sandbox ${ex.sandbox_id} is gone`);
  return ex;
}

function exitStatus(ex) {
  if (ex.exit_code === null) return {};
  return ex.exit_signal ? { signal: ex.exit_signal } : { code: ex.exit_code };
}

const STDOUT_CFG = { 0: OUT_DEVNULL, 1: 2 };
const STDERR_CFG = { 0: OUT_DEVNULL, 1: 2, 2: OUT_STDOUT };
const ROUTER_CHUNK = 1 << 20;

function claimDropStdio(execId, fd) {
  const i = faults.dropStdio.findIndex((f) =>
    (f.fd === undefined || f.fd === fd) && (f.exec_id === undefined || f.exec_id === execId));
  if (i < 0) return null;
  const f = faults.dropStdio[i];
  if (--f.streams <= 0) faults.dropStdio.splice(i, 1);
  return { after: f.after };
}

// Sends o's bytes from offset on until `isDone()` and everything is sent;
// fault drop_stdio_after_bytes cuts the stream with UNAVAILABLE after that
// many bytes, mid-chunk if need be. mk(data, off) builds a message.
async function streamBytes(call, ctx, o, offset, em, isDone, isGone, fault, mk, what) {
  if (offset < o.start) fail(STATUS.OUT_OF_RANGE, `offset ${offset} was dropped (output kept from ${o.start})`);
  let sent = 0;
  for (;;) {
    if (isGone()) fail(STATUS.NOT_FOUND, `${what} is gone`);
    for (const part of rawFrom(o, offset)) {
      for (let i = 0; i < part.length; i += ROUTER_CHUNK) {
        let d = part.subarray(i, i + ROUTER_CHUNK);
        let cut = false;
        if (fault && sent + d.length >= fault.after) {
          d = d.subarray(0, fault.after - sent);
          cut = true;
        }
        if (d.length) {
          if (!await send(call, ctx, mk(d, offset))) return;
          offset += d.length;
          sent += d.length;
          if (offset > (o.streamed || 0)) o.streamed = offset;
          if (o.pipe && o.end - o.streamed <= opts.stdioWindow) { o.pipe.resume(); o.pipe = null; }
        }
        if (cut) {
          log(`fault: dropping the stdio stream of ${what} after ${sent} bytes`);
          fail(STATUS.UNAVAILABLE, `fake fault: stdio stream dropped after ${sent} bytes`);
        }
      }
    }
    if (isDone() && offset >= o.end) return;
    if (offset < o.end) continue;
    if (await waitFor(em, ['output', 'raw', 'gone', 'finished'], MAX_POLL_SECS * 1000, ctx) === 'cancelled') return;
  }
}

const routerHandlers = {
  TaskExecStart: unary('TaskExecStart', (req, ctx, call) => {
    const sb = routerTask(call, req.task_id);
    if (!req.exec_id) fail(STATUS.INVALID_ARGUMENT, 'exec_id is required (the client chooses it)');
    const old = execs.get(req.exec_id);
    if (old) {
      if (old.task_id !== req.task_id) fail(STATUS.ALREADY_EXISTS, `exec_id ${req.exec_id} is taken`);
      old.starts++;
      log(`exec ${req.exec_id}: repeated TaskExecStart, not run again`);
      return {};
    }
    if (!isRunning(sb)) fail(STATUS.NOT_FOUND, `Task ${req.task_id} (sandbox ${sb.sandbox_id}) is not running: ${sb.status}`);
    const p = routerTokenPayload(call.metadata);
    const ex = startExec(sb, {
      command: req.command_args, workdir: req.workdir, timeout_secs: req.timeout_secs,
      pty_info: req.pty_info, secret_ids: req.secret_ids,
      stdout_output: STDOUT_CFG[req.stdout_config || 0], stderr_output: STDERR_CFG[req.stderr_config || 0],
    }, { exec_id: req.exec_id, env: { ...(req.env || {}), ...sourcesEnv(req.secret_sources) }, client: p && p.client });
    ex.starts = 1;
    claimOutageAfter('TaskExecStart');
    return {};
  }),

  TaskExecStdioRead: serverStream('TaskExecStdioRead', async (req, ctx, call) => {
    const ex = routerExec(call, req);
    const sfd = req.file_descriptor || 0;
    if (sfd !== 0 && sfd !== 1) fail(STATUS.INVALID_ARGUMENT, `file_descriptor must be 0 (stdout) or 1 (stderr), got ${sfd}`);
    const fd = sfd === 0 ? FD_STDOUT : FD_STDERR;
    await streamBytes(call, ctx, ex.out[fd], Number(req.offset) || 0, ex.events, () => ex.outputDone,
      () => ex.gone, claimDropStdio(ex.exec_id, fd), (data) => ({ data }), `exec ${ex.exec_id} fd ${fd}`);
  }),

  TaskExecStdinWrite: unary('TaskExecStdinWrite', (req, ctx, call) => {
    const ex = routerExec(call, req);
    feedStdinAt(ex.stdin, req.offset, req.data, !!req.eof);
    return {};
  }),

  TaskExecStdinStatus: unary('TaskExecStdinStatus', (req, ctx, call) => {
    const ex = routerExec(call, req);
    return ex.stdin ? { num_bytes_written: ex.stdin.bytes, closed: ex.stdin.closed } : { closed: true };
  }),

  TaskExecStdinWriteStream: clientStream('TaskExecStdinWriteStream', async (call, ctx, rec) => {
    let ex = null;
    let offset = 0;
    for await (const m of call) {
      if (m.start) {
        ex = routerExec(call, m.start);
        offset = Number(m.start.offset) || 0;
        rec.request = jsonSafe(m.start);
      } else if (!ex) {
        fail(STATUS.INVALID_ARGUMENT, 'the first message must be start');
      } else if (m.data) {
        feedStdinAt(ex.stdin, offset, m.data, false);
        offset += m.data.length;
      } else if (m.end) {
        feedStdinAt(ex.stdin, offset, null, true);
      }
    }
    if (!ex) fail(STATUS.INVALID_ARGUMENT, 'empty stream');
    return {};
  }),

  TaskExecWait: unary('TaskExecWait', async (req, ctx, call) => {
    let ex = routerExec(call, req);
    while (ex.exit_code === null) {
      if (await waitFor(ex.events, ['exit', 'gone'], MAX_POLL_SECS * 1000, ctx) === 'cancelled') {
        fail(STATUS.CANCELLED, 'the client cancelled the call');
      }
      ex = routerExec(call, req, 1);
    }
    return exitStatus(ex);
  }),

  TaskExecPoll: unary('TaskExecPoll', (req, ctx, call) => exitStatus(routerExec(call, req))),

  TaskSnapshotFilesystem: unary('TaskSnapshotFilesystem', (req, ctx, call) => {
    const sb = routerTask(call, req.task_id);
    if (!req.snapshot_id) fail(STATUS.INVALID_ARGUMENT, 'snapshot_id is required');
    const known = snapshotsById.get(req.snapshot_id);
    if (known && images.has(known)) return { image_id: known };
    if (!isRunning(sb)) fail(STATUS.FAILED_PRECONDITION, `Sandbox ${sb.sandbox_id} is not running (${sb.status})`);
    const ttl = req.ttl_seconds === undefined ? undefined : Number(req.ttl_seconds);
    let im;
    try {
      im = snapshotSandbox(sb, { via: 'TaskSnapshotFilesystem', ttl_seconds: ttl });
    } catch (e) {
      fail(STATUS.INTERNAL, e.message);
    }
    snapshotsById.set(req.snapshot_id, im.image_id);
    return { image_id: im.image_id };
  }),

  SandboxStdioReadV2: serverStream('SandboxStdioReadV2', async (req, ctx, call) => {
    const sb = routerTask(call, req.task_id);
    const fd = (req.file_descriptor || 0) === 0 ? FD_STDOUT : FD_STDERR;
    await streamBytes(call, ctx, sb.raw[fd], Number(req.offset) || 0, sb.events,
      () => !isRunning(sb) && (!sb.entrypoint || sb.entrypoint.exited), () => false, null,
      (data, off) => ({ data, starting_offset: off }), `sandbox ${sb.sandbox_id} fd ${fd}`);
  }),

  SandboxStdinWriteV2: unary('SandboxStdinWriteV2', (req, ctx, call) => {
    const sb = routerTask(call, req.task_id);
    if (isRunning(sb) && sb.entrypoint) feedStdinAt(sb.entrypoint.stdin, req.offset, req.data, !!req.eof);
    return {};
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
    'outage_after', 'seconds', 'hold_next', 'drop_stdio_after_bytes', 'refuse_router', 'fail_after']);
  const isRpc = (m) => !!(handlers[m] || routerHandlers[m]);
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
  } else if (body.drop_stdio_after_bytes !== undefined) {
    const n = body.drop_stdio_after_bytes;
    if (!Number.isInteger(n) || n < 0) throw new HttpError(400, 'drop_stdio_after_bytes must be an integer >= 0');
    const f = { after: n, streams: body.streams === undefined ? 1 : body.streams };
    if (!Number.isInteger(f.streams) || f.streams < 1) throw new HttpError(400, 'streams must be an integer >= 1');
    if (body.fd !== undefined) {
      if (body.fd !== 1 && body.fd !== 2) throw new HttpError(400, 'fd must be 1 or 2');
      f.fd = body.fd;
    }
    if (body.exec_id !== undefined) f.exec_id = String(body.exec_id);
    faults.dropStdio.push(f);
    out.drop_stdio = f;
  } else if (body.fd !== undefined || body.streams !== undefined || body.exec_id !== undefined) {
    throw new HttpError(400, 'fd/streams/exec_id only go with break_output_after_batches or drop_stdio_after_bytes');
  }
  if (body.refuse_router !== undefined) {
    const n = body.refuse_router;
    if (!Number.isInteger(n) || n < 0 || n > 1000) throw new HttpError(400, 'refuse_router must be an integer in [0, 1000]');
    faults.routerRefuse = n;
    out.refuse_router = n;
  }
  if (body.fail_after !== undefined) {
    const f = body.fail_after;
    if (!f || typeof f.method !== 'string' || !isRpc(f.method)) throw new HttpError(400, 'fail_after.method must be an RPC of the fake');
    const code = f.code === undefined ? STATUS.UNAVAILABLE : f.code;
    if (!Number.isInteger(code) || code < 1 || code > 16) throw new HttpError(400, 'fail_after.code must be a gRPC status 1..16');
    const times = f.times === undefined ? 1 : f.times;
    if (!Number.isInteger(times) || times < 1) throw new HttpError(400, 'fail_after.times must be an integer >= 1');
    const ff = { method: f.method, code, times };
    faults.failAfter.push(ff);
    out.fail_after = ff;
  }
  if (body.fail_next !== undefined) {
    const f = body.fail_next;
    if (!f || typeof f.method !== 'string') throw new HttpError(400, 'fail_next.method is required');
    if (!isRpc(f.method)) throw new HttpError(400, `fail_next.method '${f.method}' is not an RPC of the fake`);
    if (f.retry_after_secs !== undefined && !(typeof f.retry_after_secs === 'number' && f.retry_after_secs >= 0 && f.retry_after_secs <= 600)) {
      throw new HttpError(400, 'fail_next.retry_after_secs must be a number in [0, 600]');
    }
    const code = f.code === undefined ? STATUS.UNAVAILABLE : f.code;
    if (!Number.isInteger(code) || code < 1 || code > 16) throw new HttpError(400, 'fail_next.code must be a gRPC status 1..16');
    const times = f.times === undefined ? 1 : f.times;
    if (!Number.isInteger(times) || times < 1) throw new HttpError(400, 'fail_next.times must be an integer >= 1');
    const ff = { method: f.method, code, message: f.message || `fake fault injected into ${f.method}`, times };
    if (f.retry_after_secs !== undefined) ff.retry_after_secs = f.retry_after_secs;
    faults.failNext.push(ff);
    out.fail_next = ff;
  }
  if (body.outage_after !== undefined) {
    if (!isRpc(body.outage_after)) throw new HttpError(400, `outage_after '${body.outage_after}' is not an RPC of the fake`);
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
    if (!isRpc(f.method)) throw new HttpError(400, `hold_next.method '${f.method}' is not an RPC of the fake`);
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
        hold_next: faults.holdNext, drop_stdio: faults.dropStdio, fail_after: faults.failAfter,
        refuse_router: faults.routerRefuse };
    case 'DELETE /faults':
      faults.breakOutput.length = 0;
      faults.failNext.length = 0;
      faults.holdNext.length = 0;
      faults.outageAfter.length = 0;
      faults.dropStdio.length = 0;
      faults.failAfter.length = 0;
      faults.routerRefuse = 0;
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
      const cl = u.searchParams.get('client');
      const svc = u.searchParams.get('service');
      const since = Number(u.searchParams.get('since') || 0);
      return calls.filter((c) => (!m || c.method === m) && (!cl || c.client === cl) &&
        (!svc || c.service === svc) && c.seq > since);
    }
    case 'GET /clients': {
      // Which RPCs each client used: {client: {service: {method: count}}}.
      const since = Number(u.searchParams.get('since') || 0);
      const out = {};
      for (const c of calls) {
        if (c.seq <= since) continue;
        const per = (out[c.client] ||= { control: {}, router: {} });
        per[c.service][c.method] = (per[c.service][c.method] || 0) + 1;
      }
      return out;
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
        builder_version: im.builder_version || null,
        via: im.via || null, ttl_seconds: im.ttl_seconds === undefined ? null : im.ttl_seconds,
        expires_at: im.expires_at === undefined ? null : im.expires_at,
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

// One relay per port clients see (the control plane, the command router):
// an outage cuts and refuses them all, as a real network fault would.
const relay = {
  links: [], pairs: new Set(), outage: null, outages: 0, resets: 0,
};

function newLink(backend) {
  const link = { server: null, port: 0, backend };
  relay.links.push(link);
  return link;
}

function relayAccept(link, client) {
  if (relay.outage) { // mode "reset": accepted, then reset before any byte is read
    relay.resets++;
    client.resetAndDestroy();
    return;
  }
  const up = net.connect(link.backend, '127.0.0.1');
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

function relayListen(link, port, cb) {
  const srv = net.createServer((c) => relayAccept(link, c));
  link.server = srv;
  srv.on('error', (e) => {
    if (e.code === 'EADDRINUSE' && port) { // taken meanwhile: try again shortly
      warn(`relay: port ${port} busy (${e.message}); retrying`);
      setTimeout(() => { if (link.server === srv) srv.listen(port, opts.host); }, 100);
      return;
    }
    warn(`relay error: ${e.message}`);
    shutdown(1);
  });
  srv.listen(port, opts.host, () => {
    link.port = srv.address().port;
    if (cb) cb(link.port);
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
  for (const link of relay.links) {
    if (mode === 'refuse' && link.server) {
      link.server.close();
      link.server = null;
    } else if (mode === 'reset' && !link.server) {
      relayListen(link, link.port);
    }
  }
}

function endOutage() {
  if (!relay.outage) return;
  clearTimeout(relay.outage.timer);
  relay.outage = null;
  log('outage over');
  for (const link of relay.links) if (!link.server) relayListen(link, link.port);
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

const routerDef = protoLoader.loadSync(opts.routerProto, {
  keepCase: true, longs: Number, enums: Number, defaults: false, oneofs: true,
  includeDirs: [path.dirname(opts.proto)],
})['modal.task_command_router.TaskCommandRouter'];
const routerServer = new grpc.Server({
  'grpc.max_receive_message_length': 100 * 1024 * 1024,
  'grpc.max_send_message_length': 100 * 1024 * 1024,
});
const routerImpl = {};
for (const name of Object.keys(routerDef)) if (routerHandlers[name]) routerImpl[name] = routerHandlers[name];
routerServer.addService(routerDef, routerImpl);
const tls = ensureTls();
const tlsCreds = () => grpc.ServerCredentials.createSsl(null, [{ private_key: tls.key, cert_chain: tls.cert }], false);

let shuttingDown = false;
function shutdown(code) {
  if (shuttingDown) return;
  shuttingDown = true;
  log('shutting down');
  killAllProcesses();
  for (const sb of sandboxes.values()) if (sb.timer) clearTimeout(sb.timer);
  server.forceShutdown();
  routerServer.forceShutdown();
  if (relay.outage) clearTimeout(relay.outage.timer);
  for (const link of relay.links) if (link.server) link.server.close();
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

// The control plane is h2c unless --tls (then TLS through the relay); the
// router is always TLS, on its own port, as Modal's are https only. Both are
// reached through the relay.
function bindRouter(cb) {
  routerServer.bindAsync('127.0.0.1:0', tlsCreds(), (err, backend) => {
    if (err) {
      warn(`cannot bind the router port: ${err.message}`);
      process.exit(1);
    }
    relayListen(newLink(backend), 0, (port) => {
      routerPort = port;
      cb();
    });
  });
}

bindRouter(() => server.bindAsync('127.0.0.1:0', opts.tls ? tlsCreds() : grpc.ServerCredentials.createInsecure(), (err, backend) => {
  if (err) {
    warn(`cannot bind gRPC port: ${err.message}`);
    process.exit(1);
  }
  const cpLink = newLink(backend);
  controlServer.on('error', (e) => {
    warn(`control server error: ${e.message}`);
    shutdown(1);
  });
  relayListen(cpLink, opts.port, (port) => controlServer.listen(opts.controlPort, '127.0.0.1', () => {
    const cport = controlServer.address().port;
    process.stdout.write(`LISTENING ${port}\nCONTROL ${cport}\nROUTER ${routerPort}\nCA ${tls.caFile}\n`);
    log(`state dir ${stateDir}`);
    if (opts.exitOnStdinEof) {
      process.stdin.on('end', () => shutdown(0));
      process.stdin.on('error', () => shutdown(0));
      process.stdin.resume();
    }
  }));
}));
