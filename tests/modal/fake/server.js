#!/usr/bin/env node
// Fake Modal control plane for sbxd tests.
//
// It speaks the gRPC sandbox API of modal.client.ModalClient and the
// TaskCommandRouter as used by the official JS SDK modal@0.11.1 (exec, stdio,
// stdin, wait and filesystem snapshots on the router; V2 sandboxes; the
// filesystem tool; server-directed retries), and still the ContainerExec
// family that modal@0.5.6 used. It loads the same cut-down protos that the C
// provider is generated from (proto/modal/modal_api.proto and
// task_command_router.proto), so the two always agree on the wire format.
// "Sandboxes" are plain folders, and "exec" runs real local processes.
// There is NO isolation: this is a test double, not a sandbox.
//
// Usage:
//   node server.js --port 0 --state DIR [--token-id ID --token-secret SECRET]
//        [--control-port 0] [--token-ttl 3600] [--build-delay-ms 100]
//        [--max-output-bytes 67108864] [--exit-on-stdin-eof] [--verbose]
//        [--tls] [--host 127.0.0.1] [--router-token-ttl 3600]
//        [--image-builder-version 2025.06] [--stdio-window BYTES]
//
// Once ready it prints to stdout, in this order:
//   LISTENING <grpc port>     the control plane on --host: h2c, or TLS with --tls
//   CONTROL <http port>       HTTP/1.1 JSON control endpoint on 127.0.0.1
//   ROUTER <port>             the TaskCommandRouter on --host, always TLS
//   CA <file>                 the CA that signed both servers' certificate
//                             (SANs 127.0.0.1-3 and localhost), made with
//                             openssl(1) in DIR/tls on first start
// Trap for SDK tests: npm modal dials the router in plain h2c when the control
// plane URL is localhost/127.0.0.1, so run it with --tls --host 127.0.0.2 and
// GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=<CA> (grpc-js then ignores NODE_EXTRA_CA_CERTS).
//
// The router: TaskGetCommandRouterAccess (V2: SandboxGetCommandRouterAccess,
// or in SandboxCreateV2's reply) gives {url: https://<host>:<ROUTER>, jwt}; the
// JWT (--router-token-ttl) names the task and the client that asked, and is
// the only credential router calls carry (authorization: Bearer). Exec ids
// are the client's: a repeated TaskExecStart of a known id is not run again.
// TaskExecStdioRead streams bytes from an offset and ends cleanly at EOF;
// with --stdio-window N an exec's stdout pipe is paused while more than N of
// its bytes were not streamed to anyone yet (a router with backpressure: a
// slow reader stops the writer instead of losing the oldest bytes);
// TaskExecStdinWrite is by offset (an overlap is a retry and is skipped);
// TaskExecWait/Poll answer {code} or {signal}; TaskSnapshotFilesystem is
// idempotent on snapshot_id and records ttl_seconds (-1 never, 0/absent 30 d).
// V2 sandboxes get ids of another shape (sbv2-...), and V1 calls about them
// (or V2 calls about V1 ones) are NOT_FOUND. The filesystem tool
// /__modal/.bin/modal-sandbox-fs-tools is played by fs-tools.js.
// Diagnostics go to stderr. SIGTERM/SIGINT kill every child process group and
// exit 0. With --exit-on-stdin-eof the server also shuts down when its stdin
// reaches EOF, so it cannot outlive a test harness that holds the pipe.
//
// Files:
//   DIR/sandboxes/<sandbox_id>/root   the sandbox's "filesystem"
//   DIR/images/<image_id>/            snapshot contents (SandboxSnapshotFs)
//   DIR/images/<image_id>.json        snapshot metadata (reloaded at start)
//   DIR/auth.key                      key that signs auth tokens (so tokens
//                                     survive a restart on the same DIR)
//
// Path mapping: an absolute path P inside the sandbox is the host path
// <root>P. Sandbox/exec `workdir` is mapped like that and created if missing;
// a relative exec workdir is taken relative to the sandbox workdir. Commands
// themselves see the host filesystem (no chroot), so tests should use relative
// paths or $MODAL_SANDBOX_ROOT.
//
// Environment of exec'd processes (and of the sandbox entrypoint), later
// entries win: PATH (the fake's PATH), HOME=<root>/root, LANG=C.UTF-8,
// [TERM from pty_info], sandbox secrets (env of SandboxCreate), exec secrets,
// then MODAL_SANDBOX_ROOT=<root>, MODAL_SANDBOX_ID, MODAL_TASK_ID,
// MODAL_EXEC_ID (exec only). Nothing else from the fake's environment leaks in.
//
// Exit codes (ContainerExecWait.exit_code and the final exit_code batch of
// ContainerExecGetOutput carry the same value):
//   normal exit             -> the process's exit status
//   killed by signal S      -> 128 + S (so SandboxTerminate's SIGKILL -> 137)
//   exec timeout_secs hit   -> the whole process group gets SIGKILL and the
//                              exit code is 124 (like coreutils timeout(1), and
//                              like the SDK's mapping of a sandbox TIMEOUT to
//                              124). Real Modal kills the exec on timeout too;
//                              its exact reported code is not documented.
//   command not found       -> ContainerExec still succeeds (as in a real
//                              container, the failure happens in the exec);
//                              a message goes to stderr, exit code 127
//                              (126 if not executable).
//
// Sandbox results (SandboxWait.result / SandboxGetTaskId.task_result):
//   SandboxTerminate         -> status 3 TERMINATED (SDK: 137)
//   timeout_secs expired     -> status 4 TIMEOUT    (SDK: 124); 0 means 300 s
//   entrypoint exited        -> status 1 SUCCESS (exit 0) / 2 FAILURE, exitcode
//   fault kill_sandbox       -> status 3 TERMINATED with an exception text;
//                               exec RPCs about it then answer NOT_FOUND
// When a sandbox ends, all its processes (entrypoint + execs) are SIGKILLed.
// The entrypoint (default ["sleep","48h"]) is really run, with cwd = workdir.
//
// Long polls: `timeout` fields are float seconds, capped at 300 s. A timeout of
// 0 (or absent) means "answer at once". The SDK always sends 55 (10 for
// SandboxWait).
//
// Control endpoint (HTTP/1.1, JSON bodies, all on 127.0.0.1:<CONTROL port>):
//   GET    /health                    {"ok":true}
//   POST   /fault  {...}              arm faults; keys (any combination):
//     "break_output_after_batches": N   next ContainerExecGetOutput stream ends
//          with UNAVAILABLE (14) right after it has sent N batches (N=0: at
//          once); if its long-poll expires first it also ends with 14; if it
//          delivers the final exit_code batch first, it ends normally.
//          Extra keys: "fd": 1|2 (only streams for that fd; recommended, since
//          the SDK opens fd 1 and fd 2 together), "exec_id", "streams": K
//          (how many streams to break, default 1).
//     "kill_sandbox": "<sandbox_id>"    sandbox dies behind the client's back
//     "fail_next": {"method": "ContainerExec", "code": 5, "message": "...",
//                   "times": 1}         next call(s) of that RPC fail with code
//     "hold_next": {"method": "SandboxSnapshotFs", "ms": 30000}  the next
//          unary call of that RPC waits ms before it is handled, even if its
//          sandbox dies meanwhile (a server slow to notice)
//     "outage_after": "ContainerExec"   the next call of that RPC is carried
//          out, and then an outage of "seconds" (default 2) starts before the
//          reply leaves: the client sees its connection reset and cannot know
//          whether the call was done (it was)
//     "drop_stdio_after_bytes": N       the next TaskExecStdioRead stream ends
//          with UNAVAILABLE after N bytes (mid-chunk); "fd", "exec_id",
//          "streams" as for break_output_after_batches
//     "fail_after": {"method", "code", "times"}  the call is carried out, but
//          its reply is that error (a lost reply: the client must retry
//          without doing it twice)
//     "refuse_router": N                the next N router-access calls answer
//          FAILED_PRECONDITION (router not enabled for the task)
//     fail_next also takes "retry_after_secs": the error then carries an
//          RPCRetryPolicy in grpc-status-details-bin
//   GET    /faults                    armed faults
//   DELETE /faults                    disarm all
//   POST   /outage {"seconds": S, "mode": "refuse"|"reset"}
//          a control-plane outage of S seconds: every open connection to the
//          gRPC port is reset at once, and until it ends new connections are
//          refused ("refuse", the default: the port is closed, so a client
//          knows nothing was sent) or accepted and reset at once ("reset": a
//          client cannot tell whether a request got through; none does).
//          Processes keep running and their output is kept meanwhile.
//   GET    /outage                    {active, mode, ends_in_ms, outages, resets}
//   DELETE /outage                    end the outage now
//   GET    /clients[?since=SEQ]       which RPCs each client used:
//          {client: {control: {method: n}, router: {method: n}}}; a client is
//          its x-modal-libmodal-version (else user-agent); router calls count
//          for the client that fetched their token
//   GET    /calls[?method=M&client=C&service=control|router&since=SEQ]
//          calls received: [{seq, method, service, client, time
//          (ms since epoch), metadata:{...}, request:{...}, code, error,
//          duration_ms}]; bytes fields appear as {"bytes_len", "base64"}
//   DELETE /calls                     forget recorded calls
//   GET    /sandboxes                 sandbox state (see sandboxInfo())
//   GET    /execs                     exec state (see execInfo())
//   GET    /images                    images
//   POST   /secret {"name", "environment"?, "env": {...}}  create a named secret
//
// RPCs that are not implemented answer UNIMPLEMENTED (12) through grpc-js.
//
// Code: this file is the entry point (startup and shutdown); the rest is split
// by concern into the modules beside it, each of which requires only modules
// before it in this list (floors that call only down; options.js is parsed
// from process.argv at the first require):
//   options, state, errors, tokens, relay, calls, processes (with
//   workspace.js), images, stdin, sandboxes, exec, rpc, sdk-v2, router, control

