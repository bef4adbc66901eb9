// mcp_test.mjs - `sbxctl mcp` driven by the official MCP TypeScript SDK
// (@modelcontextprotocol/sdk, pinned in package-lock.json) against a real sbxd.
//
// Environment (set by tests/providers/mcp.sh):
//   SBXD_SOCKET     the sbxd socket
//   SBXCTL          the sbxctl binary
//   MCP_DOCKER      "1" when sbxd has a Docker engine with the sbx-test/busybox image,
//                   else the reason the Docker tests are skipped
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { McpError, ErrorCode } from '@modelcontextprotocol/sdk/types.js';

const SOCK = process.env.SBXD_SOCKET;
const SBXCTL = process.env.SBXCTL;
const DOCKER = process.env.MCP_DOCKER === '1';
const DOCKER_SKIP = DOCKER ? false : `no Docker engine: ${process.env.MCP_DOCKER || 'not set up'}`;
assert.ok(SOCK && SBXCTL, 'SBXD_SOCKET and SBXCTL must be set');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** An SDK client connected to a fresh `sbxctl mcp ARGS...` child. */
async function connect(args, sock = SOCK) {
  const transport = new StdioClientTransport({
    command: SBXCTL,
    args: ['-s', sock, 'mcp', '--progress-ms', '200', ...args],
    env: { PATH: process.env.PATH },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr.on('data', (d) => { stderr += d; });
  const client = new Client({ name: 'sbxd-mcp-test', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport, stderr: () => stderr };
}

/** Closes a session (stdin EOF: sbxctl mcp cleans up and exits) and checks
 *  that it reported no sanitizer error (make asan) on the way out. */
async function closeClean(s) {
  await s.client.close();
  await sleep(50);
  assert.doesNotMatch(s.stderr(), /ERROR: (Address|Leak)Sanitizer|runtime error:/);
}

/** The sandboxes sbxd has for us, by id. */
function sandboxes() {
  const out = execFileSync(SBXCTL, ['-s', SOCK, '--json', 'ls'], { encoding: 'utf8' });
  return new Map(JSON.parse(out).sandboxes.map((s) => [s.id, s]));
}

/** Polls sandbox_info until a process whose command is `command` has exited. */
async function waitExited(client, command, ms = 10000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    const r = await client.callTool({ name: 'sandbox_info', arguments: {} });
    last = r.structuredContent.processes.find((p) => p.command === command);
    if (last && last.status === 'exited') return last;
    await sleep(100);
  }
  return last;
}

/** Calls a tool, aborts it once the first progress notification came, and
 *  checks that the call rejects. */
async function cancelAfterProgress(client, args) {
  const ac = new AbortController();
  let progressed = 0;
  const call = client.callTool({ name: 'exec_command', arguments: args }, undefined, {
    signal: ac.signal,
    onprogress: () => { if (++progressed === 1) ac.abort('test cancels'); },
    timeout: 60000,
  });
  await assert.rejects(call, 'the cancelled call rejects');
  return progressed;
}

// ---- raw protocol: what no SDK would send -----------------------------------------------

/** A raw `sbxctl mcp` child: send lines, read answers. A child a failed test
 *  left behind is killed after the suite, so that node can exit. */
const rawChildren = new Set();
function raw(extra = [], sock = SOCK) {
  const child = spawn(SBXCTL, ['-s', sock, 'mcp', '--provider', 'duktape',
    '--code-provider', 'duktape', ...extra], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  rawChildren.add(child);
  child.on('close', () => rawChildren.delete(child));
  let buf = '';
  const waiters = [];
  const msgs = [];
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      msgs.push(JSON.parse(line)); // stdout carries JSON-RPC lines only
    }
    for (const w of waiters.splice(0)) w();
  });
  const next = async () => {
    while (msgs.length === 0) {
      await new Promise((r) => { waiters.push(r); setTimeout(r, 10000); });
      if (msgs.length === 0 && child.exitCode !== null) throw new Error('sbxctl mcp exited');
    }
    return msgs.shift();
  };
  const send = (line) => child.stdin.write(line + '\n');
  const close = () => new Promise((r) => { child.on('close', (code) => r(code)); child.stdin.end(); });
  const closed = () => new Promise((r) => {
    if (child.exitCode !== null || child.signalCode !== null) r(child.exitCode);
    else child.on('close', (code) => r(code));
  });
  return { child, send, next, close, closed, stderr: () => stderr };
}

const init = (v) => JSON.stringify({
  jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: v, capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
});

