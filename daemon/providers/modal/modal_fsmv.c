/*
 * modal_fsmv.c - fs.rename on Modal. Modal's filesystem tool has no rename
 * or move command (npm modal 0.11.1: ReadFile, WriteFile, ListFiles, Stat,
 * MakeDirectory, Remove, Watch), so fs.rename is one exec of /bin/sh with
 * the script below, on the router like the tool's execs (modal_fs.c runs
 * it). The script gives rename(2)'s answers, as Docker's agent does with
 * rename(2) and renameat2(RENAME_NOREPLACE): it checks what rename(2) would
 * refuse (ENOENT, ENOTDIR, EISDIR, ENOTEMPTY, EINVAL, EXDEV, and EEXIST when
 * overwrite is false) and only then runs `mv`, which alone would move into
 * an existing directory or copy across file systems. The checks and the
 * mv are not one atomic step as rename(2) is: a path changed in between by
 * someone else may get mv's own answer instead.
 *
 * Paths go in as ./PATH from the exec's workdir / (so the same script also
 * works in the fake, whose sandboxes are folders); a refusal is one line
 * "sbxd-mv: ERRNO: text" on stderr and exit 3; mv's own failure is its
 * stderr, read for an errno name by its words (modal_fs_mv_error).
 */
#include <string.h>

#include "core/fs.h"
#include "providers/modal/modal_int.h"
#include "xalloc.h"

static const char MV_SCRIPT[] =
    "p=.$1 t=.$2\n"
    "e() { echo \"sbxd-mv: $1: $2\" >&2; exit 3; }\n"
    "[ -e \"$p\" ] || [ -L \"$p\" ] || e ENOENT 'No such file or directory'\n"
    "d=${t%/*}; [ -n \"$d\" ] || d=.\n"
    "[ -e \"$d\" ] || e ENOENT 'No such file or directory'\n"
    "[ -d \"$d\" ] || e ENOTDIR 'Not a directory'\n"
    "isdir() { [ -d \"$1\" ] && [ ! -L \"$1\" ]; }\n"
    "[ \"$p\" -ef \"$t\" ] && { [ \"$3\" = 1 ] && exit 0; e EEXIST 'File exists'; }\n"
    "if isdir \"$p\"; then case \"$t/\" in \"$p\"/*) e EINVAL 'Invalid argument';; esac; fi\n"
    "if [ -e \"$t\" ] || [ -L \"$t\" ]; then\n"
    "  [ \"$3\" = 1 ] || e EEXIST 'File exists'\n"
    "  if isdir \"$p\"; then\n"
    "    isdir \"$t\" || e ENOTDIR 'Not a directory'\n"
    "    [ -z \"$(ls -A -- \"$t\")\" ] || e ENOTEMPTY 'Directory not empty'\n"
    "  elif isdir \"$t\"; then e EISDIR 'Is a directory'; fi\n"
    "fi\n"
    "a=$(stat -c %d -- \"$p\" 2>/dev/null) b=$(stat -L -c %d -- \"$d\" 2>/dev/null)\n"
    "[ -z \"$a\" ] || [ \"$a\" = \"$b\" ] || e EXDEV 'Invalid cross-device link'\n"
    "if isdir \"$t\"; then rmdir -- \"$t\" || exit 4; fi\n"
    "exec mv -f -- \"$p\" \"$t\"\n";

int modal_fs_mv_argv_ok(struct fs_call *fc)
{
    const char *p = json_string_value(json_object_get(fc->args, "path"));
    const char *to = json_string_value(json_object_get(fc->args, "to"));
    return p && to && p[0] == '/' && to[0] == '/';
}

char **modal_fs_mv_argv(struct fs_call *fc, size_t *n_out)
{
    json_t *a = fc->args;
    const char *p = json_string_value(json_object_get(a, "path"));
    const char *to = json_string_value(json_object_get(a, "to"));
    json_t *ow = json_object_get(a, "overwrite");
    if (!p || !to || p[0] != '/' || to[0] != '/')
        return NULL;
    char **argv = xcalloc(7, sizeof(*argv));
    argv[0] = xstrdup("/bin/sh");
    argv[1] = xstrdup("-c");
    argv[2] = xstrdup(MV_SCRIPT);
    argv[3] = xstrdup("sbxd-mv");
    argv[4] = xstrdup(p);
    argv[5] = xstrdup(to);
    argv[6] = xstrdup(json_is_false(ow) ? "0" : "1");
    *n_out = 7;
    return argv;
}

void modal_fs_mv_argv_free(char **argv, size_t n)
{
    for (size_t i = 0; argv && i < n; i++)
        free(argv[i]);
    free(argv);
}

int modal_fs_mv_error(const uint8_t *buf, size_t len, const char **errno_name, char *msg,
                      size_t msgsz)
{
    static const char *const words[][2] = {
        {"No such file or directory", "ENOENT"},
        {"Not a directory", "ENOTDIR"},
        {"Is a directory", "EISDIR"},
        {"Directory not empty", "ENOTEMPTY"},
        {"File exists", "EEXIST"},
        {"Permission denied", "EACCES"},
        {"Operation not permitted", "EPERM"},
        {"Invalid cross-device link", "EXDEV"},
        {"Read-only file system", "EROFS"},
        {"No space left on device", "ENOSPC"},
        {"Invalid argument", "EINVAL"},
        {"Device or resource busy", "EBUSY"},
        {"cannot overwrite directory with non-directory", "EISDIR"},
        {"cannot overwrite non-directory with directory", "ENOTDIR"},
        {"to a subdirectory of itself", "EINVAL"},
        /* GNU tar's (archives, modal_fstar.c) */
        {"does not look like a tar archive", "EINVAL"},
        {"Unexpected EOF in archive", "EINVAL"},
        {"Skipping to next header", "EINVAL"},
        {"File name too long", "ENAMETOOLONG"},
        {"Too many levels of symbolic links", "ELOOP"},
        {"Disk quota exceeded", "EDQUOT"},
        {"tar: not found", "ENOENT"},
    };
    *errno_name = "EIO";
    msg[0] = 0;
    /* The first line only, without its newline and anything unprintable. */
    size_t n = 0;
    while (n < len && buf[n] != '\n' && n + 1 < msgsz) {
        msg[n] = buf[n] >= 0x20 && buf[n] < 0x7f ? (char)buf[n] : '?';
        n++;
    }
    msg[n] = 0;
    /* "sbxd-mv: " here, "sbxd-tar: " from the archive scripts (modal_fstar.c) */
    size_t tl = !strncmp(msg, "sbxd-mv: ", 9)     ? 9
                : !strncmp(msg, "sbxd-tar: ", 10) ? 10
                                                  : 0;
    if (tl) {
        char *name = msg + tl, *colon = strchr(name, ':');
        for (size_t i = 0; colon && i < sizeof(words) / sizeof(words[0]); i++)
            if ((size_t)(colon - name) == strlen(words[i][1]) &&
                !strncmp(name, words[i][1], strlen(words[i][1]))) {
                *errno_name = words[i][1];
                const char *rest = colon[1] == ' ' ? colon + 2 : colon + 1;
                memmove(msg, rest, strlen(rest) + 1);
                return 0;
            }
        return -1;
    }
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strstr(msg, words[i][0])) {
            *errno_name = words[i][1];
            return 0;
        }
    return msg[0] ? 0 : -1;
}
