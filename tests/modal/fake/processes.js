'use strict';

// processes.js - local processes as a sandbox's: process groups, exit codes,
// path mapping, environments and secrets, and the workspace side
// (workspace.js: terminals, tunnels, network access, resource usage).

const fs = require('fs');
const os = require('os');
const path = require('path');
const { STATUS, log } = require('./options');
const { secrets } = require('./state');
const { fail } = require('./errors');
const { serverTls } = require('./tokens');

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


function sourcesEnv(sources) {
  const env = {};
  for (const src of sources || []) {
    if (src.secret_id) Object.assign(env, secretsEnv([src.secret_id]));
    if (src.env && src.env.contents) Object.assign(env, src.env.contents);
  }
  return env;
}

// Terminals, tunnels, network access and resource usage (sbxd issue 18).
const ws = require('./workspace')({ fail, STATUS, log, creds: () => serverTls() });

module.exports = { killGroup, exitCodeOf, sandboxPath, processEnv, secretsEnv, sourcesEnv, ws };