describe('raw protocol', () => {
  after(() => { for (const c of rawChildren) c.kill('SIGKILL'); });

  test('initialize: the client\'s revision 2025-06-18 is accepted as asked', async () => {
    const r = raw();
    r.send(init('2025-06-18'));
    const m = await r.next();
    assert.equal(m.id, 1);
    assert.equal(m.result.protocolVersion, '2025-06-18');
    assert.deepEqual(m.result.capabilities, { tools: { listChanged: false } });
    assert.equal(m.result.serverInfo.name, 'sbxd');
    assert.equal(await r.close(), 0);
  });

  test('initialize: an unknown revision gets the newest one, 2025-11-25', async () => {
    const r = raw();
    r.send(init('1999-01-01'));
    assert.equal((await r.next()).result.protocolVersion, '2025-11-25');
    await r.close();
  });

  test('revision 2025-03-26: no outputSchema, no structuredContent', async () => {
    const r = raw();
    r.send(init('2025-03-26'));
    assert.equal((await r.next()).result.protocolVersion, '2025-03-26');
    r.send(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' }));
    const list = await r.next();
    assert.ok(list.result.tools.length === 14 && list.result.tools.every((t) => !t.outputSchema));
    r.send(JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/call',
      params: { name: 'run_code', arguments: { code: '6*7' } } }));
    const res = await r.next();
    assert.equal(res.result.structuredContent, undefined);
    assert.equal(res.result.content[0].text, 'result: 42\n');
    assert.equal(JSON.parse(res.result.content[1].text).result, 42);
    await r.close();
  });

  test('revision 2024-11-05: no annotations, progress without a message', async () => {
    const r = raw(['--progress-ms', '100']);
    r.send(init('2024-11-05'));
    assert.equal((await r.next()).result.protocolVersion, '2024-11-05');
    r.send(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' }));
    const list = await r.next();
    assert.ok(list.result.tools.every((t) => !t.annotations && !t.title && !t.outputSchema));
    r.send(JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: {
      name: 'exec_command', arguments: { command: 'var t = Date.now(); while (Date.now() - t < 400) {} 1' },
      _meta: { progressToken: 7 } } }));
    const p = await r.next();
    assert.equal(p.method, 'notifications/progress');
    assert.equal(p.params.progressToken, 7);
    assert.equal(p.params.message, undefined);
    let m;
    while ((m = await r.next()).method) ; // more progress, then the answer
    assert.equal(m.id, 3);
    assert.equal(JSON.parse(m.result.content[1].text).result, 1);
    await r.close();
  });

  test('sbxd not there: a tool call is isError naming the socket, the server stays up', async () => {
    const r = raw([], '/nonexistent/sbxd.sock');
    r.send(init('2025-06-18'));
    assert.equal((await r.next()).result.protocolVersion, '2025-06-18');
    r.send(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call',
      params: { name: 'exec_command', arguments: { command: '1' } } }));
    const m = await r.next();
    assert.equal(m.result.isError, true);
    assert.match(m.result.content[0].text, /cannot connect to sbxd at \/nonexistent\/sbxd.sock/);
    r.send(JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'ping' }));
    assert.deepEqual((await r.next()).result, {});
    assert.equal(await r.close(), 0);
  });

  test('SIGTERM while a command runs: the sandbox is destroyed, exit 0', async () => {
    const r = raw();
    r.send(init('2025-06-18'));
    await r.next();
    r.send(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call',
      params: { name: 'sandbox_info', arguments: {} } }));
    const id = (await r.next()).result.structuredContent.sandbox.id;
    assert.ok(sandboxes().has(id));
    r.send(JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/call',
      params: { name: 'exec_command', arguments: { command: 'while (true) {}' } } }));
    await sleep(300);
    r.child.kill('SIGTERM');
    assert.equal(await r.closed(), 0, r.stderr());
    assert.equal(sandboxes().has(id), false, 'destroyed on the way out');
  });

  test('bad input gets JSON-RPC errors and the server keeps serving', async () => {
    const r = raw(['--max-message', '4096']);
    r.send(init('2025-06-18'));
    await r.next();
    r.send('this is not json');
    let m = await r.next();
    assert.equal(m.error.code, -32700);
    assert.equal(m.id, null);
    r.send(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'x'.repeat(8000) }));
    m = await r.next();
    assert.equal(m.error.code, -32600, 'a line over --max-message');
    r.send(JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'resources/list' }));
    m = await r.next();
    assert.equal(m.id, 3);
    assert.equal(m.error.code, -32601);
    r.send(JSON.stringify({ jsonrpc: '1.0', id: 4, method: 'ping' }));
    assert.equal((await r.next()).error.code, -32600);
    r.send(JSON.stringify([{ jsonrpc: '2.0', id: 5, method: 'ping' }]));
    assert.equal((await r.next()).error.code, -32600);
    r.send(JSON.stringify({ jsonrpc: '2.0', id: 6, method: 'tools/call', params: { arguments: {} } }));
    assert.equal((await r.next()).error.code, -32602);
    r.send(JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'ping' }));
    m = await r.next();
    assert.deepEqual(m, { jsonrpc: '2.0', id: 7, result: {} });
    assert.equal(await r.close(), 0);
  });
});

