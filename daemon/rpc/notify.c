/*
 * notify.c - everything the core reports, written as JSON-RPC text: the
 * events table of core/events.h. Output is the hot path of streaming, so
 * its process.output line is built by hand (see notify_output); the rest
 * goes through jansson.
 */
#include "rpc/notify.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/conn.h"
#include "core/events.h"
#include "log.h"
#include "core/process.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "rpc/toolcall.h"
#include "core/utf8.h"
#include "wallclock.h"

static const char *stream_name[2] = {"stdout", "stderr"};

/* A follower is the one embedded in a connection (conn.h). */
static void follower_send(struct follower *f, const char *text, size_t len)
{
    struct rpc_conn *k = (struct rpc_conn *)((char *)f - offsetof(struct rpc_conn, fol));
    k->ops->send_line(k, text, len);
}

/* A notification as one line (params stolen); malloc'd, NULL if it cannot
 * be encoded. */
static char *notification_text(const char *method, json_t *params)
{
    json_t *msg = json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method,
                            "params", params);
    char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    if (!text)
        log_error("cannot encode a %s notification", method);
    return text;
}

/* -- process.output ------------------------------------------------------------ */

/*
 * One line buffer for the daemon, kept between calls: at streaming rates
 * a fresh malloc of up to 6 x NOTIFY_PIECE per piece was an mmap, a
 * page-fault storm and an munmap every time. Bounded by that size.
 */
static char *line_buffer(size_t cap)
{
    static char *line;
    static size_t line_cap;
    if (cap > line_cap) {
        char *nl = realloc(line, cap);
        if (!nl)
            return NULL;
        line = nl;
        line_cap = cap;
    }
    return line;
}

/* Which line a follower gets for a piece: base64 or not, with a time or
 * not (bit 0: base64, bit 1: time). */
static int variant_of(const struct sub *sb, int utf8_b64, int auto_b64)
{
    return (sb->enc == ENC_AUTO ? auto_b64 : utf8_b64) | (sb->timestamps ? 2 : 0);
}

/* Writes one process.output line with d as "data" (escaped) or "data_b64"
 * (variant bit 0), with "time" (bit 1), and sends it to the followers of
 * that variant. */
static void send_output_line(struct process *p, int stream, uint64_t offset,
                             const uint8_t *d, size_t n, int variant, int utf8_b64,
                             int auto_b64, int64_t ns)
{
    int as_b64 = variant & 1;
    char head[240], ts[WALLCLOCK_TEXT] = "";
    if (variant & 2)
        wallclock_format(ts, ns);
    int hl = snprintf(
        head, sizeof(head),
        "{\"jsonrpc\":\"2.0\",\"method\":\"process.output\",\"params\":{\"sandbox\":\"%s\","
        "\"pid\":%u,\"stream\":\"%s\",\"offset\":%llu,%s%s%s\"%s\":\"",
        p->sb->id, p->pid, stream_name[stream], (unsigned long long)offset,
        variant & 2 ? "\"time\":\"" : "", ts, variant & 2 ? "\"," : "",
        as_b64 ? "data_b64" : "data");
    char *line = line_buffer((size_t)hl + (as_b64 ? base64_len(n) + 1 : n * 6) + 8);
    if (!line)
        return;
    memcpy(line, head, (size_t)hl);
    size_t o = (size_t)hl;
    o += as_b64 ? base64_encode_to(line + o, d, n) : json_escape_to(line + o, d, n);
    memcpy(line + o, "\"}}", 3);
    o += 3;
    for (struct sub *sb = p->subs; sb; sb = sb->pnext)
        if (variant_of(sb, utf8_b64, auto_b64) == variant)
            follower_send(sb->f, line, o);
}

/* The hot path of streaming: the process.output line is written by hand.
 * jansson would copy the bytes into a string, check their UTF-8 again and
 * escape them into a third buffer; here they are checked once (the core
 * did) and escaped once. Ids are [A-Za-z0-9_.-], safe to embed. At most one
 * line per variant is built: text for the followers that get text, base64
 * for the others (invalid UTF-8, or "auto" followers when base64 is
 * shorter), each with or without its time. */
