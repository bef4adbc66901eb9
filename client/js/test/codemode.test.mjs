// SbxdCodeModeTransport (sbxd/mastra) against the real @mastra/core and sbxd's
// js provider (code mode, proto/PROTOCOL.md "Code mode").
import assert from 'node:assert/strict';
import { group, test, sleep } from './harness.mjs';
import { SbxdClient } from '../dist/index.js';
import { SbxdCodeModeTransport } from '../dist/mastra.js';
import { createCodeMode, createTool } from '@mastra/core/tools';
import { z } from 'zod';

const SOCK = process.env.SBXD_SOCKET;
let skip;
try {
    const c = new SbxdClient({ socketPath: SOCK });
    const js = (await c.info()).providers.find((p) => p.name === 'js');
    c.close();
    if (!js) skip = 'this sbxd has no js provider';
    else if (!js.available) skip = `the js provider is unavailable: ${js.reason}`;
} catch (e) {
    skip = `sbxd does not answer: ${e.message}`;
}

const transport = new SbxdCodeModeTransport({ socketPath: SOCK });
const noTools = async () => assert.fail('dispatch must not be called');
const run = (program, extra = {}) =>
    transport.run({ program, toolIds: [], dispatch: noTools, timeout: 10000, ...extra });

async function codemodeSandboxes() {
    const c = new SbxdClient({ socketPath: SOCK });
    const l = (await c.listSandboxes({ provider: 'js' })).filter((s) => s.id.startsWith('codemode-'));
    c.close();
    return l.length;
}

