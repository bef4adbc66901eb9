'use strict';

// errors.js - gRPC errors as thrown by handlers (RpcError, fail) and the
// helpers that read call metadata and turn requests into JSON.

const { STATUS, warn } = require('./options');

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

module.exports = { RpcError, fail, toGrpcError, MD_KEYS, clientOf, mdGet, jsonSafe };
