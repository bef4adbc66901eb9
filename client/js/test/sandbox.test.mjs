// The sandbox object API (Sandbox.create / connect, sb.commands) against a
// real sbxd: duktape at $SBXD_SOCKET, docker at $SBXD_DOCKER_SOCKET for shell.
import assert from 'node:assert/strict';
import { group, test, sleep } from './harness.mjs';

// Node 20 has Symbol.asyncDispose but not the `await using` syntax: a test
// registers what it would `await using`, and disposed() disposes it after.
const stack = [];
const own = (x) => (stack.push(x), x);
const disposed = (fn) => async () => {
    try {
        await fn();
    } finally {
        while (stack.length) await stack.pop()[Symbol.asyncDispose]().catch(() => {});
    }
};
import { Sandbox, AbortError, SbxdError, SbxdClient } from '../dist/index.js';

const SOCK = process.env.SBXD_SOCKET;
const DSOCK = process.env.SBXD_DOCKER_SOCKET;
const DOCKER_SKIP = DSOCK ? undefined : process.env.SBXD_DOCKER_SKIP || 'no Docker engine';
const DIMAGE = process.env.SBXD_DOCKER_IMAGE || 'sbx-test/busybox';

group('sandbox', () => {
    test('Sandbox.create + commands.run: camelCase result, the sandbox destroyed by kill()', async () => {
        const sb = await Sandbox.create({ provider: 'duktape' });
        assert.equal(sb.provider, 'duktape');
        const r = await sb.commands.run('console.log("hi"); 6 * 7');
        assert.equal(r.stdout, 'hi\n');
        assert.equal(r.stderr, '');
        assert.equal(r.exitCode, 0);
        assert.equal(r.result, 42);
        assert.equal(r.timedOut, false);
        assert.ok(!('exit_code' in r), 'no wire snake_case in this layer');
        await sb.kill();
        const c = new SbxdClient({ socketPath: SOCK });
        await assert.rejects(c.getSandbox(sb.id), (e) => e instanceof SbxdError && e.code === -32000);
        c.close();
        await sb.kill(); // idempotent
    });

    test('a program that throws resolves with its exit code and exception', disposed(async () => {
        const sb = own(await Sandbox.create({ provider: 'duktape' }));
        const r = await sb.commands.run('throw new RangeError("no")');
        assert.equal(r.exitCode, 1);
        assert.equal(r.exception.name, 'RangeError');
    }));

    test('onStdout/onStderr stream; timeoutMs kills (exit 124)', disposed(async () => {
        const sb = own(await Sandbox.create({ provider: 'duktape' }));
        const out = [];
        const r = await sb.commands.run('console.log("a"); console.error("b")', {
            onStdout: (d) => out.push(['o', d]),
            onStderr: (d) => out.push(['e', d]),
        });
        assert.deepEqual(out, [['o', 'a\n'], ['e', 'b\n']]);
        assert.equal(r.exitCode, 0);
        const t = await sb.commands.run('while (true) {}', { timeoutMs: 200 });
        assert.equal(t.exitCode, 124);
        assert.equal(t.timedOut, true);
    }));

    test('an aborted run rejects with AbortError, and the kill happened first', disposed(async () => {
        const sb = own(await Sandbox.create({ provider: 'duktape' }));
        const ac = new AbortController();
        const p = sb.commands.run('while (true) {}', { signal: ac.signal });
        await sleep(200);
        ac.abort();
        await assert.rejects(p, (e) => e instanceof AbortError && e.name === 'AbortError');
        const procs = await sb.commands.list();
        assert.equal(procs.length, 1);
        assert.equal(procs[0].status, 'exited', 'the kill was sent before the rejection');
        // Already aborted: nothing runs.
        await assert.rejects(sb.commands.run('1', { signal: AbortSignal.abort() }), { name: 'AbortError' });
        assert.equal((await sb.commands.list()).length, 1);
    }));

    test('commands.spawn: a handle with pid, wait() and asyncDispose killing it', disposed(async () => {
        const sb = own(await Sandbox.create({ provider: 'duktape' }));
        const h = await sb.commands.spawn('console.log("bg"); 1');
        assert.equal(typeof h.pid, 'number');
        const r = await h.wait();
        assert.equal(r.stdout, 'bg\n');
        assert.equal(r.exitCode, 0);
        let pid;
        {
            const long = await sb.commands.spawn('while (true) {}');
            pid = long.pid;
            await long[Symbol.asyncDispose]();
        }
        await sleep(100);
        const p = (await sb.commands.list()).find((x) => x.pid === pid);
        assert.equal(p.status, 'exited');
    }));

    test('Sandbox.connect: the same sandbox; a missing one is SbxdError -32000', async () => {
        const sb = await Sandbox.create({ provider: 'duktape' });
        const again = await Sandbox.connect(sb.id);
        assert.equal(again.id, sb.id);
        assert.equal((await again.commands.run('1 + 1')).result, 2);
        const info = await again.getInfo();
        assert.equal(info.status, 'running');
        assert.equal(typeof info.createdAt, 'string');
        again.close();
        await sb.kill();
        await assert.rejects(Sandbox.connect('no-such-sandbox-here'), (e) => e instanceof SbxdError && e.code === -32000);
    });

    test('Symbol.asyncDispose destroys the sandbox (what await using calls)', async () => {
        let id;
        {
            const sb = await Sandbox.create({ provider: 'duktape' });
            id = sb.id;
            await sb[Symbol.asyncDispose]();
        }
        const c = new SbxdClient({ socketPath: SOCK });
        await assert.rejects(c.getSandbox(id), (e) => e.code === -32000);
        c.close();
    });

    test('an option the provider does not have is refused, naming it', async () => {
        await assert.rejects(Sandbox.create({ provider: 'js', options: { memory: '1g' } }),
            (e) => e instanceof SbxdError && e.code === -32602 && /options\.memory: not an option of the js provider/.test(e.message));
    });

    test('docker: shell, a non-zero exit resolves, stdout and stderr apart', disposed(async () => {
        const sb = own(await Sandbox.create({ provider: 'docker', image: DIMAGE, socketPath: DSOCK, options: { memory: '128m' } }));
        const r = await sb.commands.run('echo hi; echo oops >&2; exit 3');
        assert.equal(r.stdout, 'hi\n');
        assert.equal(r.stderr, 'oops\n');
        assert.equal(r.exitCode, 3);
        const w = await sb.commands.run('pwd', { cwd: '/tmp', env: { X: '1' } });
        assert.equal(w.stdout, '/tmp\n');
        assert.equal((await sb.getInfo()).image, DIMAGE);
    }), { skip: DOCKER_SKIP, timeout: 120000 });
    test('docker: sb.files writes what a command reads, and reads what a command wrote', disposed(async () => {
        const sb = own(await Sandbox.create({ provider: 'docker', image: DIMAGE, socketPath: DSOCK, options: { memory: '128m' } }));
        await sb.files.write('/tmp/in.txt', 'from files\n');
        assert.equal((await sb.commands.run('cat /tmp/in.txt')).stdout, 'from files\n');
        await sb.commands.run('printf "from sh" > /tmp/out.txt');
        assert.equal(await sb.files.read('/tmp/out.txt'), 'from sh');
        assert.ok((await sb.files.list('/tmp')).some((e) => e.name === 'out.txt'));
    }), { skip: DOCKER_SKIP, timeout: 120000 });
});

group('mastra instructions', () => {
    test('SbxdSandbox on js tells the model its commands are JavaScript, on docker shell', async () => {
        const { SbxdSandbox } = await import('../dist/mastra.js');
        const js = new SbxdSandbox({ provider: 'js', socketPath: SOCK }).getInstructions();
        assert.doesNotMatch(js, /shell commands using/);
        assert.match(js, /Commands are JavaScript programs \(sbxd's js provider\), not shell commands/);
        const dk = new SbxdSandbox({ provider: 'docker', image: 'x', socketPath: SOCK }).getInstructions();
        assert.match(dk, /You can execute shell commands using executeCommand\(\)\./);
    });
});
