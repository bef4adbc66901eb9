// SbxdSandbox (sbxd/mastra) against the real @mastra/core and a real sbxd on a
// real Docker engine, image sbx-test/debian:bookworm (node, python3, apt layout).
// The behaviours are the ones Mastra's provider conformance suite checks
// (workspaces/_test-utils/src/sandbox: command execution, lifecycle, process
// management, reconnection), written here against our own sandbox, plus the
// adapter's own: options, reconnect warnings, clone, env overlay, hooks, and
// a Workspace's tools used as an Agent would call them.
import assert from 'node:assert/strict';
import * as http from 'node:http';
import { group, test, until, sleep } from './harness.mjs';
import { SbxdClient, ErrorCode } from '../dist/index.js';
import { SbxdSandbox } from '../dist/mastra.js';
import { Workspace, MastraSandbox, createWorkspaceTools, WORKSPACE_TOOLS } from '@mastra/core/workspace';

const DSOCK = process.env.SBXD_DOCKER_SOCKET;
const SKIP = DSOCK ? undefined : process.env.SBXD_DOCKER_SKIP || 'no Docker engine';
const IMAGE = 'sbx-test/debian:bookworm';
const ENGINE = (process.env.SBXD_DOCKER_HOST ?? '').replace(/^unix:\/\//, '');

let seq = 0;
const uid = (p) => `${p}-${process.pid}-${++seq}`;
const make = (o = {}) => new SbxdSandbox({ provider: 'docker', image: IMAGE, socketPath: DSOCK, ...o });

/** GET from the Docker engine (to check what sbxd asked Docker for). */
function engineGet(path) {
    return new Promise((resolve, reject) => {
        const req = http.request({ socketPath: ENGINE, path, method: 'GET' }, (res) => {
            let b = '';
            res.on('data', (d) => (b += d));
            res.on('end', () => resolve(JSON.parse(b)));
        });
        req.on('error', reject);
        req.end();
    });
}

function captureWarnings(sb) {
    const warns = [];
    const base = sb.logger;
    sb.__setLogger(
        new Proxy(base, {
            has: (t, k) => k !== 'child' && k in t, // no child logger: warnings must come here
            get(t, k) {
                if (k === 'warn') return (m, ...rest) => warns.push(String(m));
                const v = t[k];
                return typeof v === 'function' ? v.bind(t) : v;
            },
        }),
    );
    return warns;
}

let sandbox; // shared by the conformance groups
let pm;

group('mastra sandbox', () => {
    test('setup: start() brings the sandbox to running', async () => {
        sandbox = make({ id: uid('mastra-main') });
        assert.ok(sandbox instanceof MastraSandbox);
        await sandbox._start();
        pm = sandbox.processes;
        assert.equal(sandbox.status, 'running');
    }, { timeout: 120000 });

    /* ---- lifecycle ---------------------------------------------------------------- */
    test('lifecycle: has id, name and provider strings', () => {
        assert.equal(typeof sandbox.id, 'string');
        assert.equal(sandbox.name, 'SbxdSandbox');
        assert.equal(sandbox.provider, 'sbxd');
    });
    test('lifecycle: isReady is true when running; getInfo returns id and running status', async () => {
        if (sandbox.isReady) assert.equal(await sandbox.isReady(), true);
        const info = await sandbox.getInfo();
        assert.equal(info.id, sandbox.id);
        assert.equal(info.status, 'running');
        assert.ok(info.createdAt instanceof Date && !isNaN(info.createdAt));
        assert.equal(info.metadata.sbxdProvider, 'docker');
        assert.equal(info.metadata.image, IMAGE);
        assert.ok(info.metadata.container_id || info.metadata.containerId || info.metadata.container, JSON.stringify(info.metadata));
    });

    /* ---- command execution ------------------------------------------------------------ */
    test('command: executes a simple command and captures stdout', async () => {
        const r = await sandbox.executeCommand('echo', ['hello']);
        assert.equal(r.exitCode, 0);
        assert.equal(r.success, true);
        assert.equal(r.stdout.trim(), 'hello');
        assert.equal(typeof r.executionTimeMs, 'number');
    });
    test('command: captures stderr', async () => {
        const r = await sandbox.executeCommand('sh', ['-c', 'echo "error message" >&2']);
        assert.match(r.stderr, /error message/);
    });
    test('command: non-zero exit code', async () => {
        const r = await sandbox.executeCommand('sh', ['-c', 'exit 1']);
        assert.equal(r.exitCode, 1);
        assert.equal(r.success, false);
    });
    test('command: arguments, including ones with spaces and quotes', async () => {
        assert.equal((await sandbox.executeCommand('echo', ['arg1', 'arg2', 'arg3'])).stdout.trim(), 'arg1 arg2 arg3');
        assert.equal((await sandbox.executeCommand('echo', ['hello world', 'test'])).stdout.trim(), 'hello world test');
        assert.equal((await sandbox.executeCommand('printf', ['%s|', "it's", '$HOME', 'a"b'])).stdout, "it's|$HOME|a\"b|");
    });
    test('command: env variables reach the command', async () => {
        const r = await sandbox.executeCommand('sh', ['-c', 'echo "$VAR1 $VAR2"'], { env: { VAR1: 'first', VAR2: 'second' } });
        assert.equal(r.stdout.trim(), 'first second');
    });
    test('command: cwd option', async () => {
        assert.equal((await sandbox.executeCommand('pwd', [], { cwd: '/tmp' })).stdout.trim(), '/tmp');
        assert.equal((await sandbox.executeCommand('pwd')).stdout.trim(), '/workspace', 'default working directory');
    });
    test('command: timeout ends a long command with a non-zero exit', async () => {
        const t0 = Date.now();
        const r = await sandbox.executeCommand('sleep', ['10'], { timeout: 1000 });
        assert.notEqual(r.exitCode, 0);
        assert.equal(r.timedOut, true);
        assert.ok(Date.now() - t0 < 8000);
    });
    test('command: the default timeout is the sandbox option `timeout`', async () => {
        const sb = make({ id: uid('mastra-to'), timeout: 700 });
        await sb._start();
        try {
            const r = await sb.executeCommand('sleep 5');
            assert.equal(r.timedOut, true);
        } finally {
            await sb._destroy();
        }
    }, { timeout: 120000 });
    test('command: node -e and python3 -c run in the Debian image', async () => {
        assert.equal((await sandbox.executeCommand('node', ['-e', 'console.log(6*7)'])).stdout.trim(), '42');
        assert.equal((await sandbox.executeCommand('python3', ['-c', 'print(2**10)'])).stdout.trim(), '1024');
        assert.equal((await sandbox.executeCommand('sh -c "test -x /usr/bin/apt-get && test -d /var/lib/dpkg && echo apt"')).stdout.trim(), 'apt');
    });

    /* ---- process management --------------------------------------------------------------- */
    test('processes: spawn gives a handle with a pid; stdout, stderr and exit codes accumulate', async () => {
        const h = await pm.spawn('echo hello');
        assert.ok(Number(h.pid) > 0);
        const r = await h.wait();
        assert.equal(r.success, true);
        assert.equal(r.exitCode, 0);
        assert.equal(r.stdout.trim(), 'hello');
        assert.equal(h.stdout.trim(), 'hello');
        const e = await pm.spawn('echo "error msg" >&2');
        assert.match((await e.wait()).stderr, /error msg/);
        assert.match(e.stderr, /error msg/);
        const x = await pm.spawn('exit 42');
        const rx = await x.wait();
        assert.equal(rx.success, false);
        assert.equal(rx.exitCode, 42);
    });
    test('processes: env option', async () => {
        const h = await pm.spawn('echo $MY_VAR', { env: { MY_VAR: 'test_value' } });
        assert.equal((await h.wait()).stdout.trim(), 'test_value');
    });
    test('processes: onStdout/onStderr callbacks get the data', async () => {
        const o = [], e = [];
        const h = await pm.spawn('echo hello; echo err >&2', { onStdout: (d) => o.push(d), onStderr: (d) => e.push(d) });
        await h.wait();
        assert.match(o.join(''), /hello/);
        assert.match(e.join(''), /err/);
    });
    for (const s of ['stdout', 'stderr']) {
        test(`processes: ${s} streams in real time (chunks before wait resolves)`, async () => {
            const chunks = [];
            const redirect = s === 'stderr' ? ' >&2' : '';
            const h = await pm.spawn(`for i in 1 2 3; do echo "line-$i"${redirect}; sleep 0.2; done`, {
                [s === 'stdout' ? 'onStdout' : 'onStderr']: (d) => chunks.push(d),
            });
            await until(() => chunks.length > 0, 5000);
            assert.ok(chunks.length > 0 && h.exitCode === undefined, 'a chunk arrived while running');
            await h.wait();
            assert.match(chunks.join(''), /line-1[\s\S]*line-3/);
        });
    }
    test('processes: exitCode is undefined while running, set after exit', async () => {
        const h = await pm.spawn('sleep 0.05');
        assert.equal(h.exitCode, undefined);
        await h.wait();
        assert.equal(h.exitCode, 0);
    });
    test('processes: wait() is idempotent', async () => {
        const h = await pm.spawn('echo idempotent');
        const a = await h.wait();
        const b = await h.wait();
        assert.equal(a.exitCode, 0);
        assert.equal(b.exitCode, 0);
        assert.equal(a.stdout, b.stdout);
    });
    test('processes: kill() is true for a running process, false after exit', async () => {
        const h = await pm.spawn('sleep 60');
        assert.equal(h.exitCode, undefined);
        assert.equal(await h.kill(), true);
        assert.equal((await h.wait()).success, false);
        const d = await pm.spawn('echo done');
        await d.wait();
        assert.equal(await d.kill(), false);
    });
    test('processes: abort signal kills, keeps partial output; already aborted runs nothing', async () => {
        const ac = new AbortController();
        const h = await pm.spawn(`node -e "process.stdout.write('before abort\\n'); setTimeout(() => {}, 30000)"`, {
            abortSignal: ac.signal,
            onStdout: () => ac.abort(),
        });
        const r = await h.wait();
        assert.equal(r.success, false);
        assert.match(r.stdout, /before abort/);
        const ac2 = new AbortController();
        ac2.abort();
        const t0 = Date.now();
        const marker = `/tmp/ran-${process.pid}`;
        const h2 = await pm.spawn(`touch ${marker}; sleep 60`, { abortSignal: ac2.signal });
        assert.equal((await h2.wait()).success, false);
        assert.ok(Date.now() - t0 < 2000);
        await sleep(200);
        assert.equal((await sandbox.executeCommand(`test -e ${marker} && echo ran || echo not`)).stdout.trim(), 'not', 'nothing ran');
    });
    test('processes: sendStdin reaches the process; sending to an exited one throws; closeStdin gives EOF', async () => {
        const h = await pm.spawn('head -1');
        await h.sendStdin('hello from stdin\n');
        assert.match((await h.wait()).stdout, /hello from stdin/);
        await assert.rejects(h.sendStdin('data'));
        const c = await pm.spawn('wc -c');
        await c.sendStdin('12345');
        await c.closeStdin();
        assert.equal((await c.wait()).stdout.trim(), '5');
    });
    test('processes: list shows running and exited processes with their command', async () => {
        const h = await pm.spawn('sleep 60');
        let found = (await pm.list()).find((p) => p.pid === h.pid);
        assert.ok(found);
        assert.equal(found.running, true);
        assert.match(found.command, /sleep/);
        await h.kill();
        await h.wait();
        const d = await pm.spawn('echo done');
        await d.wait();
        found = (await pm.list()).find((p) => p.pid === d.pid);
        assert.ok(found);
        assert.equal(found.running, false);
        assert.equal(found.exitCode, 0);
    });
    test('processes: get returns the handle with its output, running or exited', async () => {
        let got;
        const arrived = new Promise((r) => (got = r));
        const h = await pm.spawn(`node -e "console.log('running-get-test'); setInterval(()=>{},60000)"`, { onStdout: () => got() });
        await arrived;
        const g = await pm.get(h.pid);
        assert.equal(g.pid, h.pid);
        assert.match(g.stdout, /running-get-test/);
        assert.equal(await pm.kill(h.pid), true, 'manager kill of a running process');
        assert.equal(await pm.get(h.pid), undefined, 'released after manager kill');
        const e = await pm.spawn('echo get-test');
        await e.wait();
        assert.match((await pm.get(e.pid)).stdout, /get-test/);
    });
    test('processes: first get() after natural exit returns output, the second is pruned', async () => {
        let got;
        const arrived = new Promise((r) => (got = r));
        const h = await pm.spawn('echo prune-test', { onStdout: () => got() });
        await arrived;
        await until(() => h.exitCode !== undefined, 5000);
        const first = await pm.get(h.pid);
        assert.ok(first);
        assert.match(first.stdout, /prune-test/);
        assert.notEqual(first.exitCode, undefined);
        assert.equal(await pm.get(h.pid), undefined);
    });
    test('processes: unknown pids: get is undefined, kill is false', async () => {
        assert.equal(await pm.get('99999'), undefined);
        assert.equal(await pm.kill('99999'), false);
    });
    test('processes: handle.kill() keeps tracking; concurrent processes are independent', async () => {
        const h = await pm.spawn('sleep 60');
        await h.kill();
        await h.wait();
        const r = await pm.get(h.pid);
        if (r) assert.equal(r.pid, h.pid);
        const h1 = await pm.spawn('echo first');
        const h2 = await pm.spawn('echo second');
        const h3 = await pm.spawn('sleep 60');
        assert.equal(new Set([h1.pid, h2.pid, h3.pid]).size, 3);
        assert.equal((await h1.wait()).stdout.trim(), 'first');
        assert.equal((await h2.wait()).stdout.trim(), 'second');
        assert.equal(h3.exitCode, undefined);
        await h3.kill();
        await h3.wait();
    });
    test('processes: reader stream gets stdout and ends; writer stream feeds stdin', async () => {
        const h = await pm.spawn('echo stream-test');
        const chunks = [];
        h.reader.on('data', (c) => chunks.push(c.toString()));
        const ended = new Promise((r) => h.reader.on('end', r));
        await h.wait();
        await Promise.race([ended, sleep(2000).then(() => assert.fail('reader did not end'))]);
        assert.match(chunks.join(''), /stream-test/);
        const w = await pm.spawn('head -1');
        await new Promise((res, rej) => w.writer.write('writer-test\n', (e) => (e ? rej(e) : res())));
        assert.match((await w.wait()).stdout, /writer-test/);
    });
    test('processes: sandbox-level env is inherited and per-spawn env overrides it', async () => {
        const sb = make({ id: uid('mastra-env'), env: { SANDBOX_VAR: 'original', EXTRA: 'kept' } });
        await sb._start();
        try {
            assert.equal((await (await sb.processes.spawn('printenv SANDBOX_VAR')).wait()).stdout.trim(), 'original');
            const r = await (
                await sb.processes.spawn("sh -c 'echo $SANDBOX_VAR $EXTRA $SPAWN_VAR'", { env: { SANDBOX_VAR: 'overridden', SPAWN_VAR: 'added' } })
            ).wait();
            assert.equal(r.stdout.trim(), 'overridden kept added');
        } finally {
            await sb._destroy();
        }
    }, { timeout: 120000 });

    /* ---- the adapter's own behaviour ---------------------------------------------------------- */
    test('setEnv/getEnv: the runtime overlay reaches later commands; getEnv is a copy', async () => {
        sandbox.setEnv((env) => ({ ...env, OVERLAY: 'one' }));
        assert.equal((await sandbox.executeCommand('sh -c "echo $OVERLAY"')).stdout.trim(), 'one');
        const copy = sandbox.getEnv();
        copy.OVERLAY = 'changed';
        assert.equal(sandbox.getEnv().OVERLAY, 'one');
        sandbox.setEnv((env) => {
            delete env.OVERLAY;
            return env;
        });
        assert.equal((await sandbox.executeCommand('sh -c "echo x${OVERLAY}x"')).stdout.trim(), 'xx');
    });
    test('getInstructions: default names image and directory; string and function overrides', async () => {
        assert.match(sandbox.getInstructions(), /sbx-test\/debian:bookworm/);
        assert.match(sandbox.getInstructions(), /\/workspace/);
        assert.equal(make({ instructions: 'Only this.' }).getInstructions(), 'Only this.');
        const f = make({ instructions: ({ defaultInstructions }) => defaultInstructions + '\nAlso that.' });
        assert.match(f.getInstructions(), /Docker container[\s\S]*Also that\.$/);
    });
    test('options are applied to the container (memory, pids, labels, readonly, tmpfs, capDrop, ulimits)', async () => {
        const sb = make({
            id: uid('mastra-opts'),
            memory: 256 * 1024 * 1024,
            pidsLimit: 64,
            labels: { team: 'sbxd' },
            capDrop: ['ALL'],
            securityOpt: ['no-new-privileges'],
            ulimits: [{ name: 'nofile', soft: 1024, hard: 2048 }],
            tmpfs: { '/scratch': 'rw,size=16m' },
            readonlyRootfs: true,
            workingDirectory: '/scratch',
        });
        await sb._start();
        try {
            const info = await sb.getInfo();
            const cid = info.metadata.container_id ?? info.metadata.containerId ?? info.metadata.container;
            const ins = await engineGet(`/containers/${cid}/json`);
            assert.equal(ins.HostConfig.Memory, 256 * 1024 * 1024);
            assert.equal(ins.HostConfig.PidsLimit, 64);
            assert.equal(ins.HostConfig.ReadonlyRootfs, true);
            assert.ok('/scratch' in (ins.HostConfig.Tmpfs ?? {}));
            assert.deepEqual(ins.HostConfig.Ulimits.find((u) => u.Name === 'nofile'), { Name: 'nofile', Soft: 1024, Hard: 2048 });
            assert.equal(ins.Config.Labels.team, 'sbxd');
            assert.equal((await sb.executeCommand('pwd')).stdout.trim(), '/scratch');
            assert.notEqual((await sb.executeCommand('touch /rootfile')).exitCode, 0, 'read-only root');
        } finally {
            await sb._destroy();
        }
    }, { timeout: 120000 });
    test('workingDir and workdir are aliases of workingDirectory', async () => {
        assert.equal(make({ workingDir: '/tmp' }).workingDirectory, '/tmp');
        assert.equal(make({ workdir: '/srv' }).workingDirectory, '/srv');
        assert.equal(make({ workingDirectory: '/a', workingDir: '/b' }).workingDirectory, '/a');
    });
    test('start() reconnects by id: state is kept and a differing configuration is warned about', async () => {
        await sandbox.executeCommand('sh -c "echo kept > /workspace/state.txt"');
        const again = make({ id: sandbox.id, memory: 128 * 1024 * 1024, env: { NEWVAR: 'x' } });
        const warns = captureWarnings(again);
        await again._start();
        assert.equal(again.status, 'running');
        assert.equal(again.sandbox.reconnected, true);
        assert.equal((await again.executeCommand('cat /workspace/state.txt')).stdout.trim(), 'kept');
        assert.ok(again.reconnectWarnings.length > 0, 'sbxd reported differences');
        assert.ok(warns.some((w) => /Reconnected to existing sandbox/.test(w) && /memory/.test(w)), warns.join('\n'));
        const same = make({ id: sandbox.id });
        const w2 = captureWarnings(same);
        await same._start();
        assert.deepEqual(w2, [], 'no warning when nothing differs');
    }, { timeout: 120000 });
    test('a process spawned by one instance is found by pid from a reconnected one', async () => {
        const h = await pm.spawn('echo from-first; sleep 60');
        await until(() => h.stdout.includes('from-first'));
        const other = make({ id: sandbox.id, client: new SbxdClient({ socketPath: DSOCK }) });
        await other._start();
        const g = await other.processes.get(h.pid);
        assert.ok(g, 'adopted');
        await until(() => g.stdout.includes('from-first'));
        assert.match(g.stdout, /from-first/);
        assert.equal(await other.processes.kill(h.pid), true);
        await h.wait();
        other.client.close();
    }, { timeout: 120000 });
    test('clone(): no I/O until start; inherits the configuration with overrides', async () => {
        const base = make({ id: uid('mastra-tpl'), env: { FROM: 'template' } });
        const cl = base.clone({ id: uid('mastra-clone'), env: { EXTRA: 'clone' } });
        assert.ok(cl instanceof SbxdSandbox);
        assert.notEqual(cl.id, base.id);
        const c = new SbxdClient({ socketPath: DSOCK });
        await assert.rejects(c.getSandbox(cl.id), (e) => e.code === ErrorCode.SandboxNotFound);
        await assert.rejects(c.getSandbox(base.id), (e) => e.code === ErrorCode.SandboxNotFound);
        await cl._start();
        try {
            assert.equal((await cl.executeCommand('sh -c "echo $FROM $EXTRA"')).stdout.trim(), 'template clone');
            assert.match(cl.getInstructions(), /sbx-test\/debian/);
        } finally {
            await cl._destroy();
        }
        c.close();
    }, { timeout: 120000 });
    test('stop() then start(): stopped, then running again with the filesystem kept; hooks run', async () => {
        const calls = [];
        const sb = make({
            id: uid('mastra-stop'),
            onStart: ({ sandbox: s, outcome }) => calls.push(['start', s.id]),
            onStop: () => calls.push(['stop']),
            onDestroy: () => calls.push(['destroy']),
        });
        await sb._start();
        await sb.executeCommand('sh -c "echo persisted > /workspace/f"');
        const c = new SbxdClient({ socketPath: DSOCK });
        await sb._stop();
        assert.equal(sb.status, 'stopped');
        assert.equal((await c.getSandbox(sb.id)).status, 'stopped');
        await sb._start();
        assert.equal(sb.status, 'running');
        assert.equal((await sb.executeCommand('cat /workspace/f')).stdout.trim(), 'persisted');
        await sb._destroy();
        assert.equal(sb.status, 'destroyed');
        await assert.rejects(c.getSandbox(sb.id), (e) => e.code === ErrorCode.SandboxNotFound);
        assert.deepEqual(calls.map((x) => x[0]), ['start', 'stop', 'start', 'destroy']);
        c.close();
    }, { timeout: 180000 });

    /* ---- a Workspace, with the tools an Agent gets ------------------------------------------------ */
    test('Workspace tools: execute_command (foreground and background), get_process_output, kill_process', async () => {
        const ws = new Workspace({ sandbox });
        const tools = await createWorkspaceTools(ws);
        const S = WORKSPACE_TOOLS.SANDBOX;
        assert.ok(tools[S.EXECUTE_COMMAND] && tools[S.GET_PROCESS_OUTPUT] && tools[S.KILL_PROCESS], Object.keys(tools).join(','));
        const ctx = { workspace: ws };
        const fg = await tools[S.EXECUTE_COMMAND].execute({ command: 'node -e "console.log(40+2)"' }, ctx);
        assert.match(JSON.stringify(fg), /42/);
        const bg = await tools[S.EXECUTE_COMMAND].execute({ command: 'echo bg-started; sleep 60', background: true }, ctx);
        const pid = /(?:pid|PID)[^0-9]*([0-9]+)/.exec(JSON.stringify(bg))?.[1];
        assert.ok(pid, `background start names the pid: ${JSON.stringify(bg)}`);
        await sleep(300);
        const out = await tools[S.GET_PROCESS_OUTPUT].execute({ pid }, ctx);
        assert.match(JSON.stringify(out), /bg-started/);
        const k = await tools[S.KILL_PROCESS].execute({ pid }, ctx);
        assert.doesNotMatch(JSON.stringify(k), /not found/i);
        assert.equal(await pm.get(pid), undefined, 'released after kill_process');
        const fail = await tools[S.EXECUTE_COMMAND].execute({ command: 'sh -c "echo oops >&2; exit 3"' }, ctx);
        assert.match(JSON.stringify(fail), /oops/);
    }, { timeout: 120000 });

    test('teardown: destroy() removes the sandbox', async () => {
        await sandbox._destroy();
        assert.equal(sandbox.status, 'destroyed');
        const c = new SbxdClient({ socketPath: DSOCK });
        await assert.rejects(c.getSandbox(sandbox.id), (e) => e.code === ErrorCode.SandboxNotFound);
        c.close();
    }, { timeout: 120000 });
}, { skip: SKIP });
