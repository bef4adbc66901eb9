/*
 * cli.c - the command line every sbxctl verb shares (sbxctl.h): the global
 * options, the verb table main.c hands over (for usage lines, help and
 * completion), messages (warnx_, usage_error, verb_help) and the option
 * parser. Below every verb file and main.c: it never calls up, it reads the
 * table it was given.
 */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbxctl.h"

struct sbxctl_globals g;

/* ---- the verb table ---------------------------------------------------------------- */

static const struct verb *verbs;
static size_t nverbs;
static const struct verb *current;

void cli_set_verbs(const struct verb *table, size_t n)
{
    verbs = table;
    nverbs = n;
}

void cli_set_current(const struct verb *v)
{
    current = v;
}

int verb_count(void)
{
    return (int)nverbs;
}

const char *verb_name(int i)
{
    return verbs[i].name;
}

const char *verb_usage(int i)
{
    return verbs[i].usage;
}

const char *verb_help_text(int i)
{
    return verbs[i].help;
}

void cli_usage_short(FILE *f)
{
    fprintf(f, "usage: sbxctl [-s PATH] [--json] [--version] VERB [ARGS...]\nverbs:");
    for (size_t i = 0; i < nverbs; i++)
        fprintf(f, " %s", verbs[i].name);
    fprintf(f, "\nRun 'sbxctl --help' or 'sbxctl VERB --help' for more.\n");
}

/* ---- messages -------------------------------------------------------------------- */

