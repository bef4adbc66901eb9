// bench.mjs - `sbxctl mcp` figures for make bench (tests/bench/mcp_bench.sh).
// One Node process measures, in the same run:
//   - tools/call exec_command `1+1` through the official MCP SDK and sbxctl mcp
//   - the same process.exec sent straight to sbxd's socket (one JSON-RPC line),
//     the floor that the MCP layer adds to
//   - with SBXCTL_OLD, the same tools/call through an older sbxctl
//   - 16 tools/call at once (run_code), calls per second
// The single calls are interleaved, one of each per round: on a loaded
// machine two phases one after the other see two different machines, and
// their ratio says little.
// Prints; never fails. Environment: SBXD_SOCKET, SBXCTL, SBXCTL_OLD, BENCH_QUICK.
import net from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const SOCK = process.env.SBXD_SOCKET;
const SBXCTL = process.env.SBXCTL;
const SBXCTL_OLD = process.env.SBXCTL_OLD;
const N = process.env.BENCH_QUICK ? 100 : 1000;

const pct = (xs, p) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
const ms = (x) => `${x.toFixed(3)} ms`;

/** Each of fns once per round, n rounds after a warm-up; their timings apart. */
async function timeitRounds(n, fns) {
  for (let i = 0; i < Math.min(50, n); i++) for (const fn of fns) await fn();
  const t = fns.map(() => []);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < fns.length; j++) {
      const t0 = process.hrtime.bigint();
      await fns[j]();
      t[j].push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  }
  return t.map((x) => ({ p50: pct(x, 0.5), p99: pct(x, 0.99) }));
}

/** A minimal JSON-RPC client on sbxd's socket. */
function rawConn() {
  const sock = net.createConnection(SOCK);
  let buf = '';
  let id = 0;
  const waiting = new Map();
  sock.setEncoding('utf8');
  sock.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const m = JSON.parse(buf.slice(0, i));
      buf = buf.slice(i + 1);
      if (m.id !== undefined && waiting.has(m.id)) {
        waiting.get(m.id)(m);
        waiting.delete(m.id);
      }
    }
  });
  const call = (method, params) => new Promise((resolve) => {
    waiting.set(++id, resolve);
    sock.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
  });
  return { call, close: () => sock.end() };
}

async function mcpClient(cmd) {
  const transport = new StdioClientTransport({
    command: cmd, args: ['-s', SOCK, 'mcp', '--provider', 'duktape', '--code-provider', 'duktape'],
    env: { PATH: process.env.PATH }, stderr: 'ignore',
  });
  const c = new Client({ name: 'sbxd-bench', version: '1.0.0' });
  await c.connect(transport);
  return c;
}

const client = await mcpClient(SBXCTL);
const old = SBXCTL_OLD ? await mcpClient(SBXCTL_OLD) : null;
const exec = (c) => () => c.callTool({ name: 'exec_command', arguments: { command: '1+1' } });

const raw = rawConn();
const created = await raw.call('sandbox.create', { provider: 'duktape' });
const id = created.result.id;
const direct = () => raw.call('process.exec', { sandbox: id, command: '1+1', stream: false });
const [mcp, dir, mold] = await timeitRounds(N, old ? [exec(client), direct, exec(old)] : [exec(client), direct]);
await raw.call('sandbox.destroy', { id });
raw.close();
if (old) await old.close();

const C = 16;
const rounds = Math.max(5, N / 50);
await Promise.all(Array.from({ length: C }, () => client.callTool({ name: 'run_code', arguments: { code: '1+1' } })));
const t0 = process.hrtime.bigint();
for (let r = 0; r < rounds; r++)
  await Promise.all(Array.from({ length: C }, () => client.callTool({ name: 'run_code', arguments: { code: '1+1' } })));
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
await client.close();

console.log(`  MCP tools/call exec_command(1+1), SDK -> sbxctl mcp -> sbxd: p50 ${ms(mcp.p50)}, p99 ${ms(mcp.p99)}`);
console.log(`  process.exec(1+1) straight on sbxd's socket from the same Node process: p50 ${ms(dir.p50)}, p99 ${ms(dir.p99)} (MCP/direct ${(mcp.p50 / dir.p50).toFixed(2)}x)`);
if (mold)
  console.log(`  the same tools/call through the older sbxctl (${SBXCTL_OLD}): p50 ${ms(mold.p50)}, p99 ${ms(mold.p99)} (old/direct ${(mold.p50 / dir.p50).toFixed(2)}x)`);
console.log(`  16 concurrent MCP run_code(1+1) calls: ${Math.round((rounds * C) / secs)} calls/s`);
