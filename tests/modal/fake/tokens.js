'use strict';

// tokens.js - credentials: the HS256 auth tokens of the control plane, the
// command router's JWTs, the CA and server certificate made with openssl(1),
// and the check of each call's auth metadata.

const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const { execFileSync } = require('child_process');
const { STATUS, opts } = require('./options');
const { stateDir } = require('./state');
const { RpcError, mdGet } = require('./errors');

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

// Made once, when the entry point starts (workspace.js asks again for its tunnels).
let tlsFiles = null;
function serverTls() {
  if (!tlsFiles) tlsFiles = ensureTls();
  return tlsFiles;
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

module.exports = {
  makeToken, ROUTER_METHODS, makeRouterToken, routerTokenPayload, checkRouterAuth, serverTls,
  checkAuth,
};
