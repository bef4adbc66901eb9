'use strict';

// sdk-v2.js - today's SDKs (modal@0.11.1): command router access, the V2
// sandbox family, tunnels and image deletion, added to rpc.js's handlers.

const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const { GS, STATUS, log, opts } = require('./options');
const { faults, images, imagesByKey, imagesDir, normEnv, sandboxes, tasks } = require('./state');
const { clientOf, fail } = require('./errors');
const { makeRouterToken } = require('./tokens');
const { pollMs, unary, waitFor } = require('./calls');
const { sourcesEnv, ws } = require('./processes');
const { getImage } = require('./images');
const { finishSandbox, getSandbox, isRunning, waitProcessesGone } = require('./sandboxes');
const { createSandbox, fromName, handlers } = require('./rpc');

// ---------------------------------------------------------------------------
// Today's SDKs: router access, the V2 family, tunnels, image deletion
// ---------------------------------------------------------------------------

let routerPort = 0;
function setRouterPort(port) {
  routerPort = port;
}
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

module.exports = { setRouterPort };
