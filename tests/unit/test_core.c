/*
 * test_core.c - the daemon core in-process: UTF-8 and base64, the chunked
 * output buffer, env/cwd precedence, the sandbox status machine, and the
 * JSON-RPC codec driven by data files (tests/data/rpc/<case>/{input,output}).
 *
 * The provider here is a test double with synchronous ops: it is what lets
 * the status machine be checked without a real backend. The real providers
 * are covered by the integration and provider tests.
 */
#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "core/events.h"
#include "io/obuf.h"
#include "core/process.h"
#include "rpc/rpc.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "rpc/session.h"
#include "testhelp.h"
#include "core/utf8.h"

/* -- a synchronous provider ------------------------------------------------- */

static int fake_fail_start, fake_starts, fake_stops, fake_destroys;

static int f_load(json_t *conf, void **cookie, sbx_err_t *err)
{
    return 0;
}
static void f_unload(void *cookie)
{
}
static int f_available(void *cookie, const char **reason)
{
    return 1;
}
static int f_start(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    fake_starts++;
    if (fake_fail_start)
        return err_make(err, SBX_E_PROVIDER, "backend refused");
    sandbox_op_done(sb, NULL, NULL);
    return 0;
}
static int f_stop(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    fake_stops++;
    sandbox_op_done(sb, NULL, NULL);
    return 0;
}
static int f_destroy(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    fake_destroys++;
    sandbox_op_done(sb, NULL, NULL);
    return 0;
}
/* With fake_hang_snapshot set a snapshot never finishes by itself (an
 * isolate stuck in a getter); only sb_cancel ends it. */
static int fake_hang_snapshot, fake_cancels;
static int f_snapshot(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    if (!fake_hang_snapshot)
        sandbox_op_done(sb, NULL, json_pack("{s:s}", "state", "x"));
    return 0;
}
static void f_cancel(void *cookie, struct sandbox *sb)
{
    fake_cancels++;
    if (!fake_hang_snapshot || sb->op != OP_SNAPSHOT)
        return;
    sbx_err_t err = {0};
    err_make(&err, SBX_E_PROVIDER, "snapshot cancelled: destroyed");
    sandbox_op_done(sb, &err, NULL);
    err_clear(&err);
}
/* Commands "exit N" exit with N at once; "out TEXT" prints TEXT then exits 0;
 * "split" prints half a UTF-8 character then exits 0. */
static int f_spawn(void *cookie, struct process *p, sbx_err_t *err)
{
    const char *code = json_string_value(json_object_get(p->spec, "code"));
    if (strncmp(code, "out ", 4) == 0) {
        process_output(p, SBX_STREAM_STDOUT, code + 4, strlen(code + 4));
        json_t *rec = json_pack("{s:i}", "exit_code", 0);
        process_exited(p, rec);
        json_decref(rec);
    } else if (strcmp(code, "split") == 0) {
        /* the first two bytes of U+20AC */
        process_output(p, SBX_STREAM_STDOUT, "\342\202", 2);
        json_t *rec = json_pack("{s:i}", "exit_code", 0);
        process_exited(p, rec);
        json_decref(rec);
    } else if (strncmp(code, "exit ", 5) == 0) {
        json_t *rec = json_pack("{s:i}", "exit_code", atoi(code + 5));
        process_exited(p, rec);
        json_decref(rec);
    }
    return 0; /* anything else runs until killed */
}
static int f_write(void *c, struct process *p, const void *d, size_t n, sbx_err_t *e)
{
    return 0;
}
static int f_close(void *c, struct process *p, sbx_err_t *e)
{
    return 0;
}
static int f_kill(void *c, struct process *p, int sig, sbx_err_t *e)
{
    json_t *rec = json_pack("{s:i, s:i}", "exit_code", 128 + sig, "signal", sig);
    process_exited(p, rec);
    json_decref(rec);
    return 0;
}

static const struct sbx_provider fake = {
    .name = "fake",
    .shell_commands = 0,
    .default_cwd = "/default",
    .load = f_load,
    .unload = f_unload,
    .available = f_available,
    .sb_start = f_start,
    .sb_stop = f_stop,
    .sb_destroy = f_destroy,
    .sb_snapshot = f_snapshot,
    .sb_cancel = f_cancel,
    .proc_spawn = f_spawn,
    .proc_write = f_write,
    .proc_close_stdin = f_close,
    .proc_kill = f_kill,
};

