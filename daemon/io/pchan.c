/*
 * pchan.c - the process channel's dispatcher (pchan.h): frames to the
 * handlers of their type, the per-process frames after a pid lookup, output
 * with credit, STARTED, rate-limited LOG and the MORE reassembly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/chan.h"
#include "log.h"
#include "io/pchan.h"
#include "xalloc.h"

/* ---- built-in handlers ---- */

static void on_output(struct pchan *pc, const struct sbx_chan_hdr *h,
                      const uint8_t *payload, struct pchan_proc *pp, void *proc,
                      void *privdata)
{
    if (pp->mute)
        return;
    pc->sink->output(proc, h->type == SBX_CHAN_STDERR, payload, h->len);
    /* The output may have ended the process (a limit, a reader's kill): only a
     * process that is still there is owed credit. */
    pp = pc->lookup(h->proc, &proc, pc->privdata);
    if (!pp)
        return;
    /* A peer that ignores its window cannot wrap the count. */
    pp->owed = h->len > UINT32_MAX - pp->owed ? UINT32_MAX : pp->owed + h->len;
    pchan_credit(pc, pp, proc, h->proc, 0);
}

static void on_started(struct pchan *pc, const struct sbx_chan_hdr *h,
                       const uint8_t *payload, struct pchan_proc *pp, void *proc,
                       void *privdata)
{
    json_t *v = chan_json(payload, h->len);
    json_t *op = json_object_get(v, "os_pid");
    pp->started = 1;
    if (json_is_integer(op))
        pc->sink->started(proc, (long)json_integer_value(op));
    json_decref(v);
}

static void on_log(struct pchan *pc, const struct sbx_chan_hdr *h, const uint8_t *payload,
                   struct pchan_proc *pp, void *proc, void *privdata)
{
    if (pchan_log_take(pc))
        log_info("%s: %.*s", pc->tag, (int)(h->len > pc->log_max ? pc->log_max : h->len),
                 (const char *)payload);
}

static void on_pong(struct pchan *pc, const struct sbx_chan_hdr *h,
                    const uint8_t *payload, struct pchan_proc *pp, void *proc,
                    void *privdata)
{
}

/* ---- setup ---- */

void pchan_init(struct pchan *pc, const struct pchan_sink *sink, uint32_t window,
                pchan_lookup_cb lookup, pchan_send_cb send, void *privdata,
                const char *tag)
{
    memset(pc, 0, sizeof(*pc));
    pc->sink = sink;
    pc->lookup = lookup;
    pc->send = send;
    pc->privdata = privdata;
    pc->credit_batch = window / 4;
    snprintf(pc->tag, sizeof(pc->tag), "%s", tag);
    pc->log_max = 300;
    pchan_on(pc, SBX_CHAN_STDOUT, PCHAN_PROC, on_output, NULL);
    pchan_on(pc, SBX_CHAN_STDERR, PCHAN_PROC, on_output, NULL);
    pchan_on(pc, SBX_CHAN_STARTED, PCHAN_PROC, on_started, NULL);
    pchan_on(pc, SBX_CHAN_LOG, 0, on_log, NULL);
    pchan_on(pc, SBX_CHAN_PONG, 0, on_pong, NULL);
}

void pchan_deinit(struct pchan *pc)
{
    free(pc->more);
    pc->more = NULL;
    pc->more_len = pc->more_cap = 0;
    pc->more_over = 0;
}

void pchan_on(struct pchan *pc, uint8_t type, unsigned flags, pchan_frame_cb cb,
              void *privdata)
{
    pc->on[type] = (struct pchan_handler){.cb = cb, .privdata = privdata, .flags = flags};
}

void pchan_on_range(struct pchan *pc, uint8_t lo, uint8_t hi, unsigned flags,
                    pchan_frame_cb cb, void *privdata)
{
    for (unsigned t = lo; t <= hi; t++)
        pchan_on(pc, (uint8_t)t, flags, cb, privdata);
}

