// A small test runner: each test prints "ok - NAME", "FAILED - NAME: why" or
// "SKIPPED - NAME (why)"; run() prints "N passed, N failed, N skipped" last, the
// line tests/run.sh adds up.
const tests = [];
let current = 'top';

/** test(name, fn, {skip: reason, timeout: ms}) */
export function test(name, fn, opts = {}) {
    tests.push({ name: `${current}: ${name}`, fn, ...opts });
}
/** Tests registered inside body get the group's name as a prefix; skip skips them all. */
export function group(name, body, { skip } = {}) {
    const prev = current;
    current = name;
    const at = tests.length;
    body();
    if (skip) for (let i = at; i < tests.length; i++) tests[i].skip ??= skip;
    current = prev;
}

export async function run() {
    let passed = 0, failed = 0, skipped = 0;
    const only = process.env.SBXD_JS_TEST_ONLY;
    for (const t of tests) {
        if (only && !new RegExp(only).test(t.name)) continue;
        if (t.skip) {
            skipped++;
            console.log(`SKIPPED - ${t.name} (${t.skip})`);
            continue;
        }
        const ms = t.timeout ?? 60000;
        let timer;
        const started = Date.now();
        try {
            await Promise.race([
                Promise.resolve().then(t.fn),
                new Promise((_, rej) => (timer = setTimeout(() => rej(new Error(`timed out after ${ms} ms`)), ms))),
            ]);
            passed++;
            console.log(`ok - ${t.name} (${Date.now() - started} ms)`);
        } catch (e) {
            failed++;
            console.log(`FAILED - ${t.name}: ${e?.stack ?? e}`);
        } finally {
            clearTimeout(timer);
        }
    }
    console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
    return failed;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls cond() every 20 ms until it is truthy or ms pass; returns its last value. */
export async function until(cond, ms = 10000) {
    const end = Date.now() + ms;
    for (;;) {
        const v = await cond();
        if (v || Date.now() > end) return v;
        await sleep(20);
    }
}
