// stream.mjs SOCKET CONTAINER COMMAND - runs COMMAND in CONTAINER through
// dockerode (exec create + start, Docker's 8-byte frames demultiplexed) and
// prints "<bytes> <seconds>" for reading all of its stdout, timed from the
// exec create to the end of the stream, as sbxctl's figure is.
import { Writable } from 'node:stream';
import Docker from 'dockerode';

const [sock, cid, cmd] = process.argv.slice(2);
const docker = new Docker({ socketPath: sock });
const t0 = process.hrtime.bigint();
const exec = await docker
    .getContainer(cid)
    .exec({ Cmd: ['sh', '-c', cmd], AttachStdout: true, AttachStderr: true });
const stream = await exec.start({ hijack: true, stdin: false });
let bytes = 0;
const sink = new Writable({
    write(chunk, _enc, cb) {
        bytes += chunk.length;
        cb();
    },
});
await new Promise((resolve, reject) => {
    docker.modem.demuxStream(stream, sink, sink);
    stream.on('end', resolve);
    stream.on('error', reject);
});
const s = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(`${bytes} ${s}`);
