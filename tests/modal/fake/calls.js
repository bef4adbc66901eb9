'use strict';

// calls.js - call plumbing: the record of every call (GET /calls), armed
// faults claimed by calls, server-directed retries, and the wrappers that
// turn a handler into a grpc-js unary or streaming method.

const grpc = require('@grpc/grpc-js');
const { MAX_CALLS, MAX_POLL_SECS, STATUS, log } = require('./options');
const { calls, faults, newEmitter } = require('./state');
const { MD_KEYS, RpcError, clientOf, jsonSafe, mdGet, toGrpcError } = require('./errors');
const { ROUTER_METHODS, checkAuth, routerTokenPayload } = require('./tokens');
const { startOutage } = require('./relay');

let callSeq = 0;

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

// The start of a unary or client-streaming call: recorded, watched for a
// cancel, answered at most once; `pre` is the auth or fail_next error to
// answer at once.
function openCall(method, call, callback) {
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
  return { rec, ctx, reply, pre };
}

function unary(method, fn) {
  return (call, callback) => {
    const { ctx, reply, pre } = openCall(method, call, callback);
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
    const { rec, ctx, reply, pre } = openCall(method, call, callback);
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

// Claims one stream of the first fault in `list` (faults.breakOutput or
// faults.dropStdio) that matches the exec and fd; null when none does.
function claimStreamFault(list, execId, fd) {
  const i = list.findIndex((f) =>
    (f.fd === undefined || f.fd === fd) && (f.exec_id === undefined || f.exec_id === execId));
  if (i < 0) return null;
  const f = list[i];
  if (--f.streams <= 0) list.splice(i, 1);
  return { after: f.after };
}

function claimBreakFault(execId, fd) {
  return claimStreamFault(faults.breakOutput, execId, fd);
}

module.exports = {
  unary, clientStream, serverStream, send, waitFor, pollMs, sleep, claimOutageAfter, claimStreamFault,
  claimBreakFault,
};
