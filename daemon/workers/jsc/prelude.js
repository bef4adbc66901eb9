/*
 * prelude.js - evaluated once in every global the js worker creates, before
 * any program. It is a function expression: the worker calls it with its
 * three native primitives, which stay in this closure and are reachable from
 * no global. Returns one function, api(op, arg, arg2), so that a fresh global
 * pays for one closure and no object shape (issue 21: each object literal is
 * new shapes in each new global):
 *
 *   api(0, main, isAsync)
 *                   start: runs the wrapped program (isAsync: the async
 *                   wrapper), reports through done at once when a plain one
 *                   returns a primitive, else when what it returned settles
 *   api(1, e)       describe: {name, message, stack} of a thrown value
 *   api(2, list)    tools: [[globalName, toolId], ...] become globals
 *   api(3)          globals: JSON of the persistent global's own data
 *   api(4, text)    restore: the inverse of 3
 *   api(5)          console: the object the worker makes globalThis.console
 *
 *   out(stream, line)      console line: 0 stdout, 1 stderr
 *   call(name, argsJson)   a Promise settled by the tool's answer
 *   done(ok, value)        the run ended: ok=true, value = JSON text or
 *                          undefined; ok=false, value = {name, message, stack}
 *   head                   characters the worker's wrapper adds before the
 *                          program's line 1 (taken off reported columns)
 *   keep                   a persistent global: globals() and restore() are
 *                          wanted, so the names of the built-in globals are
 *                          taken now (enumerating the global object makes JSC
 *                          create every lazily built global: a third of a
 *                          fresh global's cost, wasted on a one-run global)
 *
 * Everything the JSON boundary uses is taken here, before the program runs
 * (start calls the program last), so a program that replaces JSON.stringify,
 * Object.keys or Promise.prototype.then still gets its own result reported.
 * Set and Reflect are not used: the first use of either in a global builds
 * it, which one-run globals would pay for on every run.
 *
 * The worker drops every comment that starts its line and every line's
 * indentation before the engine sees this text (jsw_engine.c, prelude_text):
 * no line of a string or template here may start with a comment's opening or
 * depend on its leading blanks.
 */
