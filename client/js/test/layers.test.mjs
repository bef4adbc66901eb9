// The package's modules are floors (issue 22): no file in src/ imports, directly
// or through others, a file that imports it. Read from the sources, so a new
// circle fails here before anyone trips on a half-initialised module.
import { readdirSync, readFileSync } from 'node:fs';
import assert from 'node:assert/strict';
import { test, group } from './harness.mjs';

const SRC = new URL('../src/', import.meta.url);

/** file -> the package files it imports (type-only imports included: they are still a dependency). */
function importGraph() {
    const g = new Map();
    for (const f of readdirSync(SRC).filter((n) => n.endsWith('.ts'))) {
        const text = readFileSync(new URL(f, SRC), 'utf8');
        const deps = new Set();
        for (const m of text.matchAll(/^\s*(?:import|export)\b[^;]*?from\s+'\.\/([\w.-]+)\.js'/gms)) deps.add(`${m[1]}.ts`);
        g.set(f, deps);
    }
    return g;
}

/** A cycle as a list of files, or null. */
function findCycle(g) {
    const state = new Map(); // 1 on the path, 2 done
    const path = [];
    const visit = (f) => {
        if (state.get(f) === 2) return null;
        if (state.get(f) === 1) return [...path.slice(path.indexOf(f)), f];
        state.set(f, 1);
        path.push(f);
        for (const d of g.get(f) ?? []) {
            const c = visit(d);
            if (c) return c;
        }
        path.pop();
        state.set(f, 2);
        return null;
    };
    for (const f of g.keys()) {
        const c = visit(f);
        if (c) return c;
    }
    return null;
}

group('layers', () => {
    test('no module of src/ imports back a module that imports it', () => {
        const g = importGraph();
        assert.ok(g.size >= 10, `read ${g.size} modules`);
        assert.ok(g.get('client.ts').has('files.ts'), 'the graph sees client.ts -> files.ts');
        assert.equal(findCycle(g), null);
    });
    test('files.ts and files_raw.ts sit below client.ts', () => {
        const g = importGraph();
        for (const f of ['files.ts', 'files_raw.ts']) assert.ok(!g.get(f).has('client.ts'), `${f} imports client.ts`);
    });
    test('the tar reader is a floor of its own, the extractor above it, both below files.ts', () => {
        const g = importGraph();
        assert.deepEqual([...g.get('tar_read.ts')], [], 'tar_read.ts imports no package module');
        assert.deepEqual([...g.get('tar_extract.ts')], ['tar_read.ts']);
        assert.ok(g.get('files.ts').has('tar_extract.ts'));
    });
});
