// bench.mjs SOCKET IMAGE N [SBXD_JSON] - Mastra's DockerSandbox from npm
// (@mastra/docker, pinned in package-lock.json): start() + executeCommand()
// and destroy(), N times, against the same engine as sbxd in the same run.
// With SBXD_JSON (sbxd's figures from docker_bench), prints the ratios.
import { DockerSandbox } from '@mastra/docker';

const [, , socketPath, image, nArg, sbxdJson] = process.argv;
const n = Number(nArg || 8);
const pct = (v, p) => {
  const s = [...v].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};
const createExec = [], destroy = [];
let stdout = '';
for (let i = 0; i < n; i++) {
  let t = performance.now();
  const sb = new DockerSandbox({
    id: `mastra-bench-${process.pid}-${i}`, image, command: ['sleep', '3600'],
    network: 'none', dockerOptions: { socketPath },
  });
  await sb.start();
  const r = await sb.executeCommand('echo', ['hi']);
  createExec.push(performance.now() - t);
  stdout = r.stdout;
  t = performance.now();
  await sb.destroy();
  destroy.push(performance.now() - t);
}
const m = { create_exec_p50: pct(createExec, 0.5), destroy_p50: pct(destroy, 0.5) };
const sbxd = sbxdJson ? JSON.parse(sbxdJson) : {};
const ratio = (a, b) => (a > 0 && b > 0 ? ` -> sbxd ${(b / a).toFixed(2)}x faster` : '');
console.log(`  Mastra DockerSandbox (@mastra/docker) start()+executeCommand p50 ${m.create_exec_p50.toFixed(1)} ms` +
  ` (stdout ${JSON.stringify(stdout)}), vs sbxd create to first exec ${sbxd.sbxd_create_exec_p50 ?? '?'} ms` +
  ratio(sbxd.sbxd_create_exec_p50, m.create_exec_p50) +
  (sbxd.pool_create_exec_p50 ? `; from a warm pool ${sbxd.pool_create_exec_p50} ms${ratio(sbxd.pool_create_exec_p50, m.create_exec_p50)}` : ''));
console.log(`  Mastra DockerSandbox destroy() p50 ${m.destroy_p50.toFixed(1)} ms vs sbxd destroy ${sbxd.sbxd_destroy_p50 ?? '?'} ms` +
  ratio(sbxd.sbxd_destroy_p50, m.destroy_p50));
