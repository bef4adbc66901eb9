/*
 * test_modal_fs.c - the parsers of the Modal filesystem tool's output
 * (modal_fs.c, modal_fsmv.c, modal_fswatch.c through modal_int.h), which read
 * bytes from inside the sandbox: error kinds to errno names, Stat and
 * ListFiles entries in the agent's shape (malformed entries left out,
 * skip/limit/more), the rename helper's stderr, and Watch events.
 */
#include <stdlib.h>

#include "providers/modal/modal_int.h"
#include "testhelp.h"

#define B(s) (const uint8_t *)(s), strlen(s)

static void test_errors(void)
{
    test_eq_str("NotFound is ENOENT", modal_fs_errno("NotFound"), "ENOENT");
    test_eq_str("DirectoryNotEmpty is ENOTEMPTY", modal_fs_errno("DirectoryNotEmpty"),
                "ENOTEMPTY");
    test_eq_str("an unknown kind is EIO", modal_fs_errno("Weird"), "EIO");
    test_eq_str("no kind is EIO", modal_fs_errno(NULL), "EIO");
    const char *en = NULL;
    char msg[64];
    test_cond("the tool's error JSON gives errno and message",
              modal_fs_parse_error(B("{\"error_kind\":\"PermissionDenied\","
                                     "\"message\":\"no access\"}"),
                                   &en, msg, sizeof(msg)) == 0 &&
                  !strcmp(en, "EACCES") && !strcmp(msg, "no access"));
    test_cond("an empty message is not an error report",
              modal_fs_parse_error(B("{\"error_kind\":\"NotFound\",\"message\":\"\"}"),
                                   &en, msg, sizeof(msg)) < 0 &&
                  !strcmp(en, "EIO"));
    test_cond("not JSON is EIO",
              modal_fs_parse_error(B("oops"), &en, msg, sizeof(msg)) < 0);
    test_cond("duplicate keys are refused",
              modal_fs_parse_error(B("{\"error_kind\":\"NotFound\",\"error_kind\":\"X\","
                                     "\"message\":\"m\"}"),
                                   &en, msg, sizeof(msg)) < 0);
    char small[8];
    modal_fs_parse_error(
        B("{\"error_kind\":\"NotFound\",\"message\":\"a long message\"}"), &en, small,
        sizeof(small));
    test_eq_str("the message is cut to the buffer", small, "a long ");
}

static void test_stat_list(void)
{
    json_t *o = modal_fs_parse_stat(
        B("{\"name\":\"f\",\"path\":\"/w/f\",\"type\":\"file\",\"size\":5,"
          "\"mode\":33188,\"modified_time\":1.5,\"owner\":\"1000\",\"group\":\"x\"}"));
    test_cond("a Stat entry in the agent's shape (no name, no path)",
              o && !json_object_get(o, "name") && !json_object_get(o, "path") &&
                  !strcmp(json_string_value(json_object_get(o, "type")), "file") &&
                  json_integer_value(json_object_get(o, "size")) == 5 &&
                  json_integer_value(json_object_get(o, "mode")) == 0644 &&
                  json_integer_value(json_object_get(o, "mtime_ms")) == 1500 &&
                  json_integer_value(json_object_get(o, "uid")) == 1000 &&
                  !json_object_get(o, "gid"));
    json_decref(o);
    o = modal_fs_parse_stat(
        B("{\"name\":\"p\",\"path\":\"/p\",\"type\":\"fifo\",\"size\":0}"));
    test_eq_str("an unknown type is other", json_string_value(json_object_get(o, "type")),
                "other");
    json_decref(o);
    test_cond("a relative path is not an entry",
              !modal_fs_parse_stat(
                  B("{\"name\":\"f\",\"path\":\"w/f\",\"type\":\"file\",\"size\":1}")));
    test_cond("a negative size is not an entry",
              !modal_fs_parse_stat(
                  B("{\"name\":\"f\",\"path\":\"/f\",\"type\":\"file\",\"size\":-1}")));

    const char *list =
        "[{\"name\":\"a\",\"path\":\"/a\",\"type\":\"file\",\"size\":1},"
        "{\"name\":\"bad\"},"
        "{\"name\":\"b\",\"path\":\"/b\",\"type\":\"directory\",\"size\":0},"
        "{\"name\":\"c\",\"path\":\"/c\",\"type\":\"symlink\",\"size\":0,"
        "\"symlink_target\":\"/a\"}]";
    o = modal_fs_parse_list(B(list), 0, 10);
    json_t *e = json_object_get(o, "entries");
    test_cond("a list leaves malformed entries out, more false",
              json_array_size(e) == 3 && json_is_false(json_object_get(o, "more")));
    test_eq_str("a symlink keeps its target",
                json_string_value(json_object_get(json_array_get(e, 2), "target")), "/a");
    json_decref(o);
    o = modal_fs_parse_list(B(list), 1, 1);
    e = json_object_get(o, "entries");
    test_cond(
        "skip and limit count good entries; more says some are left",
        json_array_size(e) == 1 &&
            !strcmp(json_string_value(json_object_get(json_array_get(e, 0), "name")),
                    "b") &&
            json_is_true(json_object_get(o, "more")));
    json_decref(o);
    test_cond("a list that is not an array is NULL",
              !modal_fs_parse_list(B("{}"), 0, 10));
}

