// bench.mjs - `sbxctl mcp` figures for make bench (tests/bench/mcp_bench.sh).
// One Node process measures, in the same run:
//   - tools/call exec_command `1+1` through the official MCP SDK and sbxctl mcp
//   - the same process.exec sent straight to sbxd's socket (one JSON-RPC line),
//     the floor that the MCP layer adds to
//   - 16 tools/call at once (run_code), calls per second
// Prints; never fails. Environment: SBXD_SOCKET, SBXCTL, BENCH_QUICK.
import net from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const SOCK = process.env.SBXD_SOCKET;
const SBXCTL = process.env.SBXCTL;
const N = process.env.BENCH_QUICK ? 100 : 1000;

const pct = (xs, p) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
const ms = (x) => `${x.toFixed(3)} ms`;

async function timeit(n, fn) {
  for (let i = 0; i < Math.min(50, n); i++) await fn(); // warm-up
  const t = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    await fn();
    t.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return { p50: pct(t, 0.5), p99: pct(t, 0.99) };
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

const transport = new StdioClientTransport({
  command: SBXCTL, args: ['-s', SOCK, 'mcp', '--provider', 'duktape', '--code-provider', 'duktape'],
  env: { PATH: process.env.PATH }, stderr: 'ignore',
});
const client = new Client({ name: 'sbxd-bench', version: '1.0.0' });
await client.connect(transport);

const mcp = await timeit(N, () => client.callTool({ name: 'exec_command', arguments: { command: '1+1' } }));

const raw = rawConn();
const created = await raw.call('sandbox.create', { provider: 'duktape' });
const id = created.result.id;
const direct = await timeit(N, () => raw.call('process.exec', { sandbox: id, command: '1+1', stream: false }));
await raw.call('sandbox.destroy', { id });
raw.close();

const C = 16;
const rounds = Math.max(5, N / 50);
await Promise.all(Array.from({ length: C }, () => client.callTool({ name: 'run_code', arguments: { code: '1+1' } })));
const t0 = process.hrtime.bigint();
for (let r = 0; r < rounds; r++)
  await Promise.all(Array.from({ length: C }, () => client.callTool({ name: 'run_code', arguments: { code: '1+1' } })));
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
await client.close();

console.log(`  MCP tools/call exec_command(1+1), SDK -> sbxctl mcp -> sbxd: p50 ${ms(mcp.p50)}, p99 ${ms(mcp.p99)}`);
console.log(`  process.exec(1+1) straight on sbxd's socket from the same Node process: p50 ${ms(direct.p50)}, p99 ${ms(direct.p99)} (MCP/direct ${(mcp.p50 / direct.p50).toFixed(2)}x)`);
console.log(`  16 concurrent MCP run_code(1+1) calls: ${Math.round((rounds * C) / secs)} calls/s`);