group('code mode', () => {
    test('requiresSandbox is false; a program returns its value with success', async () => {
        assert.equal(transport.requiresSandbox, false);
        assert.deepEqual(await run('return 1 + 2'), { success: true, result: 3, logs: [] });
    });
    test('TypeScript and console: logs in order, objects as JSON', async () => {
        const r = await run(`
            interface P { n: number }
            const p: P = { n: 5 };
            console.log('hello', { a: 1 });
            console.error('to stderr');
            return (p.n as number) * 2;`);
        assert.equal(r.success, true);
        assert.equal(r.result, 10);
        assert.deepEqual(r.logs, ['hello {"a":1}', 'to stderr']);
    });
    test('tool calls go to dispatch, concurrently, with hyphenated ids sanitised', async () => {
        const calls = [];
        let inflight = 0, maxInflight = 0;
        const r = await run(
            `const [a, b, c] = await Promise.all([external_get_data({k: 1}), external_get_data({k: 2}), external_sum({xs: [1, 2, 3]})]);
             return {a, b, c};`,
            {
                toolIds: ['get-data', 'sum'],
                dispatch: async (tool, args) => {
                    calls.push([tool, args]);
                    inflight++;
                    maxInflight = Math.max(maxInflight, inflight);
                    await sleep(50);
                    inflight--;
                    return tool === 'sum' ? args.xs.reduce((x, y) => x + y, 0) : { got: args.k };
                },
            },
        );
        assert.equal(r.success, true, JSON.stringify(r));
        assert.deepEqual(r.result, { a: { got: 1 }, b: { got: 2 }, c: 6 });
        assert.deepEqual(calls.map((c) => c[0]).sort(), ['get-data', 'get-data', 'sum']);
        assert.ok(maxInflight >= 2, 'the calls overlapped');
    });
    test('observer hooks are called, and a throwing hook does not break the run', async () => {
        const seen = [];
        const r = await run('return await external_t({x: 1})', {
            toolIds: ['t'],
            dispatch: async () => 'ok',
            onExternalCall: (tool, args) => {
                seen.push(['call', tool, args]);
                throw new Error('observer bug');
            },
            onExternalResult: (tool, ms, err) => {
                seen.push(['result', tool, typeof ms, err]);
                throw new Error('observer bug');
            },
        });
        assert.deepEqual(r, { success: true, result: 'ok', logs: [] });
        assert.deepEqual(seen, [['call', 't', { x: 1 }], ['result', 't', 'number', undefined]]);
    });
    test('a dispatch error reaches the program with its name and message; uncaught, it is the result error', async () => {
        const results = [];
        const dispatch = async () => {
            throw new RangeError('no such row');
        };
        const caught = await run('try { await external_t({}) } catch (e) { return [e.name, e.message] }', {
            toolIds: ['t'],
            dispatch,
            onExternalResult: (t, ms, e) => results.push(e?.message),
        });
        assert.deepEqual(caught.result, ['RangeError', 'no such row']);
        assert.deepEqual(results, ['no such row']);
        const r = await run('console.log("before"); await external_t({}); return 1', { toolIds: ['t'], dispatch });
        assert.equal(r.success, false);
        assert.deepEqual(r.error, { name: 'RangeError', message: 'no such row' });
        assert.deepEqual(r.logs, ['before']);
    });
    test('a dispatch result that is not JSON-serializable is one error outcome', async () => {
        const errs = [];
        const cyc = {};
        cyc.self = cyc;
        for (const bad of [10n, cyc]) {
            const r = await run('return await external_t({})', {
                toolIds: ['t'],
                dispatch: async () => bad,
                onExternalResult: (t, ms, e) => errs.push(e),
            });
            assert.equal(r.success, false);
            assert.equal(r.error.name, 'TypeError');
            assert.equal(typeof r.error.message, 'string');
        }
        assert.equal(errs.length, 2);
        assert.ok(errs.every((e) => e instanceof TypeError));
    });
    test('a program error is the result error; logs before it are kept', async () => {
        const r = await run('console.log("a"); throw new RangeError("too big")');
        assert.deepEqual(r, { success: false, logs: ['a'], error: { name: 'RangeError', message: 'too big' } });
        const s = await run('return (');
        assert.equal(s.success, false);
        assert.equal(s.error.name, 'SyntaxError');
    });
    test('an already aborted signal runs nothing', async () => {
        const before = await codemodeSandboxes();
        const ac = new AbortController();
        ac.abort();
        let called = false;
        const r = await run('await external_t({}); return 1', {
            toolIds: ['t'],
            dispatch: async () => ((called = true), 1),
            abortSignal: ac.signal,
        });
        assert.equal(r.success, false);
        assert.equal(r.error.name, 'AbortError');
        assert.equal(called, false);
        assert.equal(await codemodeSandboxes(), before, 'no sandbox was created');
    });
    test('abort while the program waits ends it at once', async () => {
        const ac = new AbortController();
        const t0 = Date.now();
        const r = await run('await external_t({}); return 1', {
            toolIds: ['t'],
            dispatch: async () => {
                setTimeout(() => ac.abort(), 50);
                return new Promise(() => {});
            },
            abortSignal: ac.signal,
            timeout: 20000,
        });
        assert.equal(r.success, false);
        assert.equal(r.error.name, 'AbortError');
        assert.ok(Date.now() - t0 < 5000);
        assert.equal(await codemodeSandboxes(), 0, 'the run cleaned up its sandbox');
    });
    test('timeouts give TimeoutError: a busy loop and a promise that never settles', async () => {
        for (const prog of ['while (true) {}', 'await new Promise(() => {})']) {
            const t0 = Date.now();
            const r = await run(prog, { timeout: 500 });
            assert.equal(r.success, false);
            assert.equal(r.error.name, 'TimeoutError');
            assert.match(r.error.message, /500/);
            assert.ok(Date.now() - t0 < 5000);
        }
    });
    test('createCodeMode({tools}, new SbxdCodeModeTransport()) works end to end', async () => {
        const getPrice = createTool({
            id: 'get-price',
            description: 'price of an item',
            inputSchema: z.object({ item: z.string() }),
            outputSchema: z.object({ price: z.number() }),
            execute: async ({ item }) => ({ price: { apple: 3, pear: 4 }[item] ?? 0 }),
        });
        const { tool, instructions } = createCodeMode({ tools: { getPrice } }, new SbxdCodeModeTransport({ socketPath: SOCK }));
        assert.match(instructions, /external_get_price/);
        const ctx = {
            observe: { span: (name, fn) => fn(), log: () => {} },
        };
        const r = await tool.execute(
            {
                code: `const items: string[] = ['apple', 'pear'];
                       const ps = await Promise.all(items.map((item) => external_get_price({ item })));
                       console.log('prices', ps);
                       return ps.reduce((s, p) => s + p.price, 0);`,
            },
            ctx,
        );
        assert.equal(r.success, true, JSON.stringify(r));
        assert.equal(r.result, 7);
        assert.deepEqual(r.logs, ['prices [{"price":3},{"price":4}]']);
        const bad = await tool.execute({ code: 'return await external_get_price({ item: 5 })' }, ctx);
        assert.equal(bad.success, false, 'the tool validates its input');
    });
}, { skip });
