'use strict';

// options.js - the fake's bottom floor: its command line (parsed once, at the
// first require), logging, and the constants every other module shares.

const path = require('path');
const net = require('net');
const grpc = require('@grpc/grpc-js');

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

function parseArgs(argv) {
  const o = {
    port: 0,
    controlPort: 0,
    state: null,
    tokenId: null,
    tokenSecret: null,
    tokenTtl: 3600,
    buildDelayMs: 100,
    maxOutputBytes: 64 * 1024 * 1024,
    stdioWindow: 0,
    exitOnStdinEof: false,
    verbose: false,
    tls: false,
    host: '127.0.0.1',
    routerTokenTtl: 3600,
    imageBuilderVersion: '2025.06',
    proto: path.resolve(__dirname, '../../../proto/modal/modal_api.proto'),
    routerProto: path.resolve(__dirname, '../../../proto/modal/task_command_router.proto'),
  };
  const need = (i) => {
    if (i + 1 >= argv.length) usage(`missing value for ${argv[i]}`);
    return argv[i + 1];
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    switch (a) {
      case '--port': o.port = Number(need(i)); i++; break;
      case '--control-port': o.controlPort = Number(need(i)); i++; break;
      case '--state': o.state = need(i); i++; break;
      case '--token-id': o.tokenId = need(i); i++; break;
      case '--token-secret': o.tokenSecret = need(i); i++; break;
      case '--token-ttl': o.tokenTtl = Number(need(i)); i++; break;
      case '--build-delay-ms': o.buildDelayMs = Number(need(i)); i++; break;
      case '--max-output-bytes': o.maxOutputBytes = Number(need(i)); i++; break;
      case '--stdio-window': o.stdioWindow = Number(need(i)); i++; break;
      case '--proto': o.proto = path.resolve(need(i)); i++; break;
      case '--router-proto': o.routerProto = path.resolve(need(i)); i++; break;
      case '--tls': o.tls = true; break;
      case '--host': o.host = need(i); i++; break;
      case '--router-token-ttl': o.routerTokenTtl = Number(need(i)); i++; break;
      case '--image-builder-version': o.imageBuilderVersion = need(i); i++; break;
      case '--exit-on-stdin-eof': o.exitOnStdinEof = true; break;
      case '--verbose': case '-v': o.verbose = true; break;
      case '--help': case '-h': usage(null); break;
      default: usage(`unknown argument ${a}`);
    }
  }
  if (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535) usage('bad --port');
  if (!Number.isInteger(o.controlPort) || o.controlPort < 0 || o.controlPort > 65535) usage('bad --control-port');
  if ((o.tokenId === null) !== (o.tokenSecret === null)) usage('--token-id and --token-secret go together');
  if (!(o.tokenTtl > 0)) usage('bad --token-ttl');
  if (!(o.routerTokenTtl > 0)) usage('bad --router-token-ttl');
  if (net.isIP(o.host) !== 4 || !o.host.startsWith('127.')) usage('--host must be a 127.x.y.z address');
  if (!(o.buildDelayMs >= 0)) usage('bad --build-delay-ms');
  if (!(o.maxOutputBytes > 0)) usage('bad --max-output-bytes');
  if (!(o.stdioWindow >= 0)) usage('bad --stdio-window');
  if (!o.state) usage('--state DIR is required');
  return o;
}

function usage(msg) {
  if (msg) process.stderr.write(`server.js: ${msg}\n`);
  process.stderr.write(
    'usage: node server.js --port N --state DIR [--token-id ID --token-secret S]\n' +
    '       [--control-port N] [--token-ttl SECS] [--build-delay-ms MS]\n' +
    '       [--max-output-bytes N] [--stdio-window N] [--exit-on-stdin-eof] [--verbose] [--proto FILE]\n' +
    '       [--tls] [--host 127.x.y.z] [--router-token-ttl SECS] [--router-proto FILE]\n');
  process.exit(msg ? 2 : 0);
}

const opts = parseArgs(process.argv.slice(2));

function log(...args) {
  if (opts.verbose) process.stderr.write(`[modal-fake] ${args.join(' ')}\n`);
}
function warn(...args) {
  process.stderr.write(`[modal-fake] ${args.join(' ')}\n`);
}

const MAX_POLL_SECS = 300;
const DEFAULT_SANDBOX_TIMEOUT_SECS = 300;
const EXIT_GRACE_MS = 1000;      // wait this long for pipes after exit
const MAX_LOG_BYTES = 1 << 20;   // per fd, sandbox entrypoint logs
const MAX_CALLS = 20000;

const STATUS = grpc.status;
const GS = { UNSPECIFIED: 0, SUCCESS: 1, FAILURE: 2, TERMINATED: 3, TIMEOUT: 4, INIT_FAILURE: 5 };
const FD_STDOUT = 1;
const FD_STDERR = 2;
const OUT_DEVNULL = 1;
const OUT_STDOUT = 3;

module.exports = {
  opts, log, warn, MAX_POLL_SECS, DEFAULT_SANDBOX_TIMEOUT_SECS, EXIT_GRACE_MS, MAX_LOG_BYTES,
  MAX_CALLS, STATUS, GS, FD_STDOUT, FD_STDERR, OUT_DEVNULL, OUT_STDOUT,
};