// ---- the SDK against the duktape provider --------------------------------------------------

describe('MCP SDK client, duktape provider', () => {
  let s;
  let sandboxId;
  before(async () => { s = await connect(['--provider', 'duktape', '--code-provider', 'duktape']); });
  after(async () => { if (s) await closeClean(s); });

  test('initialize: server info, tools capability, instructions', () => {
    assert.equal(s.client.getServerVersion().name, 'sbxd');
    assert.deepEqual(s.client.getServerCapabilities().tools, { listChanged: false });
    assert.match(s.client.getInstructions(), /exec_command/);
  });

  test('ping', async () => {
    assert.deepEqual(await s.client.ping(), {});
  });

  test('tools/list: fourteen tools with input and output schemas', async () => {
    const { tools } = await s.client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(),
      ['directory_tree', 'edit_file', 'exec_command', 'get_file_info', 'kill_process', 'list_directory',
        'move_file', 'process_output', 'read_file', 'run_code', 'sandbox_info', 'search_files',
        'spawn_process', 'write_file']);
    for (const t of tools) {
      assert.equal(t.inputSchema.type, 'object', t.name);
      assert.equal(t.outputSchema.type, 'object', t.name);
      assert.ok(t.description.length > 20, t.name);
    }
    const exec = tools.find((t) => t.name === 'exec_command');
    assert.deepEqual(exec.inputSchema.required, ['command']);
  });

  test('exec_command: output, completion value, exit code 0', async () => {
    const r = await s.client.callTool({ name: 'exec_command',
      arguments: { command: 'console.log("hi from duktape"); 6*7' } });
    assert.equal(r.isError, undefined);
    assert.equal(r.structuredContent.stdout, 'hi from duktape\n');
    assert.equal(r.structuredContent.result, 42);
    assert.equal(r.structuredContent.exit_code, 0);
    // Text for people and models; the JSON is in structuredContent.
    assert.match(r.content[0].text, /^stdout:\nhi from duktape\n\nexit code 0\n$/);
  });

  test('exec_command: an uncaught error is a result (not isError) with the exception', async () => {
    const r = await s.client.callTool({ name: 'exec_command',
      arguments: { command: 'throw new RangeError("nope")' } });
    assert.equal(r.isError, undefined);
    assert.match(r.content[0].text, /RangeError: nope/);
    assert.notEqual(r.structuredContent.exit_code, 0);
    assert.equal(r.structuredContent.exception.name, 'RangeError');
  });

  test('run_code: result and logs; an exception is an error result', async () => {
    let r = await s.client.callTool({ name: 'run_code',
      arguments: { code: 'console.log("a"); console.log("b", 2); ({sum: 1 + 2})' } });
    assert.equal(r.isError, undefined);
    assert.deepEqual(r.structuredContent.result, { sum: 3 });
    assert.deepEqual(r.structuredContent.logs, ['a', 'b 2']);
    assert.equal(r.structuredContent.error, null);
    assert.equal(r.content[0].text, 'console:\na\nb 2\n\nresult: {\n  "sum": 3\n}\n');
    r = await s.client.callTool({ name: 'run_code', arguments: { code: 'null.x' } });
    assert.equal(r.isError, undefined);
    assert.equal(r.structuredContent.error.name, 'TypeError');
    assert.match(r.content[0].text, /\n\nuncaught TypeError: cannot read property/);
  });

  test('run_code: a timeout is a TimeoutError', async () => {
    const r = await s.client.callTool({ name: 'run_code',
      arguments: { code: 'while (true) {}', timeout_ms: 300 } });
    assert.equal(r.isError, undefined);
    assert.equal(r.structuredContent.timed_out, true);
    assert.equal(r.structuredContent.error.name, 'TimeoutError');
  });

  test('several tools/call at once', async () => {
    const rs = await Promise.all([1, 2, 3, 4, 5].map((i) =>
      s.client.callTool({ name: 'run_code', arguments: { code: `${i} * 10` } })));
    assert.deepEqual(rs.map((r) => r.structuredContent.result), [10, 20, 30, 40, 50]);
  });

  test('spawn_process + process_output (wait_ms, offsets remembered)', async () => {
    const sp = await s.client.callTool({ name: 'spawn_process',
      arguments: { command: 'for (var i = 0; i < 3; i++) console.log("line" + i)' } });
    assert.equal(sp.isError, undefined);
    const pid = sp.structuredContent.pid;
    assert.ok(pid > 0);
    let r = await s.client.callTool({ name: 'process_output', arguments: { pid, wait_ms: 5000 } });
    assert.equal(r.structuredContent.running, false);
    assert.equal(r.structuredContent.exit_code, 0);
    assert.equal(r.structuredContent.stdout, 'line0\nline1\nline2\n');
    assert.equal(r.structuredContent.stdout_offset, 18);
    r = await s.client.callTool({ name: 'process_output', arguments: { pid } });
    assert.equal(r.structuredContent.stdout, '', 'the second read starts where the first stopped');
    r = await s.client.callTool({ name: 'process_output', arguments: { pid, stdout_offset: 6 } });
    assert.equal(r.structuredContent.stdout, 'line1\nline2\n');
  });

  test('kill_process: a running process is killed', async () => {
    const sp = await s.client.callTool({ name: 'spawn_process', arguments: { command: 'while (true) {}' } });
    const pid = sp.structuredContent.pid;
    const k = await s.client.callTool({ name: 'kill_process', arguments: { pid } });
    assert.deepEqual(k.structuredContent, { pid, already_exited: false });
    const r = await s.client.callTool({ name: 'process_output', arguments: { pid, wait_ms: 5000 } });
    assert.equal(r.structuredContent.running, false);
    assert.equal(r.structuredContent.killed, true);
  });

  test('sandbox_info: the duktape sandbox and its processes', async () => {
    const r = await s.client.callTool({ name: 'sandbox_info', arguments: {} });
    assert.equal(r.structuredContent.sandbox.provider, 'duktape');
    assert.equal(r.structuredContent.sandbox.status, 'running');
    assert.ok(r.structuredContent.processes.length >= 3);
    sandboxId = r.structuredContent.sandbox.id;
  });

  test('bad arguments are an isError result; an unknown tool is -32602', async () => {
    let r = await s.client.callTool({ name: 'exec_command', arguments: { cmd: 'x' } });
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /unknown argument "cmd"/);
    r = await s.client.callTool({ name: 'process_output', arguments: { pid: 'one' } });
    assert.equal(r.isError, true);
    r = await s.client.callTool({ name: 'process_output', arguments: { pid: 999999 } });
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /not found/);
    await assert.rejects(s.client.callTool({ name: 'no_such_tool', arguments: {} }),
      (e) => e instanceof McpError && e.code === ErrorCode.InvalidParams);
  });

  test('progress notifications with the client\'s progressToken', async () => {
    const seen = [];
    const r = await s.client.callTool({ name: 'exec_command',
      arguments: { command: 'var t = Date.now(); while (Date.now() - t < 1200) {} "done"' } },
      undefined, { onprogress: (p) => seen.push(p) });
    assert.equal(r.structuredContent.result, 'done');
    assert.ok(seen.length >= 2, `got ${seen.length} progress notifications`);
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress);
    assert.match(seen[0].message, /running|starting/);
  });

  test('notifications/cancelled kills the running command', async () => {
    const cmd = 'while (true) { /* cancel me */ }';
    const n = await cancelAfterProgress(s.client, { command: cmd });
    assert.ok(n >= 1);
    const p = await waitExited(s.client, cmd);
    assert.equal(p?.status, 'exited', 'the remote process is gone');
    assert.equal(p.exit_code, 137);
    // the server still answers afterwards
    const r = await s.client.callTool({ name: 'run_code', arguments: { code: '1 + 1' } });
    assert.equal(r.structuredContent.result, 2);
  });

  test('closing the client destroys the sandboxes it created', async () => {
    assert.ok(sandboxId && sandboxes().has(sandboxId));
    await closeClean(s);
    s = null;
    assert.equal(sandboxes().has(sandboxId), false);
  });
});

