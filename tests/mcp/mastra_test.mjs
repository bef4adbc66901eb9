// mastra_test.mjs - `sbxctl mcp` through Mastra's MCPClient (@mastra/mcp,
// pinned in package-lock.json), as a Mastra agent would use it (issue 19):
// a command that exits non-zero is a result, not a thrown tool error, and
// the structured result passes Mastra's check against the outputSchema.
// Environment: as mcp_test.mjs.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { MCPClient } from '@mastra/mcp';

const SOCK = process.env.SBXD_SOCKET;
const NODOCKER = process.env.SBXD_IDLE_SOCKET;
const SBXCTL = process.env.SBXCTL;
const DOCKER = process.env.MCP_DOCKER === '1';
const DOCKER_SKIP = DOCKER ? false : `no Docker engine: ${process.env.MCP_DOCKER || 'not set up'}`;

function client(args, sock) {
  return new MCPClient({
    id: `sbxd-${Math.random().toString(16).slice(2)}`,
    servers: { sbxd: { command: SBXCTL, args: ['-s', sock, 'mcp', ...args], env: { PATH: process.env.PATH } } },
    timeout: 120000,
  });
}

describe('Mastra MCPClient, duktape commands', () => {
  let mcp, tools;
  before(async () => {
    mcp = client(['--provider', 'duktape', '--code-provider', 'duktape'], NODOCKER);
    tools = await mcp.listTools();
  });
  after(async () => { await mcp.disconnect(); });

  test('lists the tools, each naming its provider', () => {
    for (const n of ['sbxd_exec_command', 'sbxd_kill_process', 'sbxd_process_output', 'sbxd_run_code',
      'sbxd_sandbox_info', 'sbxd_spawn_process'])
      assert.ok(n in tools, n);
    for (const [n, t] of Object.entries(tools))
      assert.match(t.description, /Runs (on sbxd's (duktape|js) provider|in sbxd sandbox)/, n);
  });

  test('a program that throws: a result Mastra does not throw for, valid against the schema', async () => {
    const r = await tools.sbxd_exec_command.execute({ command: 'throw new Error("no")' }, {});
    assert.equal(r.exit_code, 1);
    assert.equal(r.exception.name, 'Error');
  });

  test('run_code: the result', async () => {
    const r = await tools.sbxd_run_code.execute({ code: '[1, 2].map(function (x) { return x * 2; })' }, {});
    assert.deepEqual(r.result, [2, 4]);
    assert.equal(r.error, null);
  });

  test('bad arguments: the tool error reaches Mastra', async () => {
    const r = await tools.sbxd_exec_command.execute({ command: '' }, {}).catch((e) => e);
    assert.ok(r instanceof Error || r?.error || r?.isError, 'an error comes back');
  });
});

describe('Mastra MCPClient, docker commands', () => {
  let mcp, tools;
  before(async () => {
    if (!DOCKER) return;
    mcp = client([], SOCK);
    tools = await mcp.listTools();
  });
  after(async () => { if (mcp) await mcp.disconnect(); });

  test('a bare sbxctl mcp runs shell; grep that finds nothing is exit code 1, no throw',
    { skip: DOCKER_SKIP }, async () => {
      let r = await tools.sbxd_exec_command.execute({ command: 'echo hi; exit 3' }, {});
      assert.equal(r.exit_code, 3);
      assert.equal(r.stdout, 'hi\n');
      r = await tools.sbxd_exec_command.execute({ command: 'echo abc | grep zzz' }, {});
      assert.equal(r.exit_code, 1);
    });
});