static void test_mv_and_watch(void)
{
    const char *en = NULL;
    char msg[128];
    test_cond("the helper's tagged errno is taken, its text kept",
              modal_fs_mv_error(B("sbxd-mv: EXDEV: cross-device\n"), &en, msg,
                                sizeof(msg)) == 0 &&
                  !strcmp(en, "EXDEV") && !strcmp(msg, "cross-device"));
    test_cond("an unknown tag is EIO",
              modal_fs_mv_error(B("sbxd-mv: EWHAT: x"), &en, msg, sizeof(msg)) < 0);
    test_cond("mv's own words map to errno",
              modal_fs_mv_error(B("mv: cannot move: Directory not empty\nmore"), &en, msg,
                                sizeof(msg)) == 0 &&
                  !strcmp(en, "ENOTEMPTY") && !strchr(msg, '\n'));
    test_cond("unprintable bytes are replaced",
              modal_fs_mv_error(B("x\001y"), &en, msg, sizeof(msg)) == 0 &&
                  !strcmp(msg, "x?y") && !strcmp(en, "EIO"));
    test_cond("nothing on stderr is no error",
              modal_fs_mv_error((const uint8_t *)"", 0, &en, msg, sizeof(msg)) < 0);

    json_t *w =
        modal_fs_parse_watch(B("{\"event_type\":\"Rename\",\"paths\":[\"/a\",\"/b\"]}"));
    test_cond(
        "a rename with both names: the old a rename, the new a create",
        json_array_size(w) == 2 &&
            !strcmp(json_string_value(json_object_get(json_array_get(w, 0), "kind")),
                    "rename") &&
            !strcmp(json_string_value(json_object_get(json_array_get(w, 1), "kind")),
                    "create"));
    json_decref(w);
    w = modal_fs_parse_watch(
        B("{\"event_type\":\"Remove\",\"paths\":[\"rel\",7,\"/x\"]}"));
    test_cond("relative and non-string paths are left out",
              json_array_size(w) == 1 && !strcmp(json_string_value(json_object_get(
                                                     json_array_get(w, 0), "kind")),
                                                 "delete"));
    json_decref(w);
    w = modal_fs_parse_watch(B("{\"event_type\":\"Access\",\"paths\":[\"/x\"]}"));
    test_eq_int("reads are no event", json_array_size(w), 0);
    json_decref(w);
    char many[2048] = "{\"event_type\":\"Create\",\"paths\":[";
    for (int i = 0; i < 40; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%s\"/p%d\"",
                 i ? "," : "", i);
    snprintf(many + strlen(many), sizeof(many) - strlen(many), "]}");
    w = modal_fs_parse_watch(B(many));
    test_cond("one event gives at most 16 paths", json_array_size(w) == 16);
    json_decref(w);
    test_cond("not an event is NULL", !modal_fs_parse_watch(B("[]")));
}

int main(void)
{
    test_errors();
    test_stat_list();
    test_mv_and_watch();
    return test_report();
}