// run_code on the js provider (JavaScriptCore, the code-mode contract of
// proto/PROTOCOL.md): the default code provider when sbxd offers it.
const JS = (() => {
  try {
    const info = JSON.parse(execFileSync(SBXCTL, ['-s', SOCK, '--json', 'info'], { encoding: 'utf8' }));
    const js = info.providers.find((p) => p.name === 'js');
    return js?.available ? false : `the js provider is not available: ${js ? js.reason : 'not built'}`;
  } catch (e) {
    return `sbxctl info failed: ${e.message}`;
  }
})();
const jtest = (name, fn) => test(name, { skip: JS }, fn);

describe('MCP SDK client, run_code on the js provider', () => {
  let s;
  before(async () => { if (!JS) s = await connect(['--provider', 'duktape']); });
  after(async () => { if (s) await closeClean(s); });

  jtest('a TypeScript program body: return value, logs', async () => {
    const r = await s.client.callTool({ name: 'run_code', arguments: {
      code: 'const a: number = 2;\nconsole.log("x", { a });\nreturn a * 21;' } });
    assert.equal(r.isError, undefined, r.content[0].text);
    assert.equal(r.structuredContent.result, 42);
    assert.deepEqual(r.structuredContent.logs, ['x {"a":2}']);
    assert.equal(r.structuredContent.error, null);
  });

  jtest('top-level await; a fresh global per run', async () => {
    let r = await s.client.callTool({ name: 'run_code', arguments: {
      code: 'globalThis.seen = 1; const v = await Promise.all([1, 2].map(async (x) => x * 5)); return v;' } });
    assert.deepEqual(r.structuredContent.result, [5, 10]);
    r = await s.client.callTool({ name: 'run_code', arguments: { code: 'return typeof globalThis.seen;' } });
    assert.equal(r.structuredContent.result, 'undefined');
  });

  jtest('an uncaught error, a timeout', async () => {
    let r = await s.client.callTool({ name: 'run_code', arguments: { code: 'console.log("before"); throw new RangeError("too far");' } });
    assert.equal(r.isError, undefined);
    assert.equal(r.structuredContent.error.name, 'RangeError');
    assert.equal(r.structuredContent.error.message, 'too far');
    assert.deepEqual(r.structuredContent.logs.slice(0, 1), ['before']);
    r = await s.client.callTool({ name: 'run_code', arguments: { code: 'while (true) {}', timeout_ms: 300 } });
    assert.equal(r.isError, undefined);
    assert.equal(r.structuredContent.timed_out, true);
    assert.equal(r.structuredContent.error.name, 'TimeoutError');
  });

  jtest('sandbox_info is the command sandbox; run_code runs in a js sandbox of its own', async () => {
    const r = await s.client.callTool({ name: 'sandbox_info', arguments: {} });
    assert.equal(r.structuredContent.sandbox.provider, 'duktape');
    const code = r.structuredContent.code_sandbox;
    assert.equal(code.provider, 'js');
    assert.equal(sandboxes().get(code.id)?.provider, 'js', 'sbxd has it');
  });

  jtest('cancelling run_code ends the program: the next one runs at once', async () => {
    const ac = new AbortController();
    let progressed = 0;
    const call = s.client.callTool({ name: 'run_code', arguments: { code: 'while (true) {}' } }, undefined, {
      signal: ac.signal, onprogress: () => { if (++progressed === 1) ac.abort('test cancels'); } });
    await assert.rejects(call);
    // One program runs at a time per js sandbox: had the loop survived, this would wait out its timeout.
    const r = await s.client.callTool({ name: 'run_code', arguments: { code: 'return "next"', timeout_ms: 5000 } });
    assert.equal(r.isError, undefined, r.content[0].text);
    assert.equal(r.structuredContent.result, 'next');
  });
});