static struct daemon d;

/* As in main.c: output is flushed before the loop sleeps. */
static void prepare_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
    sessions_before_sleep();
    sandboxes_before_sleep();
}

static ev_prepare prepare;

static void setup(void)
{
    D = &d;
    config_init_defaults(&d.cfg);
    free(d.cfg.default_provider);
    d.cfg.default_provider = strdup("fake");
    d.loop = EV_DEFAULT;
    ev_prepare_init(&prepare, prepare_cb);
    ev_prepare_start(d.loop, &prepare);
    d.snapshots = json_object();
    d.providers[0].ops = &fake;
    d.providers[0].enabled = 1;
    d.providers[0].loaded = 1;
    d.nproviders = 1;
}

/* -- utf8, base64, obuf ------------------------------------------------------ */

static void test_utf8(void)
{
    test_cond("ASCII is valid UTF-8", utf8_valid((const uint8_t *)"hello", 5));
    test_cond("a 4-byte sequence is valid",
              utf8_valid((const uint8_t *)"\xf0\x9f\x98\x80", 4));
    test_cond("an overlong encoding is not", !utf8_valid((const uint8_t *)"\xc0\xaf", 2));
    test_cond("a surrogate is not", !utf8_valid((const uint8_t *)"\xed\xa0\x80", 3));
    test_cond("a lone continuation byte is not",
              !utf8_valid((const uint8_t *)"a\x80", 2));
    test_cond("a truncated sequence is not valid",
              !utf8_valid((const uint8_t *)"\xe2\x82", 2));
    test_eq_int("incomplete tail of 2 bytes is held",
                utf8_incomplete_tail((const uint8_t *)"ab\xe2\x82", 4), 2);
    test_eq_int("incomplete tail of 1 lead byte is held",
                utf8_incomplete_tail((const uint8_t *)"ab\xf0", 3), 1);
    test_eq_int("a complete character holds nothing",
                utf8_incomplete_tail((const uint8_t *)"\xe2\x82\xac", 3), 0);
    test_cond("garbage at the end holds nothing",
              utf8_incomplete_tail((const uint8_t *)"a\xff", 2) == 0);
    char *b = base64_encode((const uint8_t *)"\x00\xff\x10hi", 5);
    test_cond("base64 encodes with padding", b && strcmp(b, "AP8QaGk=") == 0);
    size_t n = 0;
    uint8_t *raw = base64_decode(b, strlen(b), &n);
    test_cond("base64 round trips binary",
              raw && n == 5 && memcmp(raw, "\x00\xff\x10hi", 5) == 0);
    free(raw);
    free(b);
    test_cond("invalid base64 is rejected", base64_decode("a*bc", 4, &n) == NULL);

    /* the 8-bytes-at-a-time paths: every position of a byte that matters */
    uint8_t buf[40];
    int run_ok = 1, valid_ok = 1;
    static const uint8_t specials[] = {'"', '\\', 0x00, 0x0a, 0x1f};
    for (size_t pos = 0; pos < sizeof(buf); pos++) {
        for (size_t k = 0; k < sizeof(specials); k++) {
            for (size_t i = 0; i < sizeof(buf); i++)
                buf[i] = (uint8_t)(i % 2 ? 0xc3 : 'a') ^ (i % 2 ? 0 : (uint8_t)(i % 7));
            for (size_t i = 1; i < sizeof(buf); i += 2)
                buf[i] = 0xa9; /* bytes >= 0x80 need no escaping */
            buf[pos] = specials[k];
            if (json_plain_run(buf, sizeof(buf)) != pos)
                run_ok = 0;
        }
        memset(buf, 'x', sizeof(buf));
        buf[pos] = 0x80; /* a lone continuation byte anywhere */
        if (utf8_valid(buf, sizeof(buf)))
            valid_ok = 0;
    }
    test_cond("json_plain_run stops at the first byte that needs escaping, at any offset",
              run_ok);
    memset(buf, ' ', sizeof(buf));
    test_cond("json_plain_run takes a whole plain buffer",
              json_plain_run(buf, sizeof(buf)) == sizeof(buf) &&
                  json_plain_run((const uint8_t *)"~\x7f\xff", 3) == 3);
    test_cond("utf8_valid finds a bad byte at any offset after ASCII runs", valid_ok);
    memcpy(buf + 20, "\xf0\x9f\x98\x80", 4);
    test_cond("utf8_valid accepts a 4-byte sequence inside ASCII runs",
              utf8_valid(buf, sizeof(buf)));
}

