'use strict';

// sandboxes.js - sandboxes: lookups, the entrypoint process and its logs,
// the end of a sandbox and the state GET /sandboxes shows.

const { spawn } = require('child_process');
const { FD_STDERR, FD_STDOUT, GS, MAX_LOG_BYTES, STATUS, log } = require('./options');
const { apps, execs, sandboxes } = require('./state');
const { fail } = require('./errors');
const { waitFor } = require('./calls');
const { exitCodeOf, killGroup, processEnv, sandboxPath, ws } = require('./processes');
const { makeStdin } = require('./stdin');

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

module.exports = { getSandbox, isRunning, startEntrypoint, finishSandbox, waitProcessesGone, sandboxInfo };
