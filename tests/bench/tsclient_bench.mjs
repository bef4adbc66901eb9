// tsclient_bench.mjs rt SOCKET N | stream SOCKET MB CONSUMER
// The TypeScript client's figures for tests/bench/tsclient_bench.sh:
//   rt      N daemon.ping round trips: "ts_ping_us P50 P99"
//   rawrt   the same over a bare net.Socket (no client): Node's own floor, "node_ping_us P50 P99"
//   stream  a Duktape program printing MB MiB of 64 KiB lines, read by CONSUMER
//           (callback: onStdout strings; bytes: a web ReadableStream; iter: for await):
//           "ts_stream_mbs MBS BYTES"
// SBXD_TS_DIST: another build of the package (an older dist, run beside the new one)
const dist = process.env.SBXD_TS_DIST ? new URL(`file://${process.env.SBXD_TS_DIST}/index.js`) : new URL('../../client/js/dist/index.js', import.meta.url);
const { SbxdClient } = await import(dist.href);

const [mode, sock, arg, consumer = 'callback'] = process.argv.slice(2);
const c = new SbxdClient({ socketPath: sock });
if (mode === 'rawrt') {
    const { createConnection } = await import('node:net');
    const s = createConnection({ path: sock });
    await new Promise((r) => s.once('connect', r));
    let wake;
    s.on('data', (d) => wake(JSON.parse(d.toString())));
    const n = Math.max(10, Number(arg));
    const v = [];
    for (let i = -Math.floor(n / 10); i < n; i++) {
        const t0 = process.hrtime.bigint();
        const answered = new Promise((r) => (wake = r));
        s.write(JSON.stringify({ jsonrpc: '2.0', id: i + n, method: 'daemon.ping', params: {} }) + '\n');
        await answered;
        if (i >= 0) v.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
    v.sort((a, b) => a - b);
    console.log(`node_ping_us ${v[n >> 1].toFixed(1)} ${v[Math.floor(n * 0.99)].toFixed(1)}`);
    s.destroy();
} else if (mode === 'rt') {
    const n = Math.max(10, Number(arg));
    const v = [];
    for (let i = -Math.floor(n / 10); i < n; i++) {
        const t0 = process.hrtime.bigint();
        await c.ping();
        if (i >= 0) v.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
    v.sort((a, b) => a - b);
    console.log(`ts_ping_us ${v[n >> 1].toFixed(1)} ${v[Math.floor(n * 0.99)].toFixed(1)}`);
} else {
    const mb = Number(arg);
    const sb = await c.createSandbox({ provider: 'duktape' });
    const prog = `var s = new Array(65536).join('z'); for (var i = 0; i < ${mb * 16}; i++) console.log(s); 0`;
    let bytes = 0;
    const t0 = process.hrtime.bigint();
    if (consumer === 'callback') {
        // maxRetainedBytes 0: measure the stream, not a growing string
        const p = await c.spawn({ sandbox: sb.id, command: prog }, { maxRetainedBytes: 0, onStdout: (d) => (bytes += d.length) });
        await p.wait();
    } else if (consumer === 'bytes') {
        const p = await c.spawn({ sandbox: sb.id, command: prog }, { maxRetainedBytes: 0 });
        const rd = p.readable('stdout').getReader();
        for (;;) {
            const { value, done } = await rd.read();
            if (done) break;
            bytes += value.length;
        }
        await p.wait();
    } else {
        const p = await c.spawn({ sandbox: sb.id, command: prog }, { maxRetainedBytes: 0 });
        for await (const ch of p) bytes += ch.data.length;
    }
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    console.log(`ts_stream_mbs ${(bytes / 1e6 / secs).toFixed(1)} ${bytes}`);
    await c.destroySandbox(sb.id);
}
c.close();