static void test_obuf(void)
{
    struct obuf b;
    obuf_init(&b);
    char big[40000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)('a' + i % 26);
    obuf_append(&b, big, sizeof(big));
    test_eq_int("obuf counts appended bytes", b.bytes, sizeof(big));
    struct iovec iov[8];
    int n = obuf_iov(&b, iov, 8);
    test_cond("obuf spans 16 KiB chunks", n == 3 && iov[0].iov_len == OBUF_CHUNK);
    obuf_consume(&b, 20000);
    n = obuf_iov(&b, iov, 8);
    test_cond("consume frees written chunks and keeps order",
              b.bytes == 20000 && ((char *)iov[0].iov_base)[0] == big[20000]);
    /* An adopted buffer is queued in place, between copied bytes, and
     * appends after it start a chunk of their own. */
    char *own = malloc(50000);
    memset(own, 'z', 50000);
    obuf_adopt(&b, own, 50000);
    obuf_append(&b, "\n", 1);
    n = obuf_iov(&b, iov, 8);
    test_cond("an adopted buffer is queued without a copy, in order",
              b.bytes == 70001 && n == 4 && iov[2].iov_base == own &&
                  iov[2].iov_len == 50000 && iov[3].iov_len == 1 &&
                  ((char *)iov[3].iov_base)[0] == '\n');
    obuf_consume(&b, 20000 + 49999);
    n = obuf_iov(&b, iov, 8);
    test_cond("consume walks through an adopted buffer",
              b.bytes == 2 && n == 2 && ((char *)iov[0].iov_base)[0] == 'z');
    obuf_deinit(&b); /* frees the adopted buffer (ASan/valgrind would say) */

    /* One reply at a time: the chunk its bytes left is the next one's. */
    obuf_init(&b);
    obuf_append(&b, "a", 1);
    struct obuf_chunk *first = b.head;
    obuf_consume(&b, 1);
    obuf_append(&b, "bc", 2);
    test_cond("an emptied chunk is kept for the next append",
              b.head == first && b.bytes == 2 && b.head->start == 0 && b.head->end == 2);
    obuf_deinit(&b);
    obuf_release_spare();
}

/* -- sandbox status machine -------------------------------------------------- */

static struct sandbox *mk(const char *id, json_t *conf)
{
    struct sandbox *sb = NULL;
    sbx_err_t err = {0};
    if (!conf)
        conf = json_object();
    json_object_set_new(conf, "timeout_ms", json_integer(60000));
    json_object_set_new(conf, "idle_timeout_ms", json_integer(0));
    json_object_set_new(conf, "command_timeout_ms", json_integer(60000));
    sandbox_new(&sb, id, &d.providers[0], 0, conf, &err);
    return sb;
}

static void test_states(void)
{
    struct sandbox *sb = mk("s1", NULL);
    test_eq_int("a new sandbox is pending", sb->status, SB_PENDING);
    sandbox_start(sb, NULL, NULL);
    test_cond("start: pending -> running", sb->status == SB_RUNNING && fake_starts == 1);
    sandbox_start(sb, NULL, NULL);
    test_eq_int("start is idempotent (no second provider start)", fake_starts, 1);
    sandbox_stop(sb, NULL, NULL);
    test_cond("stop: running -> stopped", sb->status == SB_STOPPED && fake_stops == 1);
    sandbox_stop(sb, NULL, NULL);
    test_eq_int("stop is idempotent", fake_stops, 1);
    sandbox_start(sb, NULL, NULL);
    test_cond("start again: stopped -> running",
              sb->status == SB_RUNNING && fake_starts == 2);
    sandbox_snapshot(sb, NULL, NULL);
    test_eq_int("a snapshot is recorded", json_object_size(d.snapshots), 1);
    sandbox_destroy(sb, NULL, NULL);
    test_cond("destroy removes it", sandbox_find_any("s1") == NULL && fake_destroys == 1);

    fake_fail_start = 1;
    sb = mk("s2", NULL);
    sandbox_start(sb, NULL, NULL);
    test_cond("a failed start puts it in error",
              sb->status == SB_ERROR && sb->error &&
                  strstr(sb->error, "backend refused"));
    fake_fail_start = 0;
    sandbox_start(sb, NULL, NULL);
    test_eq_int("start from error retries", sb->status, SB_RUNNING);
    sandbox_destroy(sb, NULL, NULL);

    sb = mk("s3", json_pack("{s:s}", "on_start", "exit 3"));
    sandbox_start(sb, NULL, NULL);
    test_eq_int("a failing on_start hook puts it in error", sb->status, SB_ERROR);
    sandbox_destroy(sb, NULL, NULL);

    sb = mk("s4", json_pack("{s:s}", "on_start", "exit 0"));
    sandbox_start(sb, NULL, NULL);
    test_eq_int("a succeeding on_start hook lets it run", sb->status, SB_RUNNING);
    sandbox_destroy(sb, NULL, NULL);
}

