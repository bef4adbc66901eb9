/*
 * modal_fstar.c - tar archives (fs.read/fs.write with `format: "tar"`,
 * PROTOCOL.md "Archives") on Modal. Modal's filesystem tool has no archive
 * command, so an archive is one exec of /bin/sh with a script below that
 * runs the image's GNU tar (Debian's, as in Modal's default image), on the
 * router like the tool's execs; modal_fs.c drives it: a read streams tar's
 * stdout by offset, a chunk per call (the call is the credit), a write feeds
 * its stdin by offset, a chunk per call, EOF on the commit.
 *
 * docker cp's rules, sandbox side:
 * - get: `path` archived with its top entry named after its base name (or
 *   `name`), links below it as links, hard links as separate files, owners
 *   as numbers; `follow` resolves `path` itself first (docker cp -L).
 * - put: extracted into a fresh hidden directory beside the entries
 *   (`PATH/.sbx-tar-XXXXXX`), as the exec's user (the command user: its
 *   owner, never the archive's), with the archive's modes and mtimes. Only a
 *   clean extraction is moved into PATH: each top entry renamed into place,
 *   directories that exist on both sides merged entry by entry; so a refused
 *   or broken archive leaves nothing. Refused: absolute names and `..`
 *   (GNU tar strips or skips them and says so; the script refuses on its
 *   words), a link or a file on the way to a directory entry (ENOTDIR), a
 *   directory where a file goes (EISDIR); the merge never writes through a
 *   link (mv -T replaces one). tar reads past zero blocks (-i) to EOF, so
 *   an abort's bad block (modal_fstar_poison) fails it wherever it lands;
 *   what follows an archive's end blocks must be zeros.
 * A refusal is one line "sbxd-tar: ERRNO: text" on stderr and exit 3;
 * tar's own failure is its stderr, read for an errno by its words
 * (modal_fs_mv_error). The scripts take paths as ./PATH from the exec's
 * workdir / (so they also run in the fake, whose sandboxes are folders).
 *
 * Each script's $0 is "sbxd-<tag>" and stays in its shell's argv while tar
 * runs (tar is never exec'd in its place: "exit $?" follows it), so an
 * archive its client abandons is ended by that tag (modal_kill.c): a get's
 * whole tree is killed, a put's tar is terminated, so that its script
 * still removes what it extracted.
 *
 * The entries an answer counts are counted here from the archive's headers
 * as its bytes pass (the client's stream or tar's output: untrusted, only
 * counted, never trusted for sizes of anything sbxd keeps).
 */
#include <string.h>

#include "core/fs.h"
#include "providers/modal/modal_int.h"
#include "xalloc.h"

static const char TAR_GET[] =
    "p=.$1 x=$2\n"
    "e() { echo \"sbxd-tar: $1: $2\" >&2; exit 3; }\n"
    "[ -e \"$p\" ] || [ -L \"$p\" ] || e ENOENT 'No such file or directory'\n"
    "if [ \"$3\" = 1 ] && [ -L \"$p\" ]; then\n"
    "  p=$(readlink -f -- \"$p\") && [ -e \"$p\" ] || e ENOENT 'No such file or directory'\n"
    "fi\n"
    "while :; do case $p in ?*/) p=${p%/} ;; *) break ;; esac; done\n"
    "case $p in */*) d=${p%/*} b=${p##*/} ;; *) d=. b=$p ;; esac\n"
    "[ -n \"$d\" ] || d=/\n"
    "export LC_ALL=C\n"
    "tar -c -f - --hard-dereference --numeric-owner ${x:+\"--transform=$x\"} "
    "-C \"$d\" -- \"$b\"\n"
    "exit $?\n";

static const char TAR_PUT[] =
    "d=.$1\n"
    "e() { echo \"sbxd-tar: $1: $2\" >&2; exit 3; }\n"
    "[ -e \"$d\" ] || e ENOENT 'No such file or directory'\n"
    "[ -d \"$d\" ] || e ENOTDIR 'Not a directory'\n"
    "t=$(mktemp -d \"$d/.sbx-tar-XXXXXX\") || exit 4\n"
    "export LC_ALL=C\n"
    "tar -x -i -f - -C \"$t\" -p --no-same-owner 2>\"$t.err\"\n"
    "r=$?\n"
    "m=$(grep -m 1 -e 'Removing leading' -e \"contains '[.][.]'\" \"$t.err\")\n"
    "if [ -n \"$m\" ]; then rm -rf -- \"$t\" \"$t.err\"\n"
    "  e EPERM \"outside the target directory ($m)\"; fi\n"
    "if [ $r -ne 0 ]; then head -c 4096 \"$t.err\" >&2; rm -rf -- \"$t\" \"$t.err\"; exit 2; fi\n"
    "rm -f -- \"$t.err\"\n"
    "isdir() { [ -d \"$1\" ] && [ ! -L \"$1\" ]; }\n"
    /* chk SRC DST: what the merge would refuse, before anything moves */
    "chk() { local s o; for s in \"$1\"/* \"$1\"/.[!.]* \"$1\"/..?*; do\n"
    "  [ -e \"$s\" ] || [ -L \"$s\" ] || continue\n"
    "  o=$2/${s##*/}\n"
    "  if isdir \"$s\"; then\n"
    "    if isdir \"$o\"; then chk \"$s\" \"$o\" || return 1\n"
    "    elif [ -e \"$o\" ] || [ -L \"$o\" ]; then\n"
    "      echo \"sbxd-tar: ENOTDIR: ${o#.}: Not a directory\" >&2; return 1; fi\n"
    "  elif isdir \"$o\"; then echo \"sbxd-tar: EISDIR: ${o#.}: Is a directory\" >&2; return 1\n"
    "  fi; done; }\n"
    /* mrg SRC DST: renames into place, directories on both sides merged */
    "mrg() { local s o; for s in \"$1\"/* \"$1\"/.[!.]* \"$1\"/..?*; do\n"
    "  [ -e \"$s\" ] || [ -L \"$s\" ] || continue\n"
    "  o=$2/${s##*/}\n"
    "  if isdir \"$s\" && isdir \"$o\"; then mrg \"$s\" \"$o\" || return 1\n"
    "    touch -r \"$s\" -- \"$o\" 2>/dev/null\n"
    "  else mv -f -T -- \"$s\" \"$o\" || return 1; fi; done; }\n"
    "chk \"$t\" \"$d\" || { rm -rf -- \"$t\"; exit 3; }\n"
    "mrg \"$t\" \"$d\" || { rm -rf -- \"$t\"; exit 4; }\n"
    "rm -rf -- \"$t\"\n";