(function (out, call, done, head, keep) {
    'use strict';
    const G = globalThis;
    const stringify = JSON.stringify;
    const isArray = Array.isArray;
    const keys = Object.keys;
    const StringC = String;
    const TypeErrorC = TypeError;

    /* Throws a TypeError naming the first part of v that JSON cannot carry.
     * seen[0..depth) are v's ancestors: a cycle is v among them (a scan, as
     * JSON nests only as deep as the stack lets check recurse). */
    function check(v, what, path, seen, depth) {
        switch (typeof v) {
        case 'function':
        case 'symbol':
        case 'bigint':
            throw new TypeErrorC(`${what} is not JSON-serializable: ${path} is a ${typeof v}`);
        case 'object':
            if (v === null)
                return;
            for (let i = 0; i < depth; i++)
                if (seen[i] === v)
                    throw new TypeErrorC(`${what} is not JSON-serializable: ${path} is a cycle`);
            seen[depth] = v;
            if (typeof v.toJSON !== 'function') {
                if (isArray(v)) {
                    for (let i = 0; i < v.length; i++)
                        check(v[i] === undefined ? null : v[i], what, `${path}[${i}]`, seen,
                              depth + 1);
                } else {
                    const ks = keys(v);
                    for (let i = 0; i < ks.length; i++) {
                        const k = ks[i];
                        if (v[k] !== undefined)
                            check(v[k], what, `${path}.${k}`, seen, depth + 1);
                    }
                }
            }
        }
    }

    /* Primitives need no walk: JSON carries every one check lets through. */
    function toJson(v, what) {
        if (typeof v === 'object' || typeof v === 'function' || typeof v === 'symbol' ||
            typeof v === 'bigint')
            check(v, what, what === 'the return value' ? 'it' : 'args', [], 0);
        return stringify(v);
    }

    function fmt(v) {
        switch (typeof v) {
        case 'string': return v;
        case 'undefined': return 'undefined';
        case 'bigint': return `${v}n`;
        case 'symbol': return v.toString();
        case 'function': return `[Function: ${v.name || '(anonymous)'}]`;
        case 'object':
            if (v === null)
                return 'null';
            if (v instanceof Error)
                return v.stack ? `${v.name}: ${v.message}\n${v.stack}` : `${v.name}: ${v.message}`;
            try {
                const s = stringify(v);
                if (s !== undefined)
                    return s;
            } catch (e) {
                /* cycles, BigInt inside, a throwing toJSON */
            }
            try { return StringC(v); } catch (e) { return '[object]'; }
        default:
            return StringC(v);
        }
    }

    function line(args) {
        let s = '';
        for (let i = 0; i < args.length; i++)
            s += (i ? ' ' : '') + fmt(args[i]);
        return s;
    }

    /* Written out rather than made in a loop over [name, stream] pairs: the
     * loop cost 30 us of every fresh global, this 8 (issue 21, measured
     * in-process). */
    function makeConsole() {
        return {
            log(...args) { out(0, line(args)); },
            info(...args) { out(0, line(args)); },
            debug(...args) { out(0, line(args)); },
            trace(...args) { out(0, line(args)); },
            warn(...args) { out(1, line(args)); },
            error(...args) { out(1, line(args)); },
        };
    }

    function describe(e) {
        let name = 'Error', message = '', stack = '';
        try {
            if (e !== null && (typeof e === 'object' || typeof e === 'function')) {
                name = StringC(e.name === undefined ? 'Error' : e.name);
                message = StringC(e.message === undefined ? '' : e.message);
                stack = e.stack === undefined ? '' : StringC(e.stack);
                /* JSC's "fn@url:line:col" frames in the usual "Name: message /
                 * at fn (url:line:col)" shape; the prelude's own frames say
                 * nothing about the program. */
                const frames = stack.split('\n').filter(l => l && l.indexOf('@prelude:') < 0);
                stack = `${name}: ${message}`;
                for (const l of frames) {
                    const at = l.lastIndexOf('@');
                    let loc = at < 0 ? l : l.slice(at + 1);
                    const m = /^program:1:(\d+)$/.exec(loc);
                    if (m)
                        loc = `program:1:${Math.max(1, +m[1] - head)}`;
                    stack += at < 0 ? `\n    at ${loc}`
                                    : `\n    at ${l.slice(0, at) || '<anonymous>'} (${loc})`;
                }
            } else {
                message = StringC(e);
            }
        } catch (x) {
            message = '(the thrown value could not be described)';
        }
        return {name, message, stack};
    }

    /* The promise's own then, taken now: a program that replaces
     * Promise.prototype.then still ends. Bound, not through Reflect.apply:
     * a global's first use of Reflect builds it (issue 21, measured
     * in-process: bound 1.07 M instructions per run, Reflect.apply 1.24 M,
     * an async start with await 1.13 M). */
    const thenOf = Function.prototype.call.bind(Promise.prototype.then);

    function settled(v) {
        let text;
        try {
            text = v === undefined ? undefined : toJson(v, 'the return value');
        } catch (e) {
            done(false, describe(e));
            return;
        }
        done(true, text);
    }

    function failed(e) {
        done(false, describe(e));
    }

    /* A program without await is a plain function (jsw_engine.c): what it
     * returns is followed as an async function's return value would be. */
    async function adopt(v) {
        return v;
    }

    /* isAsync: main is the async wrapper, v the engine's own promise,
     * followed through the then taken above (a program that replaced
     * Promise.prototype.then still ends). */
    function start(main, isAsync) {
        let v;
        try {
            v = main.call(G);
        } catch (e) {
            failed(e);
            return;
        }
        if (!isAsync && (v === null || (typeof v !== 'object' && typeof v !== 'function'))) {
            settled(v);
            return;
        }
        /* then reads the promise's constructor, which the program may have
         * made throw: that is its failure, not a run left without an end */
        try {
            thenOf(isAsync ? v : adopt(v), settled, failed);
        } catch (e) {
            failed(e);
        }
    }

    /* Indexed loops here and in check, not for-of: a fresh global's first
     * for-of builds the array iterator's code (issue 21: a run with one tool
     * call cost 1.5x a plain run's instructions), and the program may have
     * replaced Array.prototype[Symbol.iterator]. */
    function tools(list) {
        const defineProperty = Object.defineProperty, PromiseC = Promise;
        for (let i = 0; i < list.length; i++) {
            const gname = list[i][0], id = list[i][1];
            const f = function (args) {
                let text;
                try {
                    text = args === undefined ? 'null' : toJson(args, `arguments of ${gname}`);
                } catch (e) {
                    return PromiseC.reject(e);
                }
                return call(id, text);
            };
            defineProperty(f, 'name', {value: gname});
            defineProperty(G, gname, {value: f, writable: true, configurable: true, enumerable: false});
        }
    }

    /* Only a persistent global pays for Set and Reflect. */
    const builtin = keep ? new Set(Object.getOwnPropertyNames(G)) : null;
    const setHas = keep ? Set.prototype.has : null, apply = keep ? Reflect.apply : null;
    const isBuiltin = k => apply(setHas, builtin, [k]);
    if (builtin)
        builtin.add('console');

    /* the JSON-serializable own enumerable globals not in `builtin` */
    function globals() {
        if (!builtin)
            throw new TypeErrorC('not a persistent global');
        const o = {};
        for (const k of keys(G)) {
            if (isBuiltin(k))
                continue;
            try {
                const v = G[k];
                if (v === undefined || typeof v === 'function')
                    continue;
                check(v, 'global', k, [], 0);
                o[k] = v;
            } catch (e) {
                /* not serializable: left out */
            }
        }
        return stringify(o);
    }

    function restore(text) {
        if (!builtin)
            throw new TypeErrorC('not a persistent global');
        const o = JSON.parse(text);
        for (const k of keys(o))
            if (!isBuiltin(k) && k !== '__proto__')
                G[k] = o[k];
    }

    return function api(op, arg, arg2) {
        switch (op) {
        case 0: return start(arg, arg2);
        case 1: return describe(arg);
        case 2: return tools(arg);
        case 3: return globals();
        case 4: return restore(arg);
        default: return makeConsole();
        }
    };
})