'use strict';

const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { log, opts, warn } = require('./options');
const { execs, sandboxes, stateDir } = require('./state');
const { serverTls } = require('./tokens');
const { newLink, relay, relayListen } = require('./relay');
const { killGroup } = require('./processes');
const { handlers } = require('./rpc');
const { setRouterPort } = require('./sdk-v2');
const { routerHandlers } = require('./router');
const { controlServer } = require('./control');

// ---------------------------------------------------------------------------
// Startup and shutdown
// ---------------------------------------------------------------------------

function killAllProcesses() {
  for (const sb of sandboxes.values()) killGroup(sb.entrypoint && sb.entrypoint.pid);
  for (const ex of execs.values()) killGroup(ex.pid);
}

const packageDef = protoLoader.loadSync(opts.proto, {
  keepCase: true, longs: Number, enums: Number, defaults: false, oneofs: true,
});
const serviceDef = packageDef['modal.client.ModalClient'];
for (const name of Object.keys(serviceDef)) {
  if (!handlers[name]) {
    warn(`note: ${name} is in the proto but has no handler`);
  }
}

const server = new grpc.Server({
  'grpc.max_receive_message_length': 100 * 1024 * 1024,
  'grpc.max_send_message_length': 100 * 1024 * 1024,
});
const impl = {};
for (const name of Object.keys(serviceDef)) if (handlers[name]) impl[name] = handlers[name];
server.addService(serviceDef, impl);

