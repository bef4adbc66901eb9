/*
 * prelude.js - evaluated once in every global the js worker creates, before
 * any program. It is a function expression: the worker calls it with its
 * three native primitives, which stay in this closure and are reachable from
 * no global. Returns {console, tools, start, describe, globals, restore}.
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
 */
(function (out, call, done, head, keep) {
    'use strict';
    const G = globalThis;
    const stringify = JSON.stringify;
    const isArray = Array.isArray;
    const keys = Object.keys;
    const defineProperty = Object.defineProperty;
    const StringC = String;
    const TypeErrorC = TypeError;
    const SetC = Set;
    const setHas = Set.prototype.has, setAdd = Set.prototype.add, setDelete = Set.prototype.delete;
    const apply = Reflect.apply;
    const then = Promise.prototype.then;
    const PromiseC = Promise;

    /* Throws a TypeError naming the first part of v that JSON cannot carry. */
    function check(v, what, path, seen) {
        switch (typeof v) {
        case 'function':
        case 'symbol':
        case 'bigint':
            throw new TypeErrorC(`${what} is not JSON-serializable: ${path} is a ${typeof v}`);
        case 'object':
            if (v === null)
                return;
            if (apply(setHas, seen, [v]))
                throw new TypeErrorC(`${what} is not JSON-serializable: ${path} is a cycle`);
            apply(setAdd, seen, [v]);
            if (typeof v.toJSON !== 'function') {
                if (isArray(v)) {
                    for (let i = 0; i < v.length; i++)
                        check(v[i] === undefined ? null : v[i], what, `${path}[${i}]`, seen);
                } else {
                    for (const k of keys(v))
                        if (v[k] !== undefined)
                            check(v[k], what, `${path}.${k}`, seen);
                }
            }
            apply(setDelete, seen, [v]);
        }
    }

    function toJson(v, what) {
        check(v, what, what === 'the return value' ? 'it' : 'args', new SetC());
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

    /* Written out rather than made in a loop over [name, stream] pairs, and
     * put on the global by the worker (a non-enumerable property set from C):
     * the loop and defineProperty on the global cost 30 us of every fresh
     * global, this 8 (issue 21, measured in-process). */
    const console = {
        log(...args) { out(0, line(args)); },
        info(...args) { out(0, line(args)); },
        debug(...args) { out(0, line(args)); },
        trace(...args) { out(0, line(args)); },
        warn(...args) { out(1, line(args)); },
        error(...args) { out(1, line(args)); },
    };

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

    const builtin = keep ? new SetC(Object.getOwnPropertyNames(G)) : null;
    if (builtin)
        apply(setAdd, builtin, ['console']);

    return {
        console, /* the worker makes it globalThis.console */
        /* tools: [[globalName, toolId], ...] */
        tools(list) {
            for (const [gname, id] of list) {
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
        },
        start(main) {
            let p;
            try {
                p = main.call(G);
            } catch (e) {
                done(false, describe(e));
                return;
            }
            apply(then, p, [v => {
                let text;
                try {
                    text = v === undefined ? undefined : toJson(v, 'the return value');
                } catch (e) {
                    done(false, describe(e));
                    return;
                }
                done(true, text);
            }, e => done(false, describe(e))]);
        },
        describe,
        /* the JSON-serializable own enumerable globals not in `builtin` */
        globals() {
            if (!builtin)
                throw new TypeErrorC('not a persistent global');
            const o = {};
            for (const k of keys(G)) {
                if (apply(setHas, builtin, [k]))
                    continue;
                try {
                    const v = G[k];
                    if (v === undefined || typeof v === 'function')
                        continue;
                    check(v, 'global', k, new SetC());
                    o[k] = v;
                } catch (e) {
                    /* not serializable: left out */
                }
            }
            return stringify(o);
        },
        restore(text) {
            if (!builtin)
                throw new TypeErrorC('not a persistent global');
            const o = JSON.parse(text);
            for (const k of keys(o))
                if (!apply(setHas, builtin, [k]) && k !== '__proto__')
                    G[k] = o[k];
        },
    };
})
