// fs_bench_ts.mjs SOCKET SANDBOX FILE up|upweb|down - one transfer of FILE
// through the TypeScript client's streams (client/js/dist): "up" writes it to
// /workspace/big.ts from fs.createReadStream (one raw transfer, its size from
// the file), "upweb" from a web ReadableStream of it (length unknown: 8 MiB
// segments renamed into place), "down" reads /workspace/big.ts through
// files.read(..., {format: 'stream'}) into FILE.down. Prints nothing;
// fs_bench.sh times it (node's start included, as docker cp's).
import { createReadStream, createWriteStream } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
const [, , sock, sandbox, file, dir] = process.argv;
const { SbxdClient } = await import(new URL('../../client/js/dist/index.js', import.meta.url).href);
const c = new SbxdClient({ socketPath: sock });
const f = c.files(sandbox);
const rs = () => createReadStream(file, { highWaterMark: 1 << 20 });
if (dir === 'up') await f.write('/workspace/big.ts', rs());
else if (dir === 'upweb') await f.write('/workspace/big.ts', Readable.toWeb(rs()));
else await pipeline(Readable.fromWeb(await f.read('/workspace/big.ts', { format: 'stream' })), createWriteStream(`${file}.down`));
c.close();