const routerDef = protoLoader.loadSync(opts.routerProto, {
  keepCase: true, longs: Number, enums: Number, defaults: false, oneofs: true,
  includeDirs: [path.dirname(opts.proto)],
})['modal.task_command_router.TaskCommandRouter'];
const routerServer = new grpc.Server({
  'grpc.max_receive_message_length': 100 * 1024 * 1024,
  'grpc.max_send_message_length': 100 * 1024 * 1024,
});
const routerImpl = {};
for (const name of Object.keys(routerDef)) if (routerHandlers[name]) routerImpl[name] = routerHandlers[name];
routerServer.addService(routerDef, routerImpl);
const tls = serverTls();
const tlsCreds = () => grpc.ServerCredentials.createSsl(null, [{ private_key: tls.key, cert_chain: tls.cert }], false);

let shuttingDown = false;
function shutdown(code) {
  if (shuttingDown) return;
  shuttingDown = true;
  log('shutting down');
  killAllProcesses();
  for (const sb of sandboxes.values()) if (sb.timer) clearTimeout(sb.timer);
  server.forceShutdown();
  routerServer.forceShutdown();
  if (relay.outage) clearTimeout(relay.outage.timer);
  for (const link of relay.links) if (link.server) link.server.close();
  for (const { client, up } of relay.pairs) { client.destroy(); up.destroy(); }
  controlServer.close();
  if (controlServer.closeAllConnections) controlServer.closeAllConnections();
  setImmediate(() => process.exit(code));
}

relay.fatal = shutdown;
process.on('SIGTERM', () => shutdown(0));
process.on('SIGINT', () => shutdown(0));
process.on('SIGHUP', () => shutdown(0));
process.on('exit', killAllProcesses);
process.on('uncaughtException', (e) => {
  warn(`uncaught exception: ${e.stack || e}`);
  shutdown(1);
});

// The control plane is h2c unless --tls (then TLS through the relay); the
// router is always TLS, on its own port, as Modal's are https only. Both are
// reached through the relay.
function bindRouter(cb) {
  routerServer.bindAsync('127.0.0.1:0', tlsCreds(), (err, backend) => {
    if (err) {
      warn(`cannot bind the router port: ${err.message}`);
      process.exit(1);
    }
    relayListen(newLink(backend), 0, (port) => {
      setRouterPort(port);
      cb(port);
    });
  });
}

bindRouter((routerPort) => server.bindAsync('127.0.0.1:0', opts.tls ? tlsCreds() : grpc.ServerCredentials.createInsecure(), (err, backend) => {
  if (err) {
    warn(`cannot bind gRPC port: ${err.message}`);
    process.exit(1);
  }
  const cpLink = newLink(backend);
  controlServer.on('error', (e) => {
    warn(`control server error: ${e.message}`);
    shutdown(1);
  });
  relayListen(cpLink, opts.port, (port) => controlServer.listen(opts.controlPort, '127.0.0.1', () => {
    const cport = controlServer.address().port;
    process.stdout.write(`LISTENING ${port}\nCONTROL ${cport}\nROUTER ${routerPort}\nCA ${tls.caFile}\n`);
    log(`state dir ${stateDir}`);
    if (opts.exitOnStdinEof) {
      process.stdin.on('end', () => shutdown(0));
      process.stdin.on('error', () => shutdown(0));
      process.stdin.resume();
    }
  }));
}));