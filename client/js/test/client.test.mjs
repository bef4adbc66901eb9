// SbxdClient against a real sbxd: the duktape provider at $SBXD_SOCKET, and the
// docker provider at $SBXD_DOCKER_SOCKET for what needs a shell (stdin, bytes).
import assert from 'node:assert/strict';
import { group, test, until, sleep } from './harness.mjs';
import { SbxdClient, SbxdError, SbxdConnectionError, ErrorCode } from '../dist/index.js';

const SOCK = process.env.SBXD_SOCKET;
const DSOCK = process.env.SBXD_DOCKER_SOCKET;
const DOCKER_SKIP = DSOCK ? undefined : process.env.SBXD_DOCKER_SKIP || 'no Docker engine';
const DIMAGE = process.env.SBXD_DOCKER_IMAGE || 'sbx-test/busybox';

async function withSandbox(c, params, fn) {
    const sb = await c.createSandbox(params);
    try {
        return await fn(sb);
    } finally {
        await c.destroySandbox(sb.id).catch(() => {});
    }
}
const duk = (tools) => ({ provider: 'duktape', ...(tools ? { tools } : {}) });

group('client', () => {
    test('connects to $SBXD_SOCKET by default and answers daemon.ping', async () => {
        const c = new SbxdClient();
        assert.equal(c.socketPath, SOCK);
        const r = await c.ping();
        assert.equal(r.pong, true);
        assert.equal(typeof r.time, 'string');
        c.close();
    });

    test('a socket nobody listens on is an SbxdConnectionError', async () => {
        const c = new SbxdClient({ socketPath: '/nonexistent/sbxd.sock' });
        await assert.rejects(c.ping(), (e) => e instanceof SbxdConnectionError && /nonexistent/.test(e.message));
    });

    test('errors are SbxdError with the JSON-RPC code and data', async () => {
        const c = new SbxdClient();
        await assert.rejects(c.getSandbox('no-such-sandbox'), (e) => {
            assert.ok(e instanceof SbxdError);
            assert.equal(e.code, ErrorCode.SandboxNotFound);
            assert.equal(e.codeName, 'SandboxNotFound');
            assert.deepEqual(e.data, { sandbox: 'no-such-sandbox' });
            assert.equal(e.method, 'sandbox.get');
            return true;
        });
        await assert.rejects(c.call('sandbox.get', { id: 5 }), (e) => e.code === ErrorCode.InvalidParams && e.data.param === 'id');
        await assert.rejects(c.call('no.such', {}), (e) => e.code === ErrorCode.MethodNotFound && e.data.method === 'no.such');
        c.close();
    });

    test('typed sandbox methods: create, get, list, set_env, instructions, clone, snapshot, stop, start, destroy', async () => {
        const c = new SbxdClient();
        const sb = await c.createSandbox({ provider: 'duktape', env: { A: '1' } });
        assert.equal(sb.status, 'running');
        assert.equal((await c.getSandbox(sb.id)).id, sb.id);
        assert.ok((await c.listSandboxes({ provider: 'duktape' })).some((s) => s.id === sb.id));
        assert.deepEqual(await c.setEnv(sb.id, { B: '2' }), { A: '1', B: '2' });
        assert.equal(typeof (await c.instructions(sb.id)), 'string');
        const cl = await c.cloneSandbox({ id: sb.id, start: false });
        assert.equal(cl.status, 'pending');
        await c.destroySandbox(cl.id);
        await c.exec({ sandbox: sb.id, command: 'var kept = 41' });
        const snap = await c.snapshotSandbox(sb.id);
        assert.match(snap.snapshot, /^snap-/);
        assert.equal((await c.stopSandbox(sb.id)).status, 'stopped');
        assert.equal((await c.startSandbox(sb.id)).status, 'running');
        assert.deepEqual(await c.destroySandbox(sb.id), { id: sb.id, status: 'destroyed' });
        c.close();
    });

    test('exec returns the exit record with output and result', async () => {
        const c = new SbxdClient();
        await withSandbox(c, duk(), async (sb) => {
            const r = await c.exec({ sandbox: sb.id, command: 'console.log("out"); console.error("err"); 6*7' });
            assert.equal(r.exit_code, 0);
            assert.equal(r.stdout, 'out\n');
            assert.equal(r.stderr, 'err\n');
            assert.equal(r.result, 42);
        });
        c.close();
    });

    test('one connection multiplexes calls, notifications and tool.call requests', async () => {
        const watcher = new SbxdClient();
        const before = (await watcher.info()).counts.sessions;
        let toolCalls = 0;
        const c = new SbxdClient({ tools: { twice: (a) => (toolCalls++, a.n * 2) } });
        await withSandbox(c, duk(['twice']), async (sb) => {
            const sb2 = await c.createSandbox(duk(['twice']));
            const outs = [];
            c.on('process.output', (n) => outs.push(n));
            const execs = [];
            for (let i = 0; i < 10; i++)
                execs.push(c.exec({ sandbox: i % 2 ? sb.id : sb2.id, command: `console.log("n${i}"); external_twice({n: ${i}})` }));
            const spawned = await c.spawn({ sandbox: sb.id, command: 'for (var i = 0; i < 3; i++) console.log("s" + i)' });
            const rs = await Promise.all(execs);
            rs.forEach((r, i) => assert.equal(r.result, i * 2));
            await spawned.wait();
            assert.equal(spawned.stdout, 's0\ns1\ns2\n');
            assert.equal(toolCalls, 10);
            assert.ok(outs.some((n) => n.pid === spawned.pid), 'process.output notifications reached on()');
            const during = (await watcher.info()).counts.sessions;
            assert.equal(during, before + 1, 'all of it over one connection');
            await c.destroySandbox(sb2.id);
        });
        c.close();
        watcher.close();
    });

    test('process handle: pid, accumulated output, callbacks, iterator, web stream, wait, kill', async () => {
        const c = new SbxdClient();
        await withSandbox(c, duk(), async (sb) => {
            const outs = [], errs = [];
            const p = await c.spawn(
                { sandbox: sb.id, command: 'console.log("a"); console.error("e"); read_stdin(); console.log("b")' },
                { onStdout: (d) => outs.push(d), onStderr: (d) => errs.push(d) },
            );
            assert.equal(typeof p.pid, 'number');
            const reader = p.readable('stdout').getReader();
            const iter = (async () => {
                const seen = [];
                for await (const ch of p) seen.push(`${ch.stream}:${ch.data}`);
                return seen.join('');
            })();
            await until(() => p.stdout.includes('a') && p.stderr.includes('e'));
            assert.equal(p.exitCode, undefined);
            await p.sendStdin('go\n');
            await p.closeStdin();
            const r1 = await p.wait();
            assert.equal(r1.exit_code, 0);
            assert.equal(p.stdout, 'a\nb\n');
            assert.equal(p.stderr, 'e\n');
            assert.equal(outs.join(''), 'a\nb\n');
            assert.equal(errs.join(''), 'e\n');
            const seen = await iter;
            assert.ok(seen.includes('stdout:a\n') && seen.includes('stdout:b\n') && seen.includes('stderr:e\n'), seen);
            let bytes = '';
            for (;;) {
                const { value, done } = await reader.read();
                if (done) break;
                bytes += Buffer.from(value).toString();
            }
            assert.ok(bytes.endsWith('b\n'), `web stream got ${JSON.stringify(bytes)}`);
            assert.equal(p.wait(), p.wait(), 'wait() returns the same promise');
            assert.deepEqual(await p.wait(), r1);
            assert.equal(await p.kill(), false, 'kill after exit says it was not running');
        });
        c.close();
    });

    test('kill returns true for a running process, and its exit says killed', async () => {
        const c = new SbxdClient();
        await withSandbox(c, duk(), async (sb) => {
            const p = await c.spawn({ sandbox: sb.id, command: 'while (true) {}' });
            assert.equal(await p.kill(), true);
            const r = await p.wait();
            assert.equal(r.killed, true);
            assert.equal(r.exit_code, 137);
            assert.equal(await p.kill(), false);
        });
        c.close();
    });

    test('AbortSignal: already aborted runs nothing; abort kills', async () => {
        const c = new SbxdClient();
        await withSandbox(c, duk(), async (sb) => {
            const ac = new AbortController();
            ac.abort();
            await assert.rejects(c.spawn({ sandbox: sb.id, command: 'console.log(1)' }, { signal: ac.signal }), { name: 'AbortError' });
            await assert.rejects(c.exec({ sandbox: sb.id, command: 'console.log(1)' }, { signal: ac.signal }), { name: 'AbortError' });
            assert.deepEqual(await c.listProcesses(sb.id), [], 'nothing ran');
            const ac2 = new AbortController();
            const p = await c.spawn({ sandbox: sb.id, command: 'console.log("up"); while (true) {}' }, { signal: ac2.signal, onStdout: () => ac2.abort() });
            const r = await p.wait();
            assert.equal(r.killed, true);
            assert.equal(p.stdout, 'up\n');
            const ac3 = new AbortController();
            const ex = c.exec({ sandbox: sb.id, command: 'while (true) {}' }, { signal: ac3.signal });
            setTimeout(() => ac3.abort(), 100);
            assert.equal((await ex).killed, true);
        });
        c.close();
    });

    test('tool handlers: results return, thrown errors keep name and message, unserialisable results fail', async () => {
        const c = new SbxdClient({
            tools: {
                add: (a) => a.x + a.y,
                slow: async (a) => (await sleep(20), { echo: a }),
                bad: () => {
                    throw new TypeError('wrong kind of thing');
                },
                big: () => 10n,
            },
        });
        await withSandbox(c, duk(['add', 'slow', 'bad', 'big', 'none']), async (sb) => {
            assert.equal((await c.exec({ sandbox: sb.id, command: 'external_add({x: 2, y: 3})' })).result, 5);
            assert.deepEqual((await c.exec({ sandbox: sb.id, command: 'external_slow([1])' })).result, { echo: [1] });
            const r = await c.exec({ sandbox: sb.id, command: 'try { external_bad({}); "no" } catch (e) { [e.name, e.message, e.code] }' });
            assert.deepEqual(r.result, ['TypeError', 'wrong kind of thing', ErrorCode.ToolCallFailed]);
            const b = await c.exec({ sandbox: sb.id, command: 'try { external_big({}); "no" } catch (e) { e.message }' });
            assert.match(b.result, /serial|BigInt/i);
            const n = await c.exec({ sandbox: sb.id, command: 'try { external_none({}); "no" } catch (e) { e.message }' });
            assert.match(n.result, /no handler/);
        });
        c.close();
    });

    test('reconnects and re-attaches at the right offsets: no output lost or repeated', async () => {
        const c = new SbxdClient();
        await withSandbox(c, duk(), async (sb) => {
            const N = 400;
            const p = await c.spawn({
                sandbox: sb.id,
                command: `for (var i = 0; i < ${N}; i++) { console.log("line " + i); var t = Date.now(); while (Date.now() - t < 4) {} }`,
            });
            const gen = c.generation;
            await until(() => p.stdout.length > 100);
            c['sock'].destroy(); // the connection drops under the stream
            const r = await p.wait();
            assert.equal(r.exit_code, 0);
            assert.ok(c.generation > gen, 'a new connection was made');
            const want = Array.from({ length: N }, (_, i) => `line ${i}\n`).join('');
            assert.equal(p.stdout, want);
            assert.equal(p.stdoutLostBytes, 0);
            assert.equal(p.offsets.stdout, Buffer.byteLength(want));
        });
        c.close();
    });

    test('reconnects on demand for the next call after the connection dropped', async () => {
        const c = new SbxdClient();
        await c.ping();
        const gen = c.generation;
        const pending = c.exec({ sandbox: 'x', command: '1' }).catch((e) => e);
        c['sock'].destroy();
        const e = await pending;
        assert.ok(e instanceof SbxdConnectionError || e instanceof SbxdError);
        assert.equal((await c.ping()).pong, true);
        assert.equal(c.generation, gen + 1);
        c.close();
    });

    test('attach follows an existing process from a given offset', async () => {
        const c = new SbxdClient();
        await withSandbox(c, duk(), async (sb) => {
            const r = await c.exec({ sandbox: sb.id, command: 'console.log("0123456789")' });
            const p = await c.attach(sb.id, r.pid, { stdout_offset: 4 });
            await p.wait();
            assert.equal(p.stdout, '456789\n');
        });
        c.close();
    });
});

group('client on docker', () => {
    test('stdin: sendStdin and closeStdin reach a shell command', async () => {
        const c = new SbxdClient({ socketPath: DSOCK });
        await withSandbox(c, { provider: 'docker', image: DIMAGE }, async (sb) => {
            const p = await c.spawn({ sandbox: sb.id, command: 'cat; echo done' });
            await p.sendStdin('hello ');
            await p.sendStdin(new TextEncoder().encode('bytes\n'));
            await p.closeStdin();
            const r = await p.wait();
            assert.equal(r.exit_code, 0);
            assert.equal(p.stdout, 'hello bytes\ndone\n');
            await assert.rejects(p.sendStdin('late'), /exited/);
        });
        c.close();
    });

    test('binary output arrives byte-exact on the web stream', async () => {
        const c = new SbxdClient({ socketPath: DSOCK });
        await withSandbox(c, { provider: 'docker', image: DIMAGE }, async (sb) => {
            const p = await c.spawn({ sandbox: sb.id, command: "sleep 0.2; printf 'a\\377\\376b'" });
            const rd = p.readable('stdout').getReader();
            const got = [];
            for (;;) {
                const { value, done } = await rd.read();
                if (done) break;
                got.push(...value);
            }
            assert.deepEqual(got, [0x61, 0xff, 0xfe, 0x62]);
            assert.equal((await p.wait()).exit_code, 0);
        });
        c.close();
    });

    test('reconnect re-attach with a shell process: every line exactly once', async () => {
        const c = new SbxdClient({ socketPath: DSOCK });
        await withSandbox(c, { provider: 'docker', image: DIMAGE }, async (sb) => {
            const p = await c.spawn({ sandbox: sb.id, command: 'i=0; while [ $i -lt 300 ]; do echo "n $i"; i=$((i+1)); [ $((i % 50)) = 0 ] && sleep 0.1; done' });
            await until(() => p.stdout.length > 0);
            c['sock'].destroy();
            await p.wait();
            const want = Array.from({ length: 300 }, (_, i) => `n ${i}\n`).join('');
            assert.equal(p.stdout, want);
        });
        c.close();
    });
}, { skip: DOCKER_SKIP });