describe('MCP SDK client, named sandbox (--sandbox)', () => {
  test('uses the named sandbox and leaves it in place', async () => {
    const id = `mcp-named-${process.pid}`;
    execFileSync(SBXCTL, ['-s', SOCK, 'create', '--provider', 'duktape', '--id', id]);
    const s = await connect(['--sandbox', id]);
    try {
      const r = await s.client.callTool({ name: 'exec_command', arguments: { command: 'var kept = 5; kept' } });
      assert.equal(r.structuredContent.result, 5);
      const info = await s.client.callTool({ name: 'sandbox_info', arguments: {} });
      assert.equal(info.structuredContent.sandbox.id, id);
    } finally {
      await closeClean(s);
    }
    assert.ok(sandboxes().has(id), 'still there after the client left');
    const out = execFileSync(SBXCTL, ['-s', SOCK, 'exec', id, '--', 'kept'], { encoding: 'utf8' });
    assert.match(out, /5/);
    execFileSync(SBXCTL, ['-s', SOCK, 'rm', id]);
  });
});

describe('MCP SDK client, bounds', () => {
  test('--max-output: output kept per stream is capped; process_output continues where it was cut', async () => {
    const s = await connect(['--provider', 'duktape', '--max-output', '1024']);
    try {
      let r = await s.client.callTool({ name: 'exec_command',
        arguments: { command: 'for (var i = 0; i < 100; i++) console.log("0123456789abcdefghi" + i)' } });
      assert.equal(r.structuredContent.truncated, true);
      assert.ok(r.structuredContent.stdout.length <= 1024 && r.structuredContent.stdout.length > 900);
      assert.ok(r.structuredContent.stdout.startsWith('0123456789abcdefghi0\n'));
      const sp = await s.client.callTool({ name: 'spawn_process',
        arguments: { command: 'for (var i = 0; i < 100; i++) console.log("0123456789abcdefghi" + i)' } });
      const pid = sp.structuredContent.pid;
      let all = '';
      for (let n = 0; n < 10; n++) {
        r = await s.client.callTool({ name: 'process_output', arguments: { pid, wait_ms: 5000 } });
        assert.ok(r.structuredContent.stdout.length <= 1024);
        all += r.structuredContent.stdout;
        if (!r.structuredContent.truncated) break;
      }
      const want = Array.from({ length: 100 }, (_, i) => `0123456789abcdefghi${i}\n`).join('');
      assert.equal(all, want, 'the pieces join up to the whole output');
    } finally {
      await closeClean(s);
    }
  });

  test('--max-calls: calls beyond it are refused with isError, the others run', async () => {
    const s = await connect(['--provider', 'duktape', '--code-provider', 'duktape', '--max-calls', '2']);
    try {
      const slow = 'var t = Date.now(); while (Date.now() - t < 600) {} "slow"';
      const rs = await Promise.all([
        s.client.callTool({ name: 'run_code', arguments: { code: slow } }),
        s.client.callTool({ name: 'exec_command', arguments: { command: slow } }),
        s.client.callTool({ name: 'run_code', arguments: { code: '1' } }),
      ]);
      assert.equal(rs[0].structuredContent.result, 'slow');
      assert.equal(rs[1].structuredContent.result, 'slow');
      assert.equal(rs[2].isError, true);
      assert.match(rs[2].content[0].text, /too many tool calls/);
      const r = await s.client.callTool({ name: 'run_code', arguments: { code: '2' } });
      assert.equal(r.structuredContent.result, 2, 'accepted again once the others finished');
    } finally {
      await closeClean(s);
    }
  });
});

