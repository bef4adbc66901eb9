'use strict';

// exec.js - execs: output batches and raw bytes, exit, starting a process
// (the filesystem tool included) and the state GET /execs shows.

const os = require('os');
const path = require('path');
const { spawn } = require('child_process');
const {
  EXIT_GRACE_MS, FD_STDERR, FD_STDOUT, OUT_DEVNULL, OUT_STDOUT, STATUS, log, opts, warn,
} = require('./options');
const { execs, newEmitter, newId } = require('./state');
const { fail } = require('./errors');
const { exitCodeOf, killGroup, processEnv, sandboxPath, secretsEnv, ws } = require('./processes');
const { makeStdin } = require('./stdin');

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

module.exports = { newOut, rawFrom, startExec, getExec, execInfo, batchMsg };
