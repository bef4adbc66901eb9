// Helper of mastra_mount.test.mjs (not a test of its own): run as another
// uid (the parent is root), it starts an SbxdSandbox in a Workspace with the
// mounts given as argv JSON ({mountPath: [hostDir, readOnly]}; with
// SBXD_MOUNT_AT_CREATE=1 bound at create), runs `sh -c argv[4]` in it and
// prints one JSON line: each mount's state and error, the command's output,
// then destroys the sandbox. `--call ID SOURCE TARGET`: one sandbox.mount
// into sandbox ID, printing the error's code.
import { SbxdClient } from '../dist/index.js';
import { SbxdSandbox } from '../dist/mastra.js';
import { LocalFilesystem, Workspace } from '@mastra/core/workspace';

if (process.argv[2] === '--call') {
    const c = new SbxdClient({ socketPath: process.env.SBXD_DOCKER_SOCKET });
    const [, , , sid, source, target] = process.argv;
    const r = await c.mount(sid, source, target).then(() => ({ ok: true }), (e) => ({ code: e.code, message: e.message }));
    console.log(JSON.stringify(r));
    process.exit(0);
}
const [, , id, spec, cmd] = process.argv;
const mounts = {};
for (const [p, [dir, ro]] of Object.entries(JSON.parse(spec))) mounts[p] = new LocalFilesystem({ basePath: dir, readOnly: ro });
const sandbox = new SbxdSandbox({
    provider: 'docker',
    socketPath: process.env.SBXD_DOCKER_SOCKET,
    id,
    mountAtCreate: process.env.SBXD_MOUNT_AT_CREATE === '1',
});
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