describe('MCP SDK client, sbxd closes the idle session', () => {
  test('the next call reconnects; the sandbox is still the same', { skip: !process.env.SBXD_IDLE_SOCKET }, async () => {
    const s = await connect(['--provider', 'duktape'], process.env.SBXD_IDLE_SOCKET);
    try {
      let r = await s.client.callTool({ name: 'exec_command', arguments: { command: 'var x = 41; x' } });
      assert.equal(r.structuredContent.result, 41);
      const before = (await s.client.callTool({ name: 'sandbox_info', arguments: {} })).structuredContent.sandbox.id;
      // limits.session_idle_timeout_ms is 1000 there; the check runs every second
      const end = Date.now() + 8000;
      while (!/connection to sbxd closed/.test(s.stderr()) && Date.now() < end) await sleep(100);
      assert.match(s.stderr(), /connection to sbxd closed/);
      r = await s.client.callTool({ name: 'exec_command', arguments: { command: 'x + 1' } });
      assert.equal(r.structuredContent.result, 42, 'same sandbox, state kept');
      const after = (await s.client.callTool({ name: 'sandbox_info', arguments: {} })).structuredContent.sandbox.id;
      assert.equal(after, before);
      // Destroyed behind its back while the session is closed (no sandbox.status
      // reaches it): the next call gets "not found" and runs in a new sandbox.
      const start = s.stderr().length;
      while (!/connection to sbxd closed/.test(s.stderr().slice(start)) && Date.now() < end + 8000) await sleep(100);
      execFileSync(SBXCTL, ['-s', process.env.SBXD_IDLE_SOCKET, 'rm', before]);
      r = await s.client.callTool({ name: 'exec_command', arguments: { command: 'typeof x' } });
      assert.equal(r.isError, undefined, r.content[0].text);
      assert.equal(r.structuredContent.result, 'undefined', 'a fresh sandbox');
      const third = (await s.client.callTool({ name: 'sandbox_info', arguments: {} })).structuredContent.sandbox.id;
      assert.notEqual(third, before);
    } finally {
      await closeClean(s);
    }
  });
});