group('client output encoding', () => {
    for (const enc of ['auto', 'utf8']) {
        test(`output_encoding ${enc}: control-heavy and binary output arrive byte-exact`, async () => {
            const c = new SbxdClient({ socketPath: DSOCK, outputEncoding: enc });
            const kinds = { data: 0, data_b64: 0 };
            c.on('process.output', (n) => (n.data !== undefined ? kinds.data++ : kinds.data_b64++));
            await withSandbox(c, { provider: 'docker', image: DIMAGE }, async (sb) => {
                const p = await c.spawn({ sandbox: sb.id, command: "head -c 5000 /dev/zero; printf 'ok\\377'" });
                const rd = p.readable('stdout').getReader();
                let n = 0, tail = [];
                for (;;) {
                    const { value, done } = await rd.read();
                    if (done) break;
                    n += value.length;
                    tail = [...tail, ...value].slice(-3);
                }
                await p.wait();
                assert.equal(n, 5003);
                assert.deepEqual(tail, [0x6f, 0x6b, 0xff]);
                assert.equal(p.offsets.stdout, 5003);
                assert.ok(p.stdout.startsWith('\0'.repeat(5000) + 'ok'));
                if (enc === 'auto') assert.ok(kinds.data_b64 > 0, 'NULs went as base64');
                else assert.ok(kinds.data > 0, 'NULs went as escaped JSON text');
            });
            c.close();
        });
    }
}, { skip: DOCKER_SKIP });

group('client snapshots', () => {
    test('snapshot.list and snapshot.delete', async () => {
        const c = new SbxdClient();
        await withSandbox(c, duk(), async (sb) => {
            await c.exec({ sandbox: sb.id, command: 'var v = 7' });
            const { snapshot } = await c.snapshotSandbox(sb.id);
            const l = await c.listSnapshots({ provider: 'duktape' });
            assert.ok(l.snapshots.some((s) => s.snapshot === snapshot && s.sandbox === sb.id));
            assert.deepEqual(await c.deleteSnapshot(snapshot), { snapshot, deleted: true });
            await assert.rejects(c.deleteSnapshot(snapshot), (e) => e.code === ErrorCode.SandboxNotFound);
        });
        c.close();
    });
});
