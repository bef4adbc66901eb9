/*
 * test_fs.c - core/fs.c in-process: the answers it builds from a provider's
 * shapes, write handles and watches (their ends, their owners), and the
 * bounds (fs_transfers_per_uid, fs_bytes_in_flight_per_uid,
 * fs_watches_per_sandbox, fs_handle_idle_ms), with a synchronous provider.
 * The real agent path is tests/providers/ptest_docker_fs.c.
 */
#include <signal.h>
#include <unistd.h>

#include "daemon.h"
#include "core/fs.h"
#include "core/provider.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "testhelp.h"
#include "core/usage.h"

/* -- a synchronous provider with files ----------------------------------------- */

static int releases, writes_committed;
static size_t written;
static uint64_t last_watch;

static int f_available(void *cookie, const char **reason)
{
    return 1;
}

static int f_start(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    sandbox_op_done(sb, NULL, NULL);
    return 0;
}

static int f_fs(void *cookie, struct fs_call *fc, sbx_err_t *err)
{
    const char *path = json_string_value(json_object_get(fc->args, "path"));
    switch (fc->op) {
    case FS_OP_STAT:
        fs_call_done(fc, NULL,
                     json_pack("{s:s, s:i, s:i, s:I, s:i, s:i}", "type", "file", "size",
                               3, "mode", 0644, "mtime_ms", (json_int_t)1000, "uid", 7,
                               "gid", 8));
        return 0;
    case FS_OP_READ:
        if (!strcmp(path, "/over")) {
            char big[64] = {0};
            int r = fs_call_data(fc, big, sizeof(big));
            fs_err(err, "EIO", path, r < 0 ? "refused" : "taken");
            fs_call_done(fc, err, NULL);
            return 0;
        }
        fs_call_data(fc, "a\xff", 2);
        fs_call_done(fc, NULL, json_pack("{s:i, s:i, s:b}", "size", 2, "n", 2, "eof", 1));
        return 0;
    case FS_OP_WRITE:
        if (!strcmp(path, "/full")) {
            fs_err(err, "ENOSPC", path, "No space left on device");
            fs_call_done(fc, err, NULL);
            return 0;
        }
        if (fc->first)
            *fc->hdata = fc; /* anything non-NULL */
        written += fc->len;
        writes_committed += !fc->more;
        fs_call_done(fc, NULL, json_pack("{s:I}", "size", (json_int_t)written));
        return 0;
    case FS_OP_WATCH:
        last_watch = fc->handle;
        *fc->hdata = fc;
        fs_call_done(fc, NULL, json_object());
        return 0;
    default:
        return err_make(err, SBX_E_INTERNAL, "not in this test");
    }
}

static void f_release(void *cookie, struct sandbox *sb, uint64_t handle, void *hdata)
{
    releases++;
}

static const struct sbx_provider withfs = {.name = "withfs",
                                           .available = f_available,
                                           .sb_start = f_start,
                                           .fs_call = f_fs,
                                           .fs_release = f_release};
static const struct sbx_provider nofs = {
    .name = "nofs", .available = f_available, .sb_start = f_start};

static struct daemon d;

static struct sandbox *running(const char *id, int prov)
{
    struct sandbox *sb = NULL;
    sbx_err_t err = {0};
    if (sandbox_new(&sb, id, &d.providers[prov], 1000,
                    json_pack("{s:i}", "timeout_ms", 60000), &err) < 0)
        abort();
    sandbox_start(sb, NULL, NULL);
    return sb;
}

/* -- the answer catcher ---------------------------------------------------------- */

static json_t *ans;
static int ans_code, answers;

static void done(sbx_err_t *err, json_t *result, void *privdata)
{
    answers++;
    json_decref(ans);
    ans = err ? json_pack("{s:O?}", "data", err->data) : json_incref(result);
    ans_code = err ? err->code : 0;
}

static json_t *events;
static int refuse_events;

static int on_event(json_t *params, void *owner)
{
    if (refuse_events)
        return -1;
    json_array_append(events, params);
    return 0;
}

static int owner_a, owner_b;

static void run(struct sandbox *sb, enum fs_op op, json_t *args, const char *data,
                size_t len, int more, struct fs_handle *h, void *owner)
{
    uint8_t *copy = NULL;
    if (data) {
        copy = malloc(len ? len : 1);
        memcpy(copy, data, len);
    }
    fs_start(sb, 1000, op, args, copy, len, more, h, owner, on_event, done, NULL);
}