// ---- the SDK against the docker provider ------------------------------------------------------

// Each test is skipped on its own without an engine, so the skips are counted.
const dtest = (name, fn) => test(name, { skip: DOCKER_SKIP }, fn);

describe('MCP SDK client, docker provider', () => {
  let s;
  let sandboxId;
  before(async () => {
    if (DOCKER) s = await connect(['--provider', 'docker', '--image', 'sbx-test/busybox']);
  });
  after(async () => { if (s) await closeClean(s); });

  dtest('exec_command: stdout, stderr, exit code 3 is a result that says so', async () => {
    const r = await s.client.callTool({ name: 'exec_command',
      arguments: { command: 'echo hi; echo oops >&2; exit 3' } }, undefined, { timeout: 120000 });
    assert.equal(r.isError, undefined);
    assert.equal(r.content[0].text, 'stdout:\nhi\n\nstderr:\noops\n\nexit code 3\n');
    assert.equal(r.structuredContent.exit_code, 3);
    assert.equal(r.structuredContent.stdout, 'hi\n');
    assert.equal(r.structuredContent.stderr, 'oops\n');
  });

  dtest('exec_command: argv, cwd, env and stdin', async () => {
    let r = await s.client.callTool({ name: 'exec_command',
      arguments: { command: ['sh', '-c', 'echo "$GREETING from $(pwd)"'], cwd: '/tmp', env: { GREETING: 'hello' } } });
    assert.equal(r.structuredContent.stdout, 'hello from /tmp\n');
    r = await s.client.callTool({ name: 'exec_command', arguments: { command: 'tr a-z A-Z', stdin: 'abc' } });
    assert.equal(r.structuredContent.stdout, 'ABC');
  });

  dtest('output that is not UTF-8 arrives with U+FFFD in its place', async () => {
    const r = await s.client.callTool({ name: 'exec_command', arguments: { command: "printf 'a\\377b\\303'" } });
    assert.equal(r.structuredContent.stdout, 'a\uFFFDb\uFFFD');
  });

  dtest('file tools: write, read, edit by exact replacement, list, tree, search, move, info', async () => {
    const call = (name, args) => s.client.callTool({ name, arguments: args }, undefined, { timeout: 120000 });
    let r = await call('write_file', { path: '/workspace/mcp/notes.txt', content: 'alpha\nbeta\ngamma\n' });
    assert.ok(!r.isError, r.content[0].text);
    assert.equal(r.structuredContent.size, 17);
    r = await call('read_file', { path: '/workspace/mcp/notes.txt' });
    assert.equal(r.content[0].text, 'alpha\nbeta\ngamma\n');
    assert.equal(r.structuredContent.eof, true);
    r = await call('read_file', { path: 'mcp/notes.txt', offset: 6, length: 4 });
    assert.equal(r.structuredContent.content, 'beta');
    r = await call('edit_file', { path: '/workspace/mcp/notes.txt', old_text: 'beta', new_text: 'BETA' });
    assert.ok(!r.isError, r.content[0].text);
    r = await call('exec_command', { command: 'cat /workspace/mcp/notes.txt' });
    assert.equal(r.structuredContent.stdout, 'alpha\nBETA\ngamma\n');
    r = await call('edit_file', { path: '/workspace/mcp/notes.txt', old_text: 'zeta', new_text: 'x' });
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /not found/);
    await call('write_file', { path: '/workspace/mcp/twice.txt', content: 'a a' });
    r = await call('edit_file', { path: '/workspace/mcp/twice.txt', old_text: 'a', new_text: 'b' });
    assert.match(r.content[0].text, /occurs 2 times/);
    await call('write_file', { path: '/workspace/mcp/sub/deep.c', content: 'int x;' });
    r = await call('list_directory', { path: '/workspace/mcp' });
    assert.equal(r.content[0].text, '[FILE] notes.txt\n[DIR] sub\n[FILE] twice.txt\n');
    r = await call('directory_tree', { path: '/workspace/mcp', depth: 2 });
    assert.ok(r.structuredContent.entries.some((e) => e.path === '/workspace/mcp/sub/deep.c'));
    r = await call('search_files', { path: '/workspace', pattern: '*.c' });
    assert.deepEqual(r.structuredContent.entries.map((e) => e.path), ['/workspace/mcp/sub/deep.c']);
    r = await call('move_file', { source: '/workspace/mcp/twice.txt', destination: '/workspace/mcp/sub/moved.txt' });
    assert.ok(!r.isError, r.content[0].text);
    r = await call('move_file', { source: '/workspace/mcp/notes.txt', destination: '/workspace/mcp/sub/moved.txt' });
    assert.equal(r.isError, true);
    r = await call('get_file_info', { path: '/workspace/mcp/sub/moved.txt' });
    assert.equal(r.structuredContent.type, 'file');
    assert.equal(r.structuredContent.size, 3);
    r = await call('read_file', { path: '/workspace/mcp/none' });
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /No such file/);
    r = await call('read_file', {});
    assert.equal(r.isError, true);
  });

  dtest('files persist between calls', async () => {
    await s.client.callTool({ name: 'exec_command', arguments: { command: 'echo kept > /tmp/mcp-file' } });
    const r = await s.client.callTool({ name: 'exec_command', arguments: { command: 'cat /tmp/mcp-file' } });
    assert.equal(r.structuredContent.stdout, 'kept\n');
  });

  dtest('spawn_process + process_output', async () => {
    const sp = await s.client.callTool({ name: 'spawn_process',
      arguments: { command: 'for i in 1 2 3; do echo $i; sleep 0.2; done; echo err >&2; exit 4' } });
    const pid = sp.structuredContent.pid;
    const r = await s.client.callTool({ name: 'process_output', arguments: { pid, wait_ms: 10000 } });
    assert.equal(r.structuredContent.running, false);
    assert.equal(r.structuredContent.exit_code, 4);
    assert.equal(r.structuredContent.stdout, '1\n2\n3\n');
    assert.equal(r.structuredContent.stderr, 'err\n');
  });

  dtest('kill_process ends a background sleep', async () => {
    const sp = await s.client.callTool({ name: 'spawn_process', arguments: { command: 'sleep 60' } });
    const pid = sp.structuredContent.pid;
    const k = await s.client.callTool({ name: 'kill_process', arguments: { pid, signal: 'TERM' } });
    assert.equal(k.structuredContent.already_exited, false);
    const r = await s.client.callTool({ name: 'process_output', arguments: { pid, wait_ms: 10000 } });
    assert.equal(r.structuredContent.running, false);
    assert.equal(r.structuredContent.killed, true);
  });

  dtest('progress notifications carry the output so far', async () => {
    const seen = [];
    const r = await s.client.callTool({ name: 'exec_command',
      arguments: { command: 'for i in 1 2 3 4; do echo step$i; sleep 0.4; done' } },
      undefined, { onprogress: (p) => seen.push(p) });
    assert.equal(r.structuredContent.stdout, 'step1\nstep2\nstep3\nstep4\n');
    assert.ok(seen.length >= 3, `got ${seen.length} progress notifications`);
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress);
    assert.ok(seen.some((p) => /step\d/.test(p.message)), JSON.stringify(seen));
  });

  dtest('notifications/cancelled kills the remote process', async () => {
    const cmd = 'sleep 31';
    await cancelAfterProgress(s.client, { command: cmd });
    const p = await waitExited(s.client, cmd);
    assert.equal(p?.status, 'exited');
    assert.equal(p.exit_code, 137);
    // and nothing named like it runs in the container any more
    const r = await s.client.callTool({ name: 'exec_command', arguments: { command: 'ps | grep "[s]leep 31"' } });
    assert.equal(r.structuredContent.exit_code, 1, r.structuredContent.stdout);
  });

  dtest('sandbox_info: a running docker sandbox', async () => {
    const r = await s.client.callTool({ name: 'sandbox_info', arguments: {} });
    assert.equal(r.structuredContent.sandbox.provider, 'docker');
    assert.equal(r.structuredContent.sandbox.status, 'running');
    sandboxId = r.structuredContent.sandbox.id;
  });

  dtest('closing the client destroys the container sandbox', async () => {
    assert.ok(sandboxId && sandboxes().has(sandboxId));
    await closeClean(s);
    s = null;
    assert.equal(sandboxes().has(sandboxId), false);
  });
});
