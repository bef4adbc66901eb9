// archive.mjs SOCKET CONTAINER put TARFILE DIR | get PATH - dockerode's
// putArchive (TARFILE's bytes extracted into DIR) or getArchive (PATH's tar
// stream read to its end); prints "<bytes> <seconds>", timed from the call
// to the end of the transfer, as sbxctl cp's figure is.
import { createReadStream, statSync } from 'node:fs';
import Docker from 'dockerode';

const [sock, cid, op, a, b] = process.argv.slice(2);
const c = new Docker({ socketPath: sock }).getContainer(cid);
const t0 = process.hrtime.bigint();
let bytes = 0;
if (op === 'put') {
    bytes = statSync(a).size;
    await c.putArchive(createReadStream(a), { path: b });
} else {
    const stream = await c.getArchive({ path: a });
    await new Promise((resolve, reject) => {
        stream.on('data', (d) => (bytes += d.length));
        stream.on('end', resolve);
        stream.on('error', reject);
    });
}
console.log(`${bytes} ${Number(process.hrtime.bigint() - t0) / 1e9}`);
