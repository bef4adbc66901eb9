'use strict';

// router.js - the TaskCommandRouter's handlers (served on its own TLS port):
// exec, stdio, stdin, wait and filesystem snapshots.

const {
  FD_STDERR, FD_STDOUT, MAX_POLL_SECS, OUT_DEVNULL, OUT_STDOUT, STATUS, log, opts,
} = require('./options');
const { execs, faults, images, snapshotsById, tasks } = require('./state');
const { fail, jsonSafe } = require('./errors');
const { checkRouterAuth, routerTokenPayload } = require('./tokens');
const { claimOutageAfter, claimStreamFault, clientStream, send, serverStream, unary, waitFor } = require('./calls');
const { sourcesEnv } = require('./processes');
const { feedStdinAt } = require('./stdin');
const { isRunning } = require('./sandboxes');
const { rawFrom, startExec } = require('./exec');
const { snapshotSandbox } = require('./rpc');

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
  return claimStreamFault(faults.dropStdio, execId, fd);
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

module.exports = { routerHandlers };
