'use strict';

// control.js - the HTTP/1.1 JSON control endpoint (faults, outages, calls,
// state, secrets); see server.js's header for its routes.

const http = require('http');
const { GS, STATUS, warn } = require('./options');
const {
  calls, execs, faults, images, newId, normEnv, sandboxes, secrets, secretsByName,
} = require('./state');
const { endOutage, outageInfo, startOutage } = require('./relay');
const { finishSandbox, sandboxInfo } = require('./sandboxes');
const { execInfo } = require('./exec');
const { handlers } = require('./rpc');
const { routerHandlers } = require('./router');

// ---------------------------------------------------------------------------
// Control endpoint
// ---------------------------------------------------------------------------

class HttpError extends Error {
  constructor(status, msg) {
    super(msg);
    this.status = status;
  }
}

// A fault on the next output streams (body[key] = N, the count of batches or
// bytes it lets through) and the fd, exec_id and streams that narrow it.
function streamFault(body, key) {
  const n = body[key];
  if (!Number.isInteger(n) || n < 0) throw new HttpError(400, `${key} must be an integer >= 0`);
  const f = { after: n, streams: body.streams === undefined ? 1 : body.streams };
  if (!Number.isInteger(f.streams) || f.streams < 1) throw new HttpError(400, 'streams must be an integer >= 1');
  if (body.fd !== undefined) {
    if (body.fd !== 1 && body.fd !== 2) throw new HttpError(400, 'fd must be 1 or 2');
    f.fd = body.fd;
  }
  if (body.exec_id !== undefined) f.exec_id = String(body.exec_id);
  return f;
}

function applyFault(body) {
  const known = new Set(['break_output_after_batches', 'fd', 'exec_id', 'streams', 'kill_sandbox', 'fail_next',
    'outage_after', 'seconds', 'hold_next', 'drop_stdio_after_bytes', 'refuse_router', 'fail_after']);
  const isRpc = (m) => !!(handlers[m] || routerHandlers[m]);
  for (const k of Object.keys(body)) if (!known.has(k)) throw new HttpError(400, `unknown fault key '${k}'`);
  const out = {};
  if (body.break_output_after_batches !== undefined) {
    const f = streamFault(body, 'break_output_after_batches');
    faults.breakOutput.push(f);
    out.break_output = f;
  } else if (body.drop_stdio_after_bytes !== undefined) {
    const f = streamFault(body, 'drop_stdio_after_bytes');
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

module.exports = { controlServer };