static void notify_output(struct process *p, const struct out_piece *pc)
{
    int have_auto = 0;
    for (struct sub *sb = p->subs; sb; sb = sb->pnext)
        have_auto |= sb->enc == ENC_AUTO;
    int utf8_b64 = !pc->valid_utf8;
    int auto_b64 =
        !pc->valid_utf8 || (have_auto && output_b64_cheaper(ENC_AUTO, pc->data, pc->len));
    unsigned need = 0;
    for (struct sub *sb = p->subs; sb; sb = sb->pnext)
        need |= 1u << variant_of(sb, utf8_b64, auto_b64);
    for (int v = 0; v < 4; v++)
        if (need & (1u << v))
            send_output_line(p, pc->stream, pc->offset, pc->data, pc->len, v, utf8_b64,
                             auto_b64, pc->ns);
}

/* A replayed piece: through jansson, as the replay always was. */
static void notify_replay(struct follower *f, struct process *p,
                          const struct out_piece *pc, enum out_enc enc, int timed)
{
    json_t *params =
        json_pack("{s:s, s:I, s:s, s:I}", "sandbox", p->sb->id, "pid", (json_int_t)p->pid,
                  "stream", stream_name[pc->stream], "offset", (json_int_t)pc->offset);
    if (!params)
        return;
    if (timed) {
        char ts[WALLCLOCK_TEXT];
        wallclock_format(ts, pc->ns);
        json_object_set_new(params, "time", json_string(ts));
    }
    if (pc->valid_utf8 && !output_b64_cheaper(enc, pc->data, pc->len)) {
        json_object_set_new(params, "data",
                            json_stringn((const char *)pc->data, pc->len));
    } else {
        char *b = base64_encode(pc->data, pc->len);
        json_object_set_new(params, "data_b64", json_string(b ? b : ""));
        free(b);
    }
    char *text = notification_text(SBX_N_OUTPUT, params);
    if (text) {
        follower_send(f, text, strlen(text));
        free(text);
    }
}

/* -- process.exit, sandbox.* ------------------------------------------------------ */

static void notify_exit(struct process *p, const struct exit_note *e)
{
    json_t *n = json_pack("{s:s, s:I, s:i, s:i, s:b, s:b, s:o}", "sandbox", p->sb->id,
                          "pid", (json_int_t)p->pid, "exit_code", e->exit_code, "signal",
                          e->signal, "timed_out", e->timed_out, "killed", e->killed,
                          "error", e->error ? json_string(e->error) : json_null());
    if (n && e->output_incomplete)
        json_object_set_new(n, "output_incomplete", json_true());
    /* Built once, sent to every follower. */
    char *text = n ? notification_text(SBX_N_EXIT, n) : NULL;
    if (!text)
        return;
    size_t len = strlen(text);
    for (struct sub *sb = p->subs; sb; sb = sb->pnext)
        follower_send(sb->f, text, len);
    free(text);
}

static void notify_status(struct sandbox *sb)
{
    /* Not xjson: a failing allocation (tests/unit's chaos allocator) only
     * loses the notification. */
    json_t *params = json_pack("{s:s, s:s}", "sandbox", sb->id, "status",
                               sandbox_status_name(sb->status));
    if (params && sb->status == SB_ERROR && sb->error)
        json_object_set_new(params, "error", json_string(sb->error));
    conn_notify_uid(sb->owner, SBX_N_STATUS, params);
}

static void notify_note(struct sandbox *sb, const char *method, json_t *params)
{
    if (params)
        json_object_set_new(params, "sandbox", json_string(sb->id));
    conn_notify_uid(sb->owner, method ? method : SBX_N_PROGRESS, params);
}

static const struct core_events rpc_events = {
    .output = notify_output,
    .replay = notify_replay,
    .exit = notify_exit,
    .status = notify_status,
    .note = notify_note,
    .tool_call = toolcall_request,
};

void notify_init(void)
{
    core_events_set(&rpc_events);
}