static const char *sget(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* -- tests ------------------------------------------------------------------------ */

static void test_answers(struct sandbox *sb)
{
    run(sb, FS_OP_STAT, json_pack("{s:s}", "path", "/w/a.txt"), NULL, 0, 0, NULL,
        &owner_a);
    test_eq_str("stat: name is the base name", sget(ans, "name"), "a.txt");
    test_eq_str("stat: mtime_ms becomes an RFC 3339 mtime", sget(ans, "mtime"),
                "1970-01-01T00:00:01.000Z");
    test_cond("stat: no mtime_ms left", !json_object_get(ans, "mtime_ms"));
    run(sb, FS_OP_READ,
        json_pack("{s:s, s:i, s:i}", "path", "/r", "offset", 0, "length", 0), NULL, 0, 0,
        NULL, &owner_a);
    test_eq_str("read: bytes that are not UTF-8 come as data_b64", sget(ans, "data_b64"),
                "Yf8=");
    test_cond("read: length is what came",
              json_integer_value(json_object_get(ans, "length")) == 2);
    run(sb, FS_OP_READ, json_pack("{s:s, s:i}", "path", "/over", "length", 8), NULL, 0, 0,
        NULL, &owner_a);
    test_cond("read: bytes past the asked length are refused to the provider",
              ans_code == SBX_E_FS &&
                  !strcmp(sget(json_object_get(ans, "data"), "message"), "refused"));
    test_cond("nothing is left charged to the uid", usage_find(1000) == NULL);
}

static void test_writes(struct sandbox *sb)
{
    written = 0;
    run(sb, FS_OP_WRITE, json_pack("{s:s}", "path", "/w"), "abc", 3, 1, NULL, &owner_a);
    json_int_t id = json_integer_value(json_object_get(ans, "handle"));
    struct fs_handle *h = fs_handle_find((uint64_t)id, &owner_a, FS_OP_WRITE);
    test_cond("a write with more gives a handle", id > 0 && h);
    test_cond("another owner does not see it",
              !fs_handle_find((uint64_t)id, &owner_b, FS_OP_WRITE));
    test_cond("the open handle holds a transfer slot",
              usage_find(1000) && usage_find(1000)->fs_transfers == 1);
    run(sb, FS_OP_WRITE, json_deep_copy(fs_handle_args(h)), "de", 2, 0, h, &owner_a);
    test_cond("the last chunk commits: size, no handle",
              json_integer_value(json_object_get(ans, "size")) == 5 &&
                  !json_object_get(ans, "handle") && writes_committed == 1);
    test_cond("a committed handle is gone, not released",
              !fs_handle_find((uint64_t)id, &owner_a, FS_OP_WRITE) && releases == 0);
    test_cond("and its slot is back", usage_find(1000) == NULL);
    run(sb, FS_OP_WRITE, json_pack("{s:s}", "path", "/full"), "x", 1, 1, NULL, &owner_a);
    test_cond("a failed write is its provider's error",
              ans_code == SBX_E_FS &&
                  !strcmp(sget(json_object_get(ans, "data"), "errno"), "ENOSPC"));
    test_cond("and leaves nothing held", usage_find(1000) == NULL);
}

static void test_bounds(struct sandbox *sb)
{
    d.cfg.fs_transfers_per_uid = 2;
    run(sb, FS_OP_WRITE, json_pack("{s:s}", "path", "/1"), "a", 1, 1, NULL, &owner_a);
    run(sb, FS_OP_WRITE, json_pack("{s:s}", "path", "/2"), "a", 1, 1, NULL, &owner_a);
    run(sb, FS_OP_STAT, json_pack("{s:s}", "path", "/3"), NULL, 0, 0, NULL, &owner_a);
    test_cond(
        "past fs_transfers_per_uid: -32005 naming it",
        ans_code == SBX_E_LIMIT &&
            !strcmp(sget(json_object_get(ans, "data"), "limit"), "fs_transfers_per_uid"));
    int before = releases;
    fs_drop_owner(&owner_a);
    test_cond("the owner's end releases its open writes", releases == before + 2);
    test_cond("and gives the slots back", usage_find(1000) == NULL);
    d.cfg.fs_transfers_per_uid = 16;
    d.cfg.fs_bytes_in_flight_per_uid = 4;
    run(sb, FS_OP_WRITE, json_pack("{s:s}", "path", "/big"), "12345", 5, 0, NULL,
        &owner_a);
    test_cond("a chunk past fs_bytes_in_flight_per_uid: -32005",
              ans_code == SBX_E_LIMIT &&
                  !strcmp(sget(json_object_get(ans, "data"), "limit"),
                          "fs_bytes_in_flight_per_uid"));
    run(sb, FS_OP_READ, json_pack("{s:s, s:i}", "path", "/r", "length", 100), NULL, 0, 0,
        NULL, &owner_a);
    test_cond("so is a read whose length would pass it", ans_code == SBX_E_LIMIT);
    d.cfg.fs_bytes_in_flight_per_uid = 64 << 20;
    /* idle writes */
    run(sb, FS_OP_WRITE, json_pack("{s:s}", "path", "/idle"), "a", 1, 1, NULL, &owner_a);
    before = releases;
    fs_expire(ev_now(d.loop) + (double)d.cfg.fs_handle_idle_ms / 1000.0 + 1);
    test_cond("a write idle past fs_handle_idle_ms is released",
              releases == before + 1 && usage_find(1000) == NULL);
}

static void test_watches(struct sandbox *sb)
{
    d.cfg.fs_watches_per_sandbox = 1;
    events = json_array();
    run(sb, FS_OP_WATCH, json_pack("{s:s}", "path", "/w"), NULL, 0, 0, NULL, &owner_b);
    json_int_t id = json_integer_value(json_object_get(ans, "watch"));
    test_cond("a watch answers its id", id > 0 && (uint64_t)id == last_watch);
    run(sb, FS_OP_WATCH, json_pack("{s:s}", "path", "/x"), NULL, 0, 0, NULL, &owner_b);
    test_cond("past fs_watches_per_sandbox: -32005", ans_code == SBX_E_LIMIT);
    fs_event(sb, (uint64_t)id, "/w/a", "create");
    json_t *e = json_array_get(events, 0);
    test_cond("an event reaches the owner as fs.event params",
              !strcmp(sget(e, "kind"), "create") && !strcmp(sget(e, "path"), "/w/a") &&
                  !strcmp(sget(e, "sandbox"), sb->id));
    refuse_events = 1;
    fs_event(sb, (uint64_t)id, "/w/b", "modify");
    refuse_events = 0;
    fs_event(sb, (uint64_t)id, "/w/c", "delete");
    test_cond("an owner that could not take one gets an overflow before the next",
              json_array_size(events) == 3 &&
                  !strcmp(sget(json_array_get(events, 1), "kind"), "overflow") &&
                  !strcmp(sget(json_array_get(events, 2), "path"), "/w/c"));
    fs_event(sb, 999999, "/w/d", "create");
    test_cond("events of an unknown watch are dropped", json_array_size(events) == 3);
    int before = releases;
    fs_drop_sandbox(sb);
    test_cond("a stopping sandbox ends its watches with an overflow, ended",
              json_is_true(json_object_get(json_array_get(events, 3), "ended")) &&
                  releases == before + 1);
    json_decref(events);
    d.cfg.fs_watches_per_sandbox = 16;
}

static void test_unsupported(void)
{
    struct sandbox *sb = running("iso", 1);
    run(sb, FS_OP_STAT, json_pack("{s:s}", "path", "/x"), NULL, 0, 0, NULL, &owner_a);
    test_cond("a provider without fs_call: -32011 naming it",
              ans_code == SBX_E_UNSUPPORTED &&
                  !strcmp(sget(json_object_get(ans, "data"), "provider"), "nofs") &&
                  !strcmp(sget(json_object_get(ans, "data"), "feature"), "fs"));
}

/* format "tar" on a provider with files but no archives (Modal): -32011. */
static void test_no_tar(struct sandbox *sb)
{
    run(sb, FS_OP_READ, json_pack("{s:s, s:s}", "path", "/d", "format", "tar"), NULL, 0,
        0, NULL, &owner_a);
    test_cond("a tar read without fs_tar: -32011 feature fs.tar",
              ans_code == SBX_E_UNSUPPORTED &&
                  !strcmp(sget(json_object_get(ans, "data"), "feature"), "fs.tar"));
    run(sb, FS_OP_WRITE, json_pack("{s:s, s:s}", "path", "/d", "format", "tar"), "x", 1,
        0, NULL, &owner_a);
    test_cond("a tar write too, and nothing was written",
              ans_code == SBX_E_UNSUPPORTED && written == 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    D = &d;
    config_init_defaults(&d.cfg);
    d.loop = EV_DEFAULT;
    d.snapshots = json_object();
    d.providers[0] = (struct provider_inst){.ops = &withfs, .enabled = 1, .loaded = 1};
    d.providers[1] = (struct provider_inst){.ops = &nofs, .enabled = 1, .loaded = 1};
    d.nproviders = 2;
    struct sandbox *sb = running("fs1", 0);
    test_cond("the fake sandbox runs", sb->status == SB_RUNNING);
    test_answers(sb);
    test_writes(sb);
    test_bounds(sb);
    test_watches(sb);
    test_unsupported();
    size_t w = written;
    written = 0;
    test_no_tar(sb);
    written = w;
    int n = answers;
    test_cond("every call was answered once", n == 17);
    json_decref(ans);
    sandbox_free_all();
    json_decref(d.snapshots);
    config_deinit(&d.cfg);
    return test_report();
}
