// Helper of mastra_mount.test.mjs (not a test of its own): run as another
// uid (the parent is root), it starts an SbxdSandbox in a Workspace with the
// mounts given as argv JSON ({mountPath: [hostDir, readOnly]}), runs `sh -c
// argv[3]` in it and prints one JSON line: each mount's state and error, the
// command's output, then destroys the sandbox.
import { SbxdSandbox } from '../dist/mastra.js';
import { LocalFilesystem, Workspace } from '@mastra/core/workspace';

const [, , id, spec, cmd] = process.argv;
const mounts = {};
for (const [p, [dir, ro]] of Object.entries(JSON.parse(spec))) mounts[p] = new LocalFilesystem({ basePath: dir, readOnly: ro });
const sandbox = new SbxdSandbox({ provider: 'docker', socketPath: process.env.SBXD_DOCKER_SOCKET, id });
const ws = new Workspace({ sandbox, mounts });
const out = { uid: process.getuid() };
try {
    await ws.init();
    out.mounts = Object.fromEntries([...sandbox.mounts.entries].map(([p, e]) => [p, { state: e.state, error: e.error }]));
    const r = await sandbox.executeCommand('sh', ['-c', cmd]);
    out.stdout = r.stdout;
    out.exitCode = r.exitCode;
} catch (e) {
    out.error = String(e?.message ?? e);
} finally {
    await sandbox._destroy().catch(() => {});
    sandbox.client.close();
}
console.log(JSON.stringify(out));
process.exit(0);
