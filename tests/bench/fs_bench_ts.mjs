// fs_bench_ts.mjs SOCKET SANDBOX FILE up|upweb|down - one transfer of FILE
// through the TypeScript client's streams (client/js/dist): "up" writes it to
// /workspace/big.ts from fs.createReadStream (one raw transfer, its size from
// the file), "upweb" from a web ReadableStream of it (length unknown: 8 MiB
// segments renamed into place), "down" reads /workspace/big.ts through
// files.read(..., {format: 'stream'}) into FILE.down. Prints nothing;
// fs_bench.sh times it (node's start included, as docker cp's). "treeup"
// copies the directory FILE to /workspace/tree.ts with files.uploadDir (one
// tar stream), "treefiles" with one files.write([{path, data}, ...]) (E2B's
// shape for many files: a write per file); "treedown" copies the sandbox's
// /workspace/tree to the local directory FILE with files.downloadDir (one
// tar stream, extracted as it arrives).
// SBXD_TS_XFER_TIME=1 prints "<seconds>" of the transfer alone (node's start
// and the connection left out, as dockerode's rows are timed).
import { createReadStream, createWriteStream } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
const [, , sock, sandbox, file, dir] = process.argv;
// SBXD_TS_DIST: another build of the package (an older dist, run beside the new one)
const dist = process.env.SBXD_TS_DIST ? new URL(`file://${process.env.SBXD_TS_DIST}/index.js`) : new URL('../../client/js/dist/index.js', import.meta.url);
const { SbxdClient } = await import(dist.href);
const c = new SbxdClient({ socketPath: sock });
const f = c.files(sandbox);
const rs = () => createReadStream(file, { highWaterMark: 1 << 20 });
await c.ping();
const t0 = process.hrtime.bigint();
if (dir === 'treeup') await f.uploadDir(file, '/workspace/tree.ts');
else if (dir === 'treedown') await f.downloadDir('/workspace/tree', file);
else if (dir === 'treefiles') {
    const files = [];
    for (const e of await readdir(file, { recursive: true, withFileTypes: true })) {
        if (!e.isFile()) continue;
        const p = join(e.parentPath ?? e.path, e.name);
        files.push({ path: `/workspace/tree.ts/${p.slice(file.length + 1)}`, data: await readFile(p) });
    }
    await f.write(files);
} else if (dir === 'up') await f.write('/workspace/big.ts', rs());
else if (dir === 'upweb') await f.write('/workspace/big.ts', Readable.toWeb(rs()));
else await pipeline(Readable.fromWeb(await f.read('/workspace/big.ts', { format: 'stream' })), createWriteStream(`${file}.down`));
if (process.env.SBXD_TS_XFER_TIME) console.log(`${Number(process.hrtime.bigint() - t0) / 1e9}`);
c.close();