int modal_fstar_is(const struct fs_call *fc)
{
    const char *f = json_string_value(json_object_get(fc->args, "format"));
    return f && !strcmp(f, "tar");
}

/* GNU tar's --transform that names the top entry `name` (its replacement
 * escaped: \ & and the | delimiter). The first component is matched whatever
 * it is, so the path's own name needs no escaping; symlink targets are left
 * alone (S). */
static char *top_transform(const char *name)
{
    size_t n = strlen(name);
    char *x = xmalloc(2 * n + 16), *o = x;
    memcpy(o, "s|^[^/]*|", 9);
    o += 9;
    for (size_t i = 0; i < n; i++) {
        if (name[i] == '\\' || name[i] == '&' || name[i] == '|')
            *o++ = '\\';
        *o++ = name[i];
    }
    memcpy(o, "|rhS", 5);
    return x;
}

/* The base name of an absolute path into out ("" for "/"). */
static void base_of(const char *p, char *out, size_t cap)
{
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        n--;
    const char *sl = memrchr(p, '/', n);
    const char *b = sl ? sl + 1 : p;
    snprintf(out, cap, "%.*s", (int)(n - (size_t)(b - p)), b);
}

char **modal_fstar_argv(struct fs_call *fc, const char *argv0, size_t *n_out)
{
    json_t *a = fc->args;
    const char *p = json_string_value(json_object_get(a, "path"));
    if (!p || p[0] != '/')
        return NULL;
    char **argv = xcalloc(7, sizeof(*argv));
    argv[0] = xstrdup("/bin/sh");
    argv[1] = xstrdup("-c");
    argv[3] = xstrdup(argv0);
    argv[4] = xstrdup(p);
    if (fc->op == FS_OP_WRITE) {
        argv[2] = xstrdup(TAR_PUT);
        *n_out = 5;
        return argv;
    }
    /* The top entry is named after path (or `name`), also when follow
     * resolved path to a target of another name. */
    char base[4096];
    const char *name = json_string_value(json_object_get(a, "name"));
    base_of(p, base, sizeof(base));
    if (!name || !name[0])
        name = base;
    argv[2] = xstrdup(TAR_GET);
    argv[5] = name[0] ? top_transform(name) : xstrdup("");
    argv[6] = xstrdup(json_is_true(json_object_get(a, "follow")) ? "1" : "0");
    *n_out = 7;
    return argv;
}

const uint8_t *modal_fstar_poison(size_t *n_out)
{
    /* A block whose checksum cannot match, then EOF: tar fails whatever it
     * was in the middle of, so the script removes what it extracted. */
    static uint8_t block[1024];
    if (!block[0])
        memset(block, 0xff, sizeof(block));
    *n_out = sizeof(block);
    return block;
}

/* ---- counting entries ---------------------------------------------------------- */

static uint64_t octal(const uint8_t *f, size_t n)
{
    uint64_t v = 0;
    if (f[0] & 0x80) {
        /* base-256 (GNU, sizes of 8 GiB and more): the low 8 bytes */
        for (size_t i = n > 8 ? n - 8 : 1; i < n; i++)
            v = v << 8 | f[i];
        return v;
    }
    for (size_t i = 0; i < n && f[i]; i++) {
        if (f[i] == ' ')
            continue;
        if (f[i] < '0' || f[i] > '7')
            break;
        v = v << 3 | (uint64_t)(f[i] - '0');
    }
    return v;
}

static void header(struct mtar_count *c)
{
    const uint8_t *h = c->hdr;
    int zero = 1;
    for (size_t i = 0; i < 512 && zero; i++)
        zero = !h[i];
    if (zero)
        return;
    uint8_t type = h[156];
    uint64_t size = octal(h + 124, 12);
    /* links, devices, fifos and directories have no data */
    if (type >= '1' && type <= '6')
        size = 0;
    c->skip = (size + 511) / 512 * 512;
    /* PAX records and GNU long names describe the entry that follows */
    if (type != 'x' && type != 'g' && type != 'L' && type != 'K')
        c->entries++;
}

void modal_fstar_count(struct mtar_count *c, const uint8_t *d, size_t n)
{
    while (n) {
        if (c->skip) {
            size_t k = c->skip < n ? (size_t)c->skip : n;
            c->skip -= k;
            d += k;
            n -= k;
            continue;
        }
        size_t k = 512 - c->hlen < n ? 512 - c->hlen : n;
        memcpy(c->hdr + c->hlen, d, k);
        c->hlen += k;
        d += k;
        n -= k;
        if (c->hlen == 512) {
            c->hlen = 0;
            header(c);
        }
    }
}
