'use strict';

// workspace.js - the fake's side of sandboxes as workspaces (sbxd issue 18),
// answered the way Modal's service does as far as its API tells:
//
//   PTYInfo        an exec (TaskExecStart.pty_info, ContainerExec.pty_info)
//                  with pty_info.enabled runs on a real pseudo-terminal of
//                  winsz_cols x winsz_rows, made by script(1) (util-linux):
//                  one output stream (stdout), the terminal's echo included.
//                  Modal has no call that resizes a running exec's terminal.
//   open_ports     each declared port gets a tunnel when the sandbox is
//                  created: a TLS listener on 127.0.0.1 (the fake's
//                  certificate, so clients verify it with the fake's CA) that
//                  forwards to 127.0.0.1:<port>, where the sandbox's processes
//                  listen (no isolation here), and for `unencrypted` ports a
//                  plain TCP listener too (unencrypted_host/port).
//                  SandboxGetTunnels(V2) answers TunnelData once they listen.
//   NetworkAccess  checked like the service: ALLOWLIST entries must be CIDRs
//                  and domains (at most 100), BLOCKED carries no lists. Kept
//                  in GET /sandboxes (network_access); nothing is enforced.
//   SandboxGetResourceUsage
//                  what Modal bills: CPU core-nanoseconds and memory
//                  GiB-nanoseconds since create, at the requested
//                  resources (milli_cpu, memory_mb; Modal's defaults 125 and
//                  128 when not given), so a client's figures can be checked.

const net = require('net');
const tls = require('tls');

const MAX_DOMAINS = 100;
const DEFAULT_MILLI_CPU = 125;
const DEFAULT_MEMORY_MB = 128;
const NA = { OPEN: 1, BLOCKED: 2, ALLOWLIST: 3 };

module.exports = function workspace({ fail, STATUS, log, creds }) {
  const shq = (s) => `'${String(s).replace(/'/g, `'\\''`)}'`;

  // argv run on a terminal of the PTYInfo's size: script(1) makes the pty,
  // stty sets its window size before the command starts.
  function ptyArgv(argv, pty) {
    const cols = pty.winsz_cols || 80;
    const rows = pty.winsz_rows || 24;
    const cmd = `stty cols ${Number(cols)} rows ${Number(rows)} 2>/dev/null; exec ${argv.map(shq).join(' ')}`;
    return ['script', '-qefc', cmd, '/dev/null'];
  }

  function validCidr(s) {
    const [addr, len, extra] = String(s).split('/');
    const fam = net.isIP(addr);
    if (!fam || extra !== undefined) return false;
    if (len === undefined) return true;
    const n = Number(len);
    return /^[0-9]+$/.test(len) && n <= (fam === 4 ? 32 : 128);
  }

  const validDomain = (d) => /^(\*\.)?[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*$/.test(d) && d.length <= 253;

  function checkNetworkAccess(na) {
    if (!na) return;
    const cidrs = na.allowed_cidrs || [];
    const domains = na.allowed_domains || [];
    const type = na.network_access_type || 0;
    if (type === NA.BLOCKED && (cidrs.length || domains.length)) {
      fail(STATUS.INVALID_ARGUMENT, 'allowed_cidrs and allowed_domains cannot be used when the network is blocked');
    }
    for (const c of cidrs) if (!validCidr(c)) fail(STATUS.INVALID_ARGUMENT, `Invalid CIDR: ${c}`);
    if (domains.length > MAX_DOMAINS) fail(STATUS.INVALID_ARGUMENT, `At most ${MAX_DOMAINS} allowed domains`);
    for (const d of domains) if (!validDomain(d)) fail(STATUS.INVALID_ARGUMENT, `Invalid domain: ${d}`);
  }

  function forward(client, port) {
    const up = net.connect(port, '127.0.0.1');
    client.pipe(up).pipe(client);
    const end = () => { client.destroy(); up.destroy(); };
    client.on('error', end);
    up.on('error', end);
    client.on('close', end);
    up.on('close', end);
  }

  const listen = (server) => new Promise((resolve) => {
    server.on('error', (e) => log(`tunnel listener: ${e.message}`));
    server.listen(0, '127.0.0.1', () => resolve(server.address().port));
  });

  // Opens sb's tunnels; sb.tunnelsReady resolves once they listen.
  function openTunnels(sb, specs) {
    sb.tunnels = [];
    sb.tunnelServers = [];
    sb.tunnelsReady = Promise.all((specs || []).map(async (spec) => {
      const c = creds();
      const ts = tls.createServer({ key: c.key, cert: c.cert }, (s) => forward(s, spec.port));
      sb.tunnelServers.push(ts);
      const t = { host: '127.0.0.1', port: await listen(ts), container_port: spec.port };
      if (spec.unencrypted) {
        const ps = net.createServer((s) => forward(s, spec.port));
        sb.tunnelServers.push(ps);
        t.unencrypted_host = '127.0.0.1';
        t.unencrypted_port = await listen(ps);
      }
      sb.tunnels.push(t);
      log(`sandbox ${sb.sandbox_id}: tunnel ${JSON.stringify(t)}`);
    }));
    return sb.tunnelsReady;
  }

  function closeTunnels(sb) {
    for (const s of sb.tunnelServers || []) s.close();
    sb.tunnelServers = [];
  }

  function resourceUsage(sb) {
    const ns = ((sb.finished_at || Date.now()) - sb.created_at) * 1e6;
    const r = sb.resources || {};
    return {
      cpu_core_nanosecs: Math.round(ns * (r.milli_cpu || DEFAULT_MILLI_CPU) / 1000),
      mem_gib_nanosecs: Math.round(ns * (r.memory_mb || DEFAULT_MEMORY_MB) / 1024),
      gpu_nanosecs: 0,
    };
  }

  return { ptyArgv, checkNetworkAccess, openTunnels, closeTunnels, resourceUsage };
};