void warnx_(const char *fmt, ...)
{
    va_list ap;
    fputs("sbxctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void usage_error(const char *fmt, ...)
{
    va_list ap;
    if (current)
        fprintf(stderr, "sbxctl %s: ", current->name);
    else
        fputs("sbxctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (current)
        fprintf(stderr, "usage: sbxctl %s\n", current->usage);
    else
        cli_usage_short(stderr);
    exit(EXIT_USAGE);
}

void verb_help(void)
{
    printf("usage: sbxctl [-s PATH] [--json] %s\n\n%s\n", current->usage, current->help);
    exit(0);
}

/* ---- option parsing ----------------------------------------------------------- */

/*
 * opt_next() is getopt_long(3) under the interface the verb files share
 * (sbxctl.h): short flags bundle (-it, -sPATH, -e K=V), long options take
 * --name=value or --name value, options and positionals mix in order, `--`
 * ends the options. Every verb also has -h/--help, --json and --format.
 * getopt's own messages are off; ours name the verb and show its usage.
 */

#define MAX_OPTS 64
#define LONG_ONLY 0x10000 /* getopt's val for an option without a short letter */

enum { VO_HELP = -100, VO_JSON = -101, VO_FORMAT = -102 };

static const struct opt verb_builtin[] = {
    {"help", 'h', 0, VO_HELP},
    {"json", 0, 0, VO_JSON},
    {"format", 0, 1, VO_FORMAT},
    {NULL, 0, 0, 0},
};

void parser_init(struct parser *p, int argc, char **argv)
{
    memset(p, 0, sizeof(*p));
    p->argc = argc;
    p->argv = argv;
}

struct built {
    struct option lo[MAX_OPTS + 1];
    const struct opt *by_val[MAX_OPTS]; /* long-only entries, by val - LONG_ONLY */
    char so[3 * MAX_OPTS + 4];
    const struct opt *shorts[256];
};

static void build_add(struct built *b, int *n, size_t *sn, const struct opt *o)
{
    if (*n >= MAX_OPTS) {
        warnx_("internal error: too many options");
        abort();
    }
    b->lo[*n].name = o->name;
    b->lo[*n].has_arg = o->has_arg ? required_argument : no_argument;
    b->lo[*n].flag = NULL;
    if (o->shortc) {
        b->lo[*n].val = o->shortc;
        b->shorts[(unsigned char)o->shortc] = o;
        b->so[(*sn)++] = (char)o->shortc;
        if (o->has_arg)
            b->so[(*sn)++] = ':';
    } else {
        b->lo[*n].val = LONG_ONLY + *n;
        b->by_val[*n] = o;
    }
    if (o->name)
        (*n)++;
    else /* a short-only option: no long entry */
        memset(&b->lo[*n], 0, sizeof(b->lo[*n]));
}

static struct built *build(const struct opt *opts)
{
    struct built *b = ctl_nonnull(calloc(1, sizeof(*b)));
    int n = 0;
    size_t sn = 0;
    /* '-': positionals come back in order (as 1); ':': a missing value is ':'. */
    b->so[sn++] = '-';
    b->so[sn++] = ':';
    for (const struct opt *o = opts; o && (o->name || o->shortc); o++)
        build_add(b, &n, &sn, o);
    for (const struct opt *o = verb_builtin; o->name; o++) {
        int taken = 0;
        for (const struct opt *v = opts; v && (v->name || v->shortc); v++)
            taken |= (v->name && !strcmp(v->name, o->name)) ||
                     (o->shortc && v->shortc == o->shortc);
        if (!taken)
            build_add(b, &n, &sn, o);
    }
    b->so[sn] = '\0';
    return b;
}

int cli_set_format(const char *f)
{
    if (!strcmp(f, "json"))
        g.json = 1;
    else if (!strcmp(f, "table"))
        g.json = 0;
    else
        return -1;
    return 0;
}

/* The message for what getopt refused (c is '?' or ':'), as getopt words it. */
static void refused(struct parser *p, int c)
{
    struct built *b = p->priv;
    const char *a = p->gargv[optind - 1];
    if (c == ':') {
        if (optopt && optopt < 256 && a[0] == '-' && a[1] != '-')
            usage_error("option requires an argument -- '%c'", optopt);
        usage_error("option '%s' requires an argument", a);
    }
    if (a[0] == '-' && a[1] == '-') {
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        for (struct option *o = b->lo; o->name; o++)
            if (eq && strlen(o->name) == len && !strncmp(o->name, a + 2, len))
                usage_error("option '--%s' doesn't allow an argument", o->name);
        usage_error("unrecognized option '%.*s'",
                    (int)(eq ? (size_t)(eq - a) : strlen(a)), a);
    }
    usage_error("invalid option -- '%c'", optopt);
}

int opt_next(struct parser *p, const struct opt *opts)
{
    if (!p->priv && p->done)
        return OPT_END; /* called again after the end */
    if (!p->priv) {
        p->priv = build(opts);
        /* getopt wants argv[0] to be the program. */
        p->gargv = ctl_nonnull(calloc((size_t)p->argc + 2, sizeof(char *)));
        p->gargv[0] = (char *)"sbxctl";
        memcpy(p->gargv + 1, p->argv, (size_t)p->argc * sizeof(char *));
        optind = 0; /* a full re-initialisation of GNU getopt */
        p->done = 0;
    }
    struct built *b = p->priv;
    for (;;) {
        if (p->stop || p->done) {
            /* After `--`, or once the verb said so, everything is positional. */
            if (!p->done) {
                p->done = 1;
                p->rest = optind;
            }
            if (p->rest > p->argc) {
                p->i = p->argc;
                /* Done: the tables go (p->arg points into argv, not them). */
                free(p->priv);
                free(p->gargv);
                p->priv = NULL;
                p->gargv = NULL;
                p->stop = 1;
                p->done = 1;
                p->rest = p->argc + 1;
                return OPT_END;
            }
            p->arg = p->gargv[p->rest++];
            p->i = p->rest - 1;
            return OPT_ARG;
        }
        opterr = 0;
        int c = getopt_long(p->argc + 1, p->gargv, b->so, b->lo, NULL);
        p->i = optind - 1;
        if (c == -1) {
            p->done = 1;
            p->rest = optind;
            continue;
        }
        if (c == 1) {
            p->arg = optarg;
            return OPT_ARG;
        }
        if (c == '?' || c == ':')
            refused(p, c);
        const struct opt *o =
            c >= LONG_ONLY ? b->by_val[c - LONG_ONLY] : b->shorts[(unsigned char)c];
        if (!o)
            refused(p, '?');
        p->arg = o->has_arg ? optarg : NULL;
        switch (o->id) {
        case VO_HELP:
            return OPT_HELP;
        case VO_JSON:
            g.json = 1;
            continue;
        case VO_FORMAT:
            if (cli_set_format(p->arg) < 0)
                usage_error("--format: 'json' or 'table', not '%s'", p->arg);
            continue;
        }
        return o->id;
    }
}