/* -- the core on its own: callbacks and followers, no JSON-RPC --------------- */

struct answers {
    int n;      /* completions seen */
    int code;   /* the last error's code, 0 after a success */
    char *text; /* the last result, encoded */
};

static void record(sbx_err_t *err, json_t *result, void *privdata)
{
    struct answers *a = privdata;
    a->n++;
    a->code = err ? err->code : 0;
    free(a->text);
    a->text = result ? json_dumps(result, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
}

/* A destroy asked while a snapshot hangs lets the provider end it
 * (sb_cancel): both answer at once, the snapshot with the provider's error. */
static void test_destroy_cancels(void)
{
    struct answers snap = {0}, gone = {0};
    struct sandbox *sb = mk("cancel1", NULL);
    sandbox_start(sb, NULL, NULL);
    fake_hang_snapshot = 1;
    sandbox_snapshot(sb, record, &snap);
    test_cond("a hanging snapshot is pending", snap.n == 0 && sb->op == OP_SNAPSHOT);
    int destroys = fake_destroys;
    sandbox_destroy(sb, record, &gone);
    test_cond("destroy during it: sb_cancel ends the snapshot with its error",
              fake_cancels == 1 && snap.n == 1 && snap.code == SBX_E_PROVIDER);
    test_cond("and the destroy goes ahead at once",
              gone.n == 1 && gone.code == 0 && fake_destroys == destroys + 1 &&
                  sandbox_find_any("cancel1") == NULL);
    fake_hang_snapshot = 0;
    free(snap.text);
    free(gone.text);
}

struct lines {
    struct follower f;
    int n;
    char last[512];
};

/* The core's events (events.h), as the protocol floor would get them: here
 * written down per follower as "output stdout 0 abc" / "exit 143". */
static void ev_output(struct process *p, const struct out_piece *pc)
{
    for (struct sub *s = p->subs; s; s = s->pnext) {
        struct lines *l = (struct lines *)s->f;
        l->n++;
        snprintf(l->last, sizeof(l->last), "output %s %llu %.*s",
                 pc->stream ? "stderr" : "stdout", (unsigned long long)pc->offset,
                 (int)pc->len, (const char *)pc->data);
    }
}
static void ev_exit(struct process *p, const struct exit_note *e)
{
    for (struct sub *s = p->subs; s; s = s->pnext) {
        struct lines *l = (struct lines *)s->f;
        l->n++;
        snprintf(l->last, sizeof(l->last), "exit %d", e->exit_code);
    }
}
static const struct core_events test_events = {.output = ev_output, .exit = ev_exit};

static void test_core_callbacks(void)
{
    struct answers a = {0};
    struct sandbox *sb = mk("cb1", NULL);
    sandbox_snapshot(sb, record, &a);
    test_cond("a snapshot of a pending sandbox fails through its callback, once",
              a.n == 1 && a.code == SBX_E_STATE && !a.text);
    sandbox_start(sb, record, &a);
    test_cond("start answers once with the sandbox object",
              a.n == 2 && a.code == 0 && a.text && strstr(a.text, "\"id\":\"cb1\"") &&
                  strstr(a.text, "\"status\":\"running\""));
    sandbox_start(sb, record, &a);
    test_cond("start of a running sandbox answers at once", a.n == 3 && a.code == 0);

    json_t *cmd = json_string("out hi");
    struct answers ex = {0};
    struct proc_opts o = {.command = cmd, .exec_cb = record, .exec_data = &ex};
    struct process *p = NULL;
    sbx_err_t err = {0};
    int ok = process_new(&p, sb, &o, &err) == 0 && process_launch(p, &err) == 0;
    test_cond("an exec answers its callback with the exit record and the output",
              ok && ex.n == 1 && ex.code == 0 && ex.text &&
                  strstr(ex.text, "\"exit_code\":0") &&
                  strstr(ex.text, "\"stdout\":\"hi\""));
    json_decref(cmd);

    /* A follower is whatever takes lines: here a buffer, not a session. */
    /* A follower is whatever the events table says it is: here a buffer. */
    struct lines l = {0};
    core_events_set(&test_events);
    cmd = json_string("run");
    struct proc_opts o2 = {.command = cmd};
    p = NULL;
    ok = process_new(&p, sb, &o2, &err) == 0 && process_launch(p, &err) == 0;
    json_decref(cmd);
    struct answers w = {0};
    if (ok) {
        process_subscribe(p, &l.f, ENC_UTF8, 0);
        process_output(p, SBX_STREAM_STDOUT, "abc", 3);
        test_cond("a follower gets the output as one typed event",
                  l.n == 1 && strcmp(l.last, "output stdout 0 abc") == 0);
        l.f.congested = 1;
        test_cond("a congested follower holds the process back",
                  process_output_blocked(p));
        l.f.congested = 0;
        process_add_waiter(p, 0, record, &w);
        process_kill(p, SIGTERM, &err);
        test_cond("the exit goes to the follower and the waiter",
                  l.n == 2 && strcmp(l.last, "exit 143") == 0 && w.n == 1 &&
                      w.code == 0 && l.f.subs == NULL);
    } else {
        test_cond("a follower gets the output as one typed event", 0);
    }
    core_events_set(NULL);
    err_clear(&err);
    sandbox_destroy(sb, record, &a);
    test_cond("destroy answers once with its status",
              a.n == 4 && a.code == 0 && a.text &&
                  strstr(a.text, "\"status\":\"destroyed\""));
    free(a.text);
    free(ex.text);
    free(w.text);
}

/* Output that ends inside a UTF-8 sequence, then the exit: the final flush
 * of the held-back bytes used to memcpy from NULL (aborts under make asan). */
static void test_split_utf8_exit(void)
{
    struct sandbox *sb = mk("u1", NULL);
    sandbox_start(sb, NULL, NULL);
    struct process *p = NULL;
    sbx_err_t err = {0};
    json_t *cmd = json_string("split");
    struct proc_opts o = {.command = cmd};
    int ok = process_new(&p, sb, &o, &err) == 0 && process_launch(p, &err) == 0;
    json_decref(cmd);
    test_cond("output ending inside a UTF-8 sequence, then exit: every byte is emitted",
              ok && p->state == P_EXITED && p->out[0].total == 2 &&
                  p->out[0].emitted == 2 && p->out[0].ntail == 0);
    err_clear(&err);
    sandbox_destroy(sb, NULL, NULL);
}

static void test_env_cwd(void)
{
    struct sandbox *sb = mk("e1", json_pack("{s:{s:s, s:s, s:s}, s:s}", "env", "A", "c",
                                            "B", "c", "D", "c", "working_dir", "/wd"));
    json_t *patch = json_pack("{s:s, s:s, s:n}", "B", "r", "C", "r", "D");
    sbx_err_t err = {0};
    env_merge(sb->runtime_env, patch, &err);
    json_object_set_new(sb->runtime_env, "D", json_null());
    json_decref(patch);
    json_t *cmd = json_pack("{s:s}", "C", "x");
    json_t *env = sandbox_env_for(sb, cmd);
    test_eq_str("env: create-time value kept when not overridden",
                json_string_value(json_object_get(env, "A")), "c");
    test_eq_str("env: runtime beats create-time",
                json_string_value(json_object_get(env, "B")), "r");
    test_eq_str("env: command beats runtime",
                json_string_value(json_object_get(env, "C")), "x");
    test_cond("env: a runtime null removes a create-time key",
              json_object_get(env, "D") == NULL);
    json_decref(env);
    json_decref(cmd);
    json_t *bad = json_pack("{s:i}", "N", 1);
    test_cond("env: a non-string value is a params error",
              env_merge(sb->runtime_env, bad, &err) < 0 && err.code == SBX_E_PARAMS);
    err_clear(&err);
    json_decref(bad);
    test_eq_str("cwd: the command's wins", sandbox_cwd_for(sb, "/cmd"), "/cmd");
    test_eq_str("cwd: then working_dir", sandbox_cwd_for(sb, NULL), "/wd");
    json_object_del(sb->conf, "working_dir");
    test_eq_str("cwd: then the provider default", sandbox_cwd_for(sb, NULL), "/default");
    sandbox_destroy(sb, NULL, NULL);
}

/* -- JSON-RPC codec, data driven --------------------------------------------- */

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t r = fread(s, 1, (size_t)n, f);
    s[r] = 0;
    fclose(f);
    return s;
}

/* Runs the loop until nothing more arrives on fd for a moment. */
static json_t *collect(int fd)
{
    json_t *out = json_array();
    char buf[65536];
    size_t len = 0;
    for (int idle = 0; idle < 5;) {
        ev_run(d.loop, EVRUN_NOWAIT);
        ssize_t r = recv(fd, buf + len, sizeof(buf) - len - 1, MSG_DONTWAIT);
        if (r <= 0) {
            idle++;
            usleep(2000);
            continue;
        }
        len += (size_t)r;
    }
    buf[len] = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *v = json_loads(line, JSON_DECODE_ANY, NULL);
        if (v)
            json_array_append_new(out, v);
    }
    return out;
}

/* Reads <dir>/<name>/{input,output}. Returns NULL, or the name of the file
 * that is missing (then nothing is returned): a case folder that lacks one
 * is a failed case, never a silently skipped one. */
static const char *rpc_case_load(const char *dir, const char *name, char **input,
                                 char **expect)
{
    char p[1400];
    snprintf(p, sizeof(p), "%s/%s/input", dir, name);
    *input = slurp(p);
    snprintf(p, sizeof(p), "%s/%s/output", dir, name);
    *expect = slurp(p);
    if (*input && *expect)
        return NULL;
    const char *missing = *input ? "output" : "input";
    free(*input);
    free(*expect);
    *input = *expect = NULL;
    return missing;
}

