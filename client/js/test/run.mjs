// The client's tests against real daemons. Environment (tests/providers/tsclient.sh sets it):
//   SBXD_SOCKET          an sbxd with the duktape provider (and js when built)
//   SBXD_DOCKER_SOCKET   an sbxd with the docker provider on a real engine (else Docker tests are skipped)
//   SBXD_DOCKER_SKIP     why there is no Docker (shown on each skipped test)
//   SBXD_PROTOCOL_MD     proto/PROTOCOL.md
import { existsSync } from 'node:fs';
import { run } from './harness.mjs';
for (const f of ['protocol', 'layers', 'pack', 'client', 'files', 'files_stream', 'files_tar', 'tar_read', 'files_download', 'mastra', 'mastra_files', 'mastra_mount', 'mastra_fs', 'mastra_modal', 'codemode', 'codemode_mastra', 'restart', 'sandbox', 'consumer', 'workspace', 'reconnect']) {
    const u = new URL(`./${f}.test.mjs`, import.meta.url);
    if (existsSync(u)) await import(u.href);
}
const failed = await run();
// Sandboxes' clients may still hold sockets: end here rather than wait for them.
process.exit(failed ? 1 : 0);
