// modal_bench_sdk.mjs - the reference for modal_bench.c: the official Modal JS
// SDK (modal@0.11.1, exec on the command router) running `echo hi` N times with sandbox.exec + read stdout +
// wait, one after another, against the server in MODAL_SERVER_URL (the fake).
// Prints: "sdk_bench: N execs, median X ms, mean Y ms, p90 Z ms"
// usage: node tests/bench/modal_bench_sdk.mjs [N]   (MODAL_TOKEN_ID/SECRET set)
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const sdk = path.join(here, '..', 'modal', 'fake', 'node_modules', 'modal', 'dist', 'index.js');
const n = Number(process.argv[2] || 30);
const modal = await import(pathToFileURL(sdk).href);
const client = new modal.ModalClient();
const app = await client.apps.fromName('sbxd-bench-sdk', { createIfMissing: true });
const sb = await client.sandboxes.create(app, client.images.fromRegistry('ubuntu:22.04'));
const run = async (argv) => {
  const p = await sb.exec(argv);
  const [out] = await Promise.all([p.stdout.readText(), p.stderr.readText()]);
  const code = await p.wait();
  return { out, code };
};
await run(['true']); // warm-up
const t = [];
let bad = 0;
for (let i = 0; i < n; i++) {
  const t0 = performance.now();
  const r = await run(['echo', 'hi']);
  t.push(performance.now() - t0);
  if (r.code !== 0 || r.out !== 'hi\n') bad++;
}
t.sort((a, b) => a - b);
const mean = t.reduce((a, b) => a + b, 0) / n;
console.log(`sdk_bench: ${n} execs, median ${t[n >> 1].toFixed(2)} ms, mean ${mean.toFixed(2)} ms, ` +
  `p90 ${t[Math.min(n - 1, Math.floor(n * 0.9))].toFixed(2)} ms${bad ? ' (SOME FAILED)' : ''}`);
await sb.terminate();
client.close();
process.exit(bad ? 1 : 0);