static void put_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* The loader the data runner uses, on a throw-away folder of incomplete cases. */
static void test_rpc_case_incomplete(void)
{
    char dir[] = "/tmp/sbx-rpc-cases.XXXXXX", p[200];
    if (!mkdtemp(dir)) {
        test_cond("a temporary rpc data folder can be made", 0);
        return;
    }
    const char *names[] = {"no_output", "no_input", "complete"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        mkdir(p, 0700);
    }
    snprintf(p, sizeof(p), "%s/no_output/input", dir);
    put_file(p, "{}\n");
    snprintf(p, sizeof(p), "%s/no_input/output", dir);
    put_file(p, "{}\n");
    snprintf(p, sizeof(p), "%s/complete/input", dir);
    put_file(p, "{}\n");
    snprintf(p, sizeof(p), "%s/complete/output", dir);
    put_file(p, "{}\n");
    char *input, *expect;
    test_eq_str("an rpc case folder without output is reported, not skipped",
                rpc_case_load(dir, "no_output", &input, &expect), "output");
    test_eq_str("an rpc case folder without input is reported, not skipped",
                rpc_case_load(dir, "no_input", &input, &expect), "input");
    const char *missing = rpc_case_load(dir, "complete", &input, &expect);
    test_cond("a complete rpc case folder loads", !missing && input && expect);
    free(input);
    free(expect);
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof(p), "%s/%s/input", dir, names[i]);
        unlink(p);
        snprintf(p, sizeof(p), "%s/%s/output", dir, names[i]);
        unlink(p);
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        rmdir(p);
    }
    rmdir(dir);
}