void pchan_set_log(struct pchan *pc, struct log_limit *l, const char *key, size_t max)
{
    pc->log = l;
    pc->log_key = key;
    pc->log_max = max;
}

int pchan_log_take(struct pchan *pc)
{
    return log_limit_take(pc->log ? pc->log : &pc->own_log,
                          pc->log_key ? pc->log_key : pc->tag);
}

void pchan_set_more(struct pchan *pc, size_t max)
{
    pc->more_max = max;
}

/* ---- credit ---- */

void pchan_credit(struct pchan *pc, struct pchan_proc *pp, void *proc, uint32_t pid,
                  int force)
{
    if (pp->owed == 0 || (!force && pp->owed < pc->credit_batch) || !proc)
        return;
    if (pc->sink->blocked(proc))
        return;
    uint8_t v[4];
    sbx_chan_put_u32(v, pp->owed);
    if (pc->send(SBX_CHAN_CREDIT, pid, v, sizeof(v), pc->privdata) == 0)
        pp->owed = 0;
}

/* ---- dispatch ---- */

static void whole(struct pchan *pc, const struct sbx_chan_hdr *h, const uint8_t *payload)
{
    const struct pchan_handler *e = &pc->on[h->type];
    if (!e->cb) {
        pc->unexpected++;
        log_debug("%s: unexpected frame %s", pc->tag, sbx_chan_type_name(h->type));
        return;
    }
    struct pchan_proc *pp = NULL;
    void *proc = NULL;
    if (e->flags & PCHAN_PROC) {
        pp = pc->lookup(h->proc, &proc, pc->privdata);
        if (!pp || !proc) {
            pc->unknown_pid++;
            log_debug("%s: %s frame for unknown pid %u ignored", pc->tag,
                      sbx_chan_type_name(h->type), h->proc);
            return;
        }
    }
    e->cb(pc, h, payload, pp, proc, e->privdata);
}

/* MORE frames (CHANNEL.md) are collected (up to more_max) and prefixed to the
 * next frame of the same proc. */
static void more(struct pchan *pc, const struct sbx_chan_hdr *h, const uint8_t *payload)
{
    if (pc->more_proc != h->proc && (pc->more_len || pc->more_over)) {
        log_warn("%s: MORE frames for proc %u dropped", pc->tag, pc->more_proc);
        pc->more_len = 0;
        pc->more_over = 0;
    }
    pc->more_proc = h->proc;
    size_t need = pc->more_len + h->len;
    if (need > pc->more_max)
        pc->more_over = 1;
    if (!pc->more_over) {
        if (need > pc->more_cap) {
            size_t cap = pc->more_cap ? pc->more_cap : 65536;
            while (cap < need)
                cap *= 2;
            pc->more = xrealloc(pc->more, cap);
            pc->more_cap = cap;
        }
        memcpy(pc->more + pc->more_len, payload, h->len);
        pc->more_len = need;
    }
    if (h->type == SBX_CHAN_MORE)
        return;
    struct sbx_chan_hdr all = *h;
    if (pc->more_over) {
        pc->more_over = 0;
        pc->more_len = 0;
        log_warn("%s: a %s message over the limit dropped", pc->tag,
                 sbx_chan_type_name(h->type));
        if (h->type != SBX_CHAN_EXIT)
            return;
        static const char big[] =
            "{\"exit_code\":1,\"error\":\"the exit record is too large\"}";
        all.len = sizeof(big) - 1;
        whole(pc, &all, (const uint8_t *)big);
        return;
    }
    uint8_t *buf = pc->more;
    all.len = (uint32_t)need;
    /* the buffer is ours again before anything re-enters */
    pc->more = NULL;
    pc->more_len = pc->more_cap = 0;
    whole(pc, &all, buf);
    free(buf);
}

void pchan_dispatch(struct pchan *pc, const struct sbx_chan_hdr *h,
                    const uint8_t *payload)
{
    if (pc->more_max && (h->type == SBX_CHAN_MORE || pc->more_len || pc->more_over)) {
        more(pc, h, payload);
        return;
    }
    whole(pc, h, payload);
}
