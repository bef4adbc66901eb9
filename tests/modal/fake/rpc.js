'use strict';

// rpc.js - the ModalClient handlers of the ContainerExec-era SDKs (modal@0.5.6
// and sbxd's C provider): apps, images, secrets, sandboxes, exec, output.

const fs = require('fs');
const path = require('path');
const { DEFAULT_SANDBOX_TIMEOUT_SECS, FD_STDERR, FD_STDOUT, GS, STATUS, log, warn } = require('./options');
const {
  apps, appsByName, images, imagesByKey, imagesDir, newEmitter, newId, normEnv, sandboxes,
  sandboxesDir, secrets, secretsByName, tasks,
} = require('./state');
const { fail, mdGet } = require('./errors');
const { makeToken } = require('./tokens');
const { claimBreakFault, claimOutageAfter, pollMs, send, serverStream, unary, waitFor } = require('./calls');
const { secretsEnv, ws } = require('./processes');
const { buildImage, getImage, imageKey, imageResult } = require('./images');
const { feedStdin } = require('./stdin');
const { finishSandbox, getSandbox, isRunning, startEntrypoint, waitProcessesGone } = require('./sandboxes');
const { batchMsg, getExec, newOut, startExec } = require('./exec');

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

module.exports = { createSandbox, snapshotSandbox, fromName, handlers };
