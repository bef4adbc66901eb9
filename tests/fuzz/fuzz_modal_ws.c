/*
 * fuzz_modal_ws.c - what modal_ws.c reads from Modal and from clients, on
 * hostile bytes: SandboxGetTunnels replies through modal_ws_tunnels_done
 * (matching TunnelData to the declared ports, their strings kept), and
 * SandboxGetResourceUsage replies through modal_ws_stats_done (the rates
 * between two samples: no underflow, no division by a zero window), and an
 * options.egress entry through the checks a create makes (CIDR, domain,
 * ceiling, private ranges). The handlers and modal_ws.c's records come
 * from its internal header (modal_ws_int.h); no call is ever sent.
 *
 * Input: records [kind][u16 len][bytes]; kind % 3: 0 tunnels, 1 stats,
 * 2 an egress entry (the bytes as a string).
 */
#include "fuzz_daemon.h"
#include "providers/modal/modal_ws_int.h"
#include "xalloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void stats_seen(void *data, json_t *stats, sbx_err_t *err)
{
    (void)data, (void)err;
    json_t *pct = json_object_get(json_object_get(stats, "cpu"), "percent");
    if (stats && !json_is_null(pct) && !(json_number_value(pct) >= 0))
        abort(); /* a rate from two samples is never negative (or NaN) */
    json_decref(stats);
}

static void one_stat(struct msb *ms, const uint8_t *m, size_t n)
{
    struct mws_stat *s = xcalloc(1, sizeof(*s));
    s->ms = ms;
    s->done = stats_seen;
    s->next = ms->ws->stats;
    ms->ws->stats = s;
    struct grpc_status st = {.code = GRPC_OK, .message = "", .method = "u"};
    modal_ws_stats_done(NULL, &st, m, n, s);
}

static void one_entry(struct mprov *mp, const uint8_t *m, size_t n)
{
    char *e = strndup((const char *)m, n);
    json_t *opts = json_pack("{s:{s:[s]}}", "egress", "allow", e);
    struct mws *w = NULL;
    sbx_err_t err = {0};
    if (opts && modal_ws_new(mp, opts, &w, &err) < 0 && !err.msg)
        abort(); /* every refusal says why */
    err_clear(&err);
    modal_ws_release(w);
    json_decref(opts);
    free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_daemon_setup();
    static struct mprov mp;
    if (!mp.ws_conf)
        mp.ws_conf = json_pack("{s:{s:[s, s, s, s]}}", "egress", "allow", "*.example.com",
                               "pypi.org", "203.0.113.0/24", "2001:db8::/32");
    struct msb ms;
    memset(&ms, 0, sizeof(ms));
    ms.mp = &mp;
    ms.sb = fz_sandbox("modalws");
    ms.sandbox_id = (char *)"sb-fuzz";
    ms.memory_mb = 256;
    json_t *opts = json_pack("{s:[i, {s:i, s:b}, i]}", "ports", 8080, "port", 9000,
                             "unencrypted", 1, 443);
    sbx_err_t err = {0};
    if (modal_ws_new(&mp, opts, &ms.ws, &err) < 0)
        abort();
    json_decref(opts);
    size_t off = 0;
    while (off + 3 <= size) {
        uint8_t kind = data[off];
        size_t len = (size_t)data[off + 1] << 8 | data[off + 2];
        off += 3;
        if (len > size - off)
            len = size - off;
        const uint8_t *msg = data + off;
        off += len;
        struct grpc_status st = {.code = GRPC_OK, .message = "", .method = "t"};
        if (kind % 3 == 0) {
            ms.ws->tcall = (struct grpc_call *)&st;         /* a stand-in: only cleared */
            modal_set_str(&ms.ws->fetching, ms.sandbox_id); /* no second fetch */
            modal_ws_tunnels_done(NULL, &st, msg, len, &ms);
            json_t *md = json_object();
            modal_ws_metadata(&ms, md);
            json_decref(md);
        } else if (kind % 3 == 1) {
            one_stat(&ms, msg, len);
        } else {
            one_entry(&mp, msg, len);
        }
    }
    ms.ws->tcall = NULL;
    modal_ws_release(ms.ws);
    fz_daemon_reset();
    return 0;
}
