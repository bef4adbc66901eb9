// Runs last: restarts the sbxd under the client ($SBXD_RESTART_CMD) while it
// follows a Docker process, which outlives the daemon. The client must
// reconnect to the new daemon and re-attach from its offsets.
import assert from 'node:assert/strict';
import { execSync } from 'node:child_process';
import { group, test, until } from './harness.mjs';
import { SbxdClient } from '../dist/index.js';

const DSOCK = process.env.SBXD_DOCKER_SOCKET;
const RESTART = process.env.SBXD_RESTART_CMD;
const skip = !RESTART ? 'no SBXD_RESTART_CMD' : DSOCK ? undefined : process.env.SBXD_DOCKER_SKIP || 'no Docker engine';

group('client across a daemon restart', () => {
    test('sbxd restarts under a followed Docker process: every line exactly once, then the exit', async () => {
        const c = new SbxdClient({ socketPath: DSOCK });
        const sb = await c.createSandbox({ provider: 'docker', image: 'sbx-test/busybox' });
        try {
            const p = await c.spawn({
                sandbox: sb.id,
                command: 'i=0; while [ $i -lt 200 ]; do echo "n $i"; i=$((i+1)); sleep 0.02; done; exit 5',
            });
            await until(() => p.offsets.stdout > 50);
            const gen = c.generation;
            execSync(RESTART, { stdio: 'ignore' });
            const r = await p.wait();
            assert.equal(r.exit_code, 5);
            assert.ok(c.generation > gen, 'connected to the new daemon');
            assert.equal(p.stdout, Array.from({ length: 200 }, (_, i) => `n ${i}\n`).join(''));
            assert.equal(p.stdoutLostBytes, 0);
        } finally {
            await c.destroySandbox(sb.id).catch(() => {});
            c.close();
        }
    }, { timeout: 120000 });
}, { skip });
