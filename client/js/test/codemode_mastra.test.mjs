// The behaviours Mastra's own code-mode transport tests check
// (packages/isolated-vm/src/transport.test.ts and @mastra/quickjs's
// transport.test.ts, less what is QuickJS's own: Node flags, WASM handles),
// each held by SbxdCodeModeTransport against a real sbxd: their error words
// (/JSON-serializable/, /not JSON-serializable/, /timed out after 300ms/,
// /out of memory/), onExternalResult's three arguments, and an abort fired by
// the first tool call. Written for sbxd; no code of theirs.
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

const shared = new SbxdCodeModeTransport({ socketPath: SOCK });
const run = (program, o = {}) =>
    (o.transport ?? shared).run({
        program,
        toolIds: o.toolIds ?? [],
        dispatch: o.dispatch ?? (async () => undefined),
        timeout: o.timeout ?? 5000,
        abortSignal: o.abortSignal,
        onExternalCall: o.onExternalCall,
        onExternalResult: o.onExternalResult,
    });
// A dispatch that records its calls.
const recorder = (answer) => {
    const calls = [];
    const fn = async (...a) => {
        calls.push(a);
        return answer(...a);
    };
    fn.calls = calls;
    return fn;
};

group("Mastra's transport contract", () => {
    test('a tool call reaches dispatch with its id and args, and its answer the program', async () => {
        const d = recorder((tool, args) => ({ echoed: { tool, args } }));
        const r = await run("const r = await external_lookup({ id: 'x' }); return r.echoed;", { toolIds: ['lookup'], dispatch: d });
        assert.deepEqual(r, { success: true, result: { tool: 'lookup', args: { id: 'x' } }, logs: [] });
        assert.deepEqual(d.calls, [['lookup', { id: 'x' }]]);
    });
    test('Promise.all of calls finishing in reverse order resolves each to its own answer', async () => {
        const r = await run('return await Promise.all([1, 2, 3].map((n) => external_calc({ n })));', {
            toolIds: ['calc'],
            dispatch: async (_t, { n }) => {
                await sleep((3 - n) * 20);
                return n * 10;
            },
        });
        assert.deepEqual(r.result, [10, 20, 30]);
    });
    test('eight calls are all in flight at once', async () => {
        let now = 0, peak = 0;
        const r = await run('const cs = []; for (let n = 0; n < 8; n++) cs.push(external_calc({ n })); return (await Promise.all(cs)).reduce((a, b) => a + b, 0);', {
            toolIds: ['calc'],
            dispatch: async (_t, { n }) => {
                peak = Math.max(peak, ++now);
                await sleep(10);
                now--;
                return n;
            },
        });
        assert.equal(r.result, 28);
        assert.equal(peak, 8);
    });
    test("a hyphenated id is external_my_tool inside, 'my-tool' to dispatch", async () => {
        const d = recorder(() => 'ok');
        const r = await run('return await external_my_tool({});', { toolIds: ['my-tool'], dispatch: d });
        assert.equal(r.success, true);
        assert.deepEqual(d.calls, [['my-tool', {}]]);
    });
    test("a dispatch error keeps a custom name ('CustomError') inside the program", async () => {
        const r = await run('try { await external_fail({}) } catch (e) { return { message: e.message, name: e.name } }', {
            toolIds: ['fail'],
            dispatch: async () => {
                const e = new Error('boom');
                e.name = 'CustomError';
                throw e;
            },
        });
        assert.deepEqual(r.result, { message: 'boom', name: 'CustomError' });
    });
    test('a BigInt argument is refused in the program with "JSON-serializable"; dispatch never runs', async () => {
        const d = recorder(() => 'ok');
        const r = await run('try { await external_calc({ n: 1n }) } catch (e) { return e.message }', { toolIds: ['calc'], dispatch: d });
        assert.equal(r.success, true);
        assert.match(r.result, /JSON-serializable/);
        assert.equal(d.calls.length, 0);
    });
    test('a thrown TypeError is the error, name and message only', async () => {
        const r = await run("throw new TypeError('bad input');");
        assert.equal(r.success, false);
        assert.deepEqual(r.error, { message: 'bad input', name: 'TypeError' });
    });
    test('an unparsable program is a SyntaxError', async () => {
        const r = await run('const = ;');
        assert.equal(r.error?.name, 'SyntaxError');
    });
    test('a cyclic result is a TypeError saying "not JSON-serializable"', async () => {
        const r = await run('const a = {}; a.self = a; return a;');
        assert.equal(r.success, false);
        assert.equal(r.error.name, 'TypeError');
        assert.match(r.error.message, /not JSON-serializable/);
    });
    test('a promise that never settles: TimeoutError "timed out after 300ms"', async () => {
        const r = await run('await new Promise(() => {}); return 1;', { timeout: 300 });
        assert.equal(r.error?.name, 'TimeoutError');
        assert.match(r.error.message, /timed out after 300ms/);
    });
    test('a tool call that never answers: TimeoutError', async () => {
        const r = await run('return await external_hang({});', {
            toolIds: ['hang'],
            dispatch: () => new Promise(() => {}),
            timeout: 300,
        });
        assert.equal(r.error?.name, 'TimeoutError');
    });
    test('a synchronous endless loop: TimeoutError', async () => {
        const r = await run('while (true) {}', { timeout: 300 });
        assert.equal(r.error?.name, 'TimeoutError');
    });
    test('memoryLimitMb 16: a runaway fails, saying "out of memory"', async () => {
        const t = new SbxdCodeModeTransport({ socketPath: SOCK, memoryLimitMb: 16 });
        const r = await run("const chunks = []; while (true) chunks.push(new Array(1024 * 1024).fill('x'));", {
            transport: t,
            timeout: 30000,
        });
        assert.equal(r.success, false);
        assert.notEqual(r.error.name, 'TimeoutError', 'the limit stopped it, not the timeout');
        assert.match(r.error.message, /out of memory/i);
        t.client.close();
    });
    test('memoryLimitMb 16 is the program\'s own memory: a few MB of objects run', async () => {
        const t = new SbxdCodeModeTransport({ socketPath: SOCK, memoryLimitMb: 16 });
        const r = await run('const a = []; for (let i = 0; i < 1e5; i++) a.push({ i }); return a.length', { transport: t });
        assert.deepEqual(r, { success: true, result: 100000, logs: [] });
        t.client.close();
    });
    test('logs written before a failure are kept', async () => {
        const r = await run("console.log('step 1 done'); throw new Error('later failure');");
        assert.equal(r.success, false);
        assert.deepEqual(r.logs, ['step 1 done']);
    });
    test('an already aborted signal: AbortError, dispatch never runs', async () => {
        const ac = new AbortController();
        ac.abort();
        const d = recorder(() => 'ok');
        const r = await run('return await external_ping({});', { toolIds: ['ping'], dispatch: d, abortSignal: ac.signal });
        assert.equal(r.error?.name, 'AbortError');
        assert.equal(d.calls.length, 0);
    });
    test('an abort fired synchronously by the first tool call: AbortError, never TimeoutError (10 runs)', async () => {
        for (let i = 0; i < 10; i++) {
            const ac = new AbortController();
            const t0 = Date.now();
            const r = await run('return await external_hang({});', {
                toolIds: ['hang'],
                dispatch: async () => {
                    ac.abort();
                    return new Promise(() => {});
                },
                abortSignal: ac.signal,
                timeout: 8000,
            });
            assert.equal(r.error?.name, 'AbortError', `run ${i}: ${JSON.stringify(r)}`);
            assert.ok(Date.now() - t0 < 5000, `run ${i} took ${Date.now() - t0} ms`);
        }
    });
    test('an abort during a dispatch stops the synchronous loop the program enters next, at once', async () => {
        const ac = new AbortController();
        const t0 = Date.now();
        const r = await run('await external_go({}); while (true) {}', {
            toolIds: ['go'],
            dispatch: async () => {
                ac.abort();
                return 'go';
            },
            abortSignal: ac.signal,
            timeout: 30000,
        });
        assert.equal(r.error?.name, 'AbortError');
        assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`);
    });
    test('no host bridges or module loader: __hostCall, __hostLog, importScripts, module, globalThis.process', async () => {
        const r = await run(
            'return { a: typeof globalThis.__hostCall, b: typeof globalThis.__hostLog, c: typeof importScripts, d: typeof module, e: typeof globalThis.process };',
        );
        assert.deepEqual(r.result, { a: 'undefined', b: 'undefined', c: 'undefined', d: 'undefined', e: 'undefined' });
    });
    test('a tool not exposed is a ReferenceError in the program; dispatch never runs', async () => {
        const d = recorder(() => 'ok');
        const r = await run('try { return await external_secret({}) } catch (e) { return { name: e.name } }', { toolIds: ['allowed'], dispatch: d });
        assert.deepEqual(r.result, { name: 'ReferenceError' });
        assert.equal(d.calls.length, 0);
    });
    test('no host capabilities: process, require, fetch, setTimeout are undefined', async () => {
        const r = await run(
            'return { process: typeof process, require: typeof require, fetch: typeof fetch, setTimeout: typeof setTimeout };',
        );
        assert.deepEqual(r.result, { process: 'undefined', require: 'undefined', fetch: 'undefined', setTimeout: 'undefined' });
    });
    test('onExternalResult on success gets exactly (tool, ms, undefined); a throwing onExternalCall is survived', async () => {
        const calls = [], results = [];
        const r = await run('return await external_ping({ q: 1 });', {
            toolIds: ['ping'],
            dispatch: async () => 'pong',
            onExternalCall: (...a) => {
                calls.push(a);
                throw new Error('observer boom');
            },
            onExternalResult: (...a) => results.push(a),
        });
        assert.deepEqual(r, { success: true, result: 'pong', logs: [] });
        assert.deepEqual(calls, [['ping', { q: 1 }]]);
        assert.equal(results.length, 1);
        assert.equal(results[0].length, 3, 'three arguments, as vitest compares them');
        assert.equal(results[0][0], 'ping');
        assert.equal(typeof results[0][1], 'number');
        assert.equal(results[0][2], undefined);
    });
    test('onExternalResult after a dispatch error gets (tool, ms, that Error)', async () => {
        const results = [];
        await run('try { await external_fail({}) } catch {} return null;', {
            toolIds: ['fail'],
            dispatch: async () => {
                throw new Error('boom');
            },
            onExternalResult: (...a) => results.push(a),
        });
        assert.equal(results.length, 1);
        assert.equal(results[0][0], 'fail');
        assert.equal(typeof results[0][1], 'number');
        assert.ok(results[0][2] instanceof Error);
        assert.equal(results[0][2].message, 'boom');
    });
    test('a cyclic dispatch result is one error outcome: onExternalResult once, with an Error', async () => {
        const results = [];
        const cyc = {};
        cyc.self = cyc;
        const r = await run('return await external_ping({});', {
            toolIds: ['ping'],
            dispatch: async () => cyc,
            onExternalResult: (...a) => results.push(a),
        });
        assert.equal(r.success, false);
        assert.equal(results.length, 1);
        assert.ok(results[0][2] instanceof Error);
    });
    test('createCodeMode with this transport and no sandbox runs a tool end to end', async () => {
        const top = createTool({
            id: 'getTopProducts',
            description: 'top selling products',
            inputSchema: z.object({ limit: z.number() }),
            outputSchema: z.object({ products: z.array(z.object({ id: z.string(), totalSales: z.number() })) }),
            execute: async ({ limit }) => ({
                products: Array.from({ length: limit }, (_, i) => ({ id: `p${i}`, totalSales: (i + 1) * 100 })),
            }),
        });
        const { tool } = createCodeMode({ tools: { getTopProducts: top } }, new SbxdCodeModeTransport({ socketPath: SOCK }));
        const r = await tool.execute(
            {
                code: `const t = await external_getTopProducts({ limit: 3 });
                       return t.products.reduce((s, p) => s + p.totalSales, 0);`,
            },
            { observe: { span: async (_n, fn) => fn(), log: () => {} } },
        );
        assert.equal(r.success, true, JSON.stringify(r));
        assert.equal(r.result, 600);
    });
}, { skip });
