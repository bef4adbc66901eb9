// The client's method, param, notification and error-code lists against
// proto/PROTOCOL.md, so the two cannot drift apart.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { group, test } from './harness.mjs';
import {
    METHOD_PARAMS,
    NOTIFICATION_PARAMS,
    TOOL_CALL_PARAMS,
    ErrorCode,
    CLIENT_METHODS,
    SbxdClient,
} from '../dist/index.js';

const mdPath = process.env.SBXD_PROTOCOL_MD ?? new URL('../../../proto/PROTOCOL.md', import.meta.url).pathname;
const md = readFileSync(mdPath, 'utf8');

/** `{a, b?, c | d, e: "x"|"y"}` -> [a, b, c, d, e] */
export function braceNames(inner) {
    const out = [];
    for (let part of inner.split(',')) {
        part = part.replace(/:.*$/s, '');
        for (let n of part.split('|')) {
            n = n.replace(/["?…\s]/g, '');
            if (/^[a-z_][a-z0-9_]*$/i.test(n)) out.push(n);
        }
    }
    return out;
}

export function specMethods(text) {
    const methods = {};
    const lines = text.split('\n');
    for (let i = 0; i < lines.length; i++) {
        const m = /^### ([a-z]+\.[a-z_]+)(.*)$/.exec(lines[i]);
        if (!m) continue;
        const [, name, rest] = m;
        const brace = /`\{([^}]*)\}`/.exec(rest);
        if (/same params/.test(rest)) {
            methods[name] = { sameAs: 'process.exec' };
        } else if (brace && rest.indexOf(brace[0]) < (rest.indexOf('→') < 0 ? Infinity : rest.indexOf('→'))) {
            methods[name] = braceNames(brace[1]);
        } else {
            // a `| param | type | meaning |` table before the next heading
            const names = [];
            for (let j = i + 1; j < lines.length && !/^##/.test(lines[j]); j++) {
                const row = /^\| ([^|]+) \|/.exec(lines[j]);
                if (!row || /^(param|---)/.test(row[1].trim()) || /^-+$/.test(row[1].trim())) continue;
                for (const n of row[1].split(',')) names.push(n.trim());
            }
            methods[name] = names;
        }
    }
    for (const [k, v] of Object.entries(methods)) if (v.sameAs) methods[k] = methods[v.sameAs];
    return methods;
}

export function specNotifications(text) {
    const sec = text.split(/^## Notifications$/m)[1]?.split(/^## /m)[0] ?? '';
    const out = {};
    for (const m of sec.matchAll(/^- `([a-z]+\.[a-z_]+)` `\{([^}]*)\}`/gm)) out[m[1]] = braceNames(m[2]);
    return out;
}

const sorted = (a) => [...a].sort();

group('protocol', () => {
    test('every method in PROTOCOL.md has a typed client method, and no other', () => {
        const spec = specMethods(md);
        assert.ok(Object.keys(spec).length >= 20, 'the parser found the methods');
        assert.deepEqual(sorted(Object.keys(METHOD_PARAMS)), sorted(Object.keys(spec)));
        assert.deepEqual(sorted(Object.keys(CLIENT_METHODS)), sorted(Object.keys(spec)));
        for (const [m, fn] of Object.entries(CLIENT_METHODS))
            assert.equal(typeof SbxdClient.prototype[fn], 'function', `${m} -> SbxdClient.${fn}`);
    });
    test('every method takes exactly the params PROTOCOL.md lists', () => {
        const spec = specMethods(md);
        for (const [m, params] of Object.entries(spec))
            assert.deepEqual(sorted(METHOD_PARAMS[m] ?? []), sorted(params), `params of ${m}`);
    });
    test('every notification and its fields match PROTOCOL.md', () => {
        const spec = specNotifications(md);
        assert.ok(Object.keys(spec).length >= 4, 'the parser found the notifications');
        assert.deepEqual(sorted(Object.keys(NOTIFICATION_PARAMS)), sorted(Object.keys(spec)));
        for (const [n, f] of Object.entries(spec)) assert.deepEqual(sorted(NOTIFICATION_PARAMS[n]), sorted(f), n);
    });
    test('tool.call params match PROTOCOL.md', () => {
        const m = /"method":"tool\.call","params":\{([^}]*)\}/.exec(md);
        assert.ok(m, 'PROTOCOL.md shows a tool.call request');
        assert.deepEqual(sorted(TOOL_CALL_PARAMS), sorted(braceNames(m[1])));
    });
    test('error codes match the table in PROTOCOL.md', () => {
        const codes = [...md.matchAll(/^\| (-32\d\d\d) \|/gm)].map((m) => Number(m[1]));
        assert.ok(codes.length >= 15);
        assert.deepEqual(sorted(Object.values(ErrorCode)), sorted(codes));
    });
    test('the drift check notices a param added to the spec', () => {
        const changed = md.replace('### process.list `{sandbox}`', '### process.list `{sandbox, brand_new?}`');
        assert.notDeepEqual(sorted(METHOD_PARAMS['process.list']), sorted(specMethods(changed)['process.list']));
    });
});
