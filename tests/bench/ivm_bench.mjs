// ivm_bench.mjs DIR - the peer of the js provider, measured in the same run:
// isolated-vm (V8 isolates, in-process) from DIR/node_modules. Prints one
// line "IVM ctx_ms loop_ms": p50 of a new isolate + context + eval('1+1') +
// dispose, and the median of a 1e7 loop inside a function timed inside the
// isolate (as js_bench times it inside JavaScriptCore).
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(path.join(path.resolve(process.argv[2]), 'x.js'));
const ivm = require('isolated-vm');
const quick = process.argv[3] === 'quick';

const ctxTimes = [];
for (let i = 0; i < (quick ? 50 : 300); i++) {
    const t = performance.now();
    const iso = new ivm.Isolate({ memoryLimit: 128 });
    const ctx = await iso.createContext();
    await ctx.eval('1+1');
    iso.dispose();
    ctxTimes.push(performance.now() - t);
}
const loops = [];
for (let i = 0; i < (quick ? 3 : 7); i++) {
    const iso = new ivm.Isolate({ memoryLimit: 128 });
    const ctx = await iso.createContext();
    loops.push(await ctx.eval(
        'function f() { let s = 0; for (let i = 0; i < 1e7; i++) s += i; return s }\n' +
        'const t = Date.now(); f(); Date.now() - t'));
    iso.dispose();
}
const median = (a) => a.sort((x, y) => x - y)[Math.floor((a.length - 1) / 2)];
console.log(`IVM ${median(ctxTimes).toFixed(3)} ${median(loops)}`);