static void test_rpc_cases(const char *dir)
{
    DIR *dh = opendir(dir);
    if (!dh) {
        test_cond("the rpc data folder exists", 0);
        return;
    }
    struct dirent *e;
    int cases = 0;
    while ((e = readdir(dh))) {
        if (e->d_name[0] == '.')
            continue;
        char *input, *expect;
        const char *missing = rpc_case_load(dir, e->d_name, &input, &expect);
        if (missing) {
            char what[400];
            snprintf(what, sizeof(what), "rpc case %s has its %s file", e->d_name,
                     missing);
            test_cond(what, 0);
            continue;
        }
        int sv[2];
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv);
        session_accept(sv[0]);
        if (send(sv[1], input, strlen(input), MSG_NOSIGNAL) < 0)
            perror("send");
        json_t *got = collect(sv[1]);
        json_t *want = json_array();
        char *save = NULL;
        for (char *line = strtok_r(expect, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save)) {
            json_t *v = json_loads(line, JSON_DECODE_ANY, NULL);
            if (v)
                json_array_append_new(want, v);
        }
        char name[300];
        snprintf(name, sizeof(name), "rpc case %s", e->d_name);
        int ok = json_equal(got, want);
        test_cond(name, ok);
        if (!ok) {
            char *g = json_dumps(got, JSON_COMPACT);
            printf("      got  %s\n", g);
            free(g);
        }
        json_decref(got);
        json_decref(want);
        close(sv[1]);
        for (int i = 0; i < 3; i++)
            ev_run(d.loop, EVRUN_NOWAIT); /* let the session notice the hang-up */
        free(input);
        free(expect);
        cases++;
    }
    closedir(dh);
    test_cond("rpc data cases were found", cases >= 5);
}

/* -- a failing allocator under rpc.c and session.c ---------------------------- */

static long alloc_budget = -1; /* allocations left before failing; -1 = never */
static long alloc_failures;

static void *chaos_malloc(size_t n)
{
    if (alloc_budget == 0) {
        alloc_failures++;
        return NULL;
    }
    if (alloc_budget > 0)
        alloc_budget--;
    return malloc(n);
}

static void test_chaos(void)
{
    static const char *lines[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.ping\"}\n",
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"sandbox.create\",\"params\":{\"id\":\"ch\",\"env\":{\"A\":\"1\"}}}\n",
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"process.exec\",\"params\":{\"sandbox\":\"ch\",\"command\":\"out hello\"}}\n",
        "[{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"sandbox.list\"},{\"jsonrpc\":\"2.0\",\"method\":\"x\"},7]\n",
        "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"sandbox.destroy\",\"params\":{\"id\":\"ch\"}}\n",
        "garbage\n",
    };
    int survived = 1;
    json_set_alloc_funcs(chaos_malloc, free);
    for (long budget = 0; budget < 400; budget += 3) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
            break;
        session_accept(sv[0]);
        alloc_budget = budget;
        for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
            if (send(sv[1], lines[i], strlen(lines[i]), MSG_NOSIGNAL) < 0)
                survived = 0;
        for (int k = 0; k < 4; k++)
            ev_run(d.loop, EVRUN_NOWAIT);
        alloc_budget = -1;
        json_decref(collect(sv[1]));
        close(sv[1]);
        for (int k = 0; k < 3; k++)
            ev_run(d.loop, EVRUN_NOWAIT);
        struct sandbox *sb = sandbox_find_any("ch");
        if (sb)
            sandbox_destroy(sb, NULL, NULL);
    }
    json_set_alloc_funcs(malloc, free);
    test_cond("rpc and session survive failing JSON allocations",
              survived && alloc_failures > 0);
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv);
    session_accept(sv[0]);
    send(sv[1], lines[0], strlen(lines[0]), MSG_NOSIGNAL);
    json_t *got = collect(sv[1]);
    test_cond("and serve normally afterwards",
              json_is_true(json_object_get(
                  json_object_get(json_array_get(got, 0), "result"), "pong")));
    json_decref(got);
    close(sv[1]);
}

int main(int argc, char **argv)
{
    const char *data = argc > 1                 ? argv[1]
                       : getenv("SBX_TESTDATA") ? getenv("SBX_TESTDATA")
                                                : "tests/data";
    signal(SIGPIPE, SIG_IGN);
    setup();
    test_utf8();
    test_obuf();
    test_states();
    test_env_cwd();
    test_split_utf8_exit();
    test_core_callbacks();
    test_destroy_cancels();
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/rpc", data);
    test_rpc_case_incomplete();
    test_rpc_cases(dir);
    test_chaos();
    session_free_all();
    sandbox_free_all();
    json_decref(d.snapshots);
    config_deinit(&d.cfg);
    return test_report();
}
