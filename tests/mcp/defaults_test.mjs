// defaults_test.mjs - what a bare `sbxctl mcp` offers and how its results
// read (issue 19), through the official MCP SDK against a real sbxd.
// Environment: as mcp_test.mjs (SBXD_SOCKET, SBXD_IDLE_SOCKET: an sbxd with
// docker disabled, SBXCTL, MCP_DOCKER).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import net from 'node:net';

const SOCK = process.env.SBXD_SOCKET;
const NODOCKER = process.env.SBXD_IDLE_SOCKET;
const SBXCTL = process.env.SBXCTL;
const DOCKER = process.env.MCP_DOCKER === '1';
const DOCKER_SKIP = DOCKER ? false : `no Docker engine: ${process.env.MCP_DOCKER || 'not set up'}`;

async function connect(args, sock) {
  const transport = new StdioClientTransport({
    command: SBXCTL, args: ['-s', sock, 'mcp', ...args],
    env: { PATH: process.env.PATH }, stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr.on('data', (d) => { stderr += d; });
  const client = new Client({ name: 'sbxd-defaults-test', version: '1.0.0' });
  await client.connect(transport);
  return { client, stderr: () => stderr };
}

// daemon.info straight on sbxd's socket.
function daemonInfo(sock) {
  return new Promise((resolve, reject) => {
    const c = net.createConnection(sock);
    let buf = '';
    c.on('connect', () => c.write('{"jsonrpc":"2.0","id":1,"method":"daemon.info"}\n'));
    c.on('data', (d) => {
      buf += d;
      const nl = buf.indexOf('\n');
      if (nl < 0) return;
      c.end();
      try { resolve(JSON.parse(buf.slice(0, nl)).result); } catch (e) { reject(e); }
    });
    c.on('error', reject);
  });
}

// Waits until the docker warm pool NAME has a container ready: the other test
// files on this sbxd take from it too, and a refill on the private engine
// takes seconds, so "the pool served it" is only asked of a pool that can.
async function poolReady(sock, name, ms = 90000) {
  const end = Date.now() + ms;
  for (;;) {
    const info = await daemonInfo(sock);
    const dk = (info.providers || []).find((p) => p.name === 'docker');
    const pool = ((dk && dk.info && dk.info.pools) || []).find((p) => p.name === name);
    if (pool && pool.ready > 0) return pool;
    if (Date.now() > end) throw new Error(`pool ${name} not ready: ${JSON.stringify(pool)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('a bare sbxctl mcp on an sbxd without docker', () => {
  let s;
  before(async () => { s = await connect([], NODOCKER); });
  after(async () => { await s.client.close(); });

  test('offers run_code only, naming its provider', async () => {
    const { tools } = await s.client.listTools();
    assert.deepEqual(tools.map((t) => t.name), ['run_code']);
    assert.match(tools[0].description, /Runs on sbxd's (js|duktape) provider \(JavaScript, not a shell\)\./);
    assert.match(s.stderr(), /no shell provider \(docker: disabled in config\): offering run_code only/);
  });

  test('exec_command is not there (unknown tool)', async () => {
    await assert.rejects(s.client.callTool({ name: 'exec_command', arguments: { command: 'echo hi' } }),
      /exec_command/);
  });

  test('run_code still works', async () => {
    // js returns the program's return value, duktape its completion value.
    const r = await s.client.callTool({ name: 'run_code', arguments: { code: 'return 6*7' } });
    assert.equal(r.structuredContent.result, 42);
    assert.equal(r.content[0].text, 'result: 42\n');
  });
});

describe('tool descriptions name the provider', () => {
  test('--provider duktape: commands are JavaScript, and the description says so', async () => {
    const s = await connect(['--provider', 'duktape'], NODOCKER);
    const { tools } = await s.client.listTools();
    const exec = tools.find((t) => t.name === 'exec_command');
    assert.match(exec.description, /Runs on sbxd's duktape provider \(commands are JavaScript, not shell\)\./);
    for (const t of tools) assert.match(t.description, /Runs (on sbxd's|in sbxd sandbox)/, t.name);
    await s.client.close();
  });
});

describe('a bare sbxctl mcp on an sbxd with docker', () => {
  let s;
  before(async () => {
    if (!DOCKER) return;
    await poolReady(SOCK, 'warm');
    s = await connect([], SOCK);
  });
  after(async () => { if (s) await s.client.close(); });

  test('runs shell on docker with the configured image', { skip: DOCKER_SKIP }, async () => {
    const { tools } = await s.client.listTools();
    assert.ok(tools.length >= 6, 'the command tools, run_code (and the file tools)');
    const exec = tools.find((t) => t.name === 'exec_command');
    assert.match(exec.description, /Runs on sbxd's docker provider, image sbx-test\/busybox\./);
    for (const t of tools.filter((x) => x.name !== 'run_code'))
      assert.match(t.description, /Runs on sbxd's docker provider, image sbx-test\/busybox\./, t.name);
    const r = await s.client.callTool({ name: 'exec_command',
      arguments: { command: 'echo hi; exit 3' } }, undefined, { timeout: 120000 });
    assert.equal(r.isError, undefined);
    assert.equal(r.structuredContent.exit_code, 3);
    assert.equal(r.content[0].text, 'stdout:\nhi\n\nexit code 3\n');
    const info = await s.client.callTool({ name: 'sandbox_info', arguments: {} });
    assert.equal(info.structuredContent.sandbox.provider, 'docker');
    // The configured warm pool (tests/providers/mcp.sh) served it.
    assert.equal(info.structuredContent.sandbox.metadata.pool, 'warm');
  });

  test('grep that matches nothing: exit code 1, not a failed call', { skip: DOCKER_SKIP }, async () => {
    const r = await s.client.callTool({ name: 'exec_command',
      arguments: { command: 'echo abc | grep zzz' } });
    assert.equal(r.isError, undefined);
    assert.equal(r.structuredContent.exit_code, 1);
    assert.equal(r.content[0].text, '(no output)\n\nexit code 1\n');
  });
});
