/*
 * entry.js - bundled by esbuild into $(B)/gen/strip.js, which the js worker
 * embeds and evaluates in a context of its own. sbxStrip(source) removes
 * TypeScript syntax (annotations, interfaces, type aliases, generics, `as`,
 * `satisfies`, `!`, optional parameters) and keeps line numbers; it throws a
 * SyntaxError for a program that does not parse.
 */
import { transform } from 'sucrase';

/* head: the length of the wrapper the worker put in front of line 1, taken
 * off the column that an error on line 1 reports. */
globalThis.sbxStrip = function sbxStrip(source, head) {
    try {
        return transform(source, {
            transforms: ['typescript'],
            disableESTransforms: true,
            preserveDynamicImport: true,
        }).code;
    } catch (e) {
        let msg = e && e.message ? String(e.message) : String(e);
        let where = '';
        const m = /\((\d+):(\d+)\)$/.exec(msg);
        if (m) {
            const line = +m[1];
            const col = line === 1 ? Math.max(0, +m[2] - head) : +m[2];
            msg = msg.slice(0, m.index) + `(${line}:${col})`;
            where = `program:${line}:${col}`;
        }
        const s = new SyntaxError(msg);
        s.stack = where;
        throw s;
    }
};
