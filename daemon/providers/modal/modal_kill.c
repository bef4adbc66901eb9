/*
 * modal_kill.c - ending a tagged command in a Modal sandbox from outside:
 * Modal has no call that signals an exec, so a second exec (the killer
 * below) finds the command's shell by the tag in its argv ($0 =
 * "sbxd-<tag>") and signals what runs below it. Processes (modal_proc.c)
 * and tar archives (modal_fs.c, modal_fstar.c) use it; nobody waits for the
 * killer (killing twice does no harm) but at shutdown: the provider's
 * shutdown_drain then counts the ends it sent (struct mdrain) until Modal
 * answered them.
 */
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "providers/modal/modal_int.h"

/* Signals what runs below the wrapper tagged $0 with signal $1. SIGKILL ends
 * the wrapper's process group (when it leads one) and its whole process tree,
 * found through /proc and stopped first so nothing forks away in between.
 * Other signals go to the tree below the wrapper only: the wrapper then exits
 * with its child's status, as if the command had been signalled directly.
 * The pattern "sbx[d]-TAG" matches the wrapper's argv but neither grep's nor
 * this shell's. */
static const char KILLER[] =
    "s=$1; p=; i=0\n"
    "while [ -z \"$p\" ] && [ $i -lt 20 ]; do\n"
    "  for f in $(grep -lsa \"sbx[d]-$0\" /proc/[0-9]*/cmdline 2>/dev/null); do\n"
    "    x=${f#/proc/}; x=${x%/cmdline}\n"
    "    [ \"$x\" != \"$$\" ] && p=$x && break\n"
    "  done\n"
    "  [ -n \"$p\" ] || { sleep 0.1; i=$((i+1)); }\n"
    "done\n"
    "case \"$p\" in ''|*[!0-9]*) exit 0;; esac\n"
    "t=\" $p \"\n"
    "scan() {\n"
    "  c=1; n=0\n"
    "  while [ $c = 1 ] && [ $n -lt 8 ]; do\n"
    "    c=0; n=$((n+1))\n"
    "    for x in /proc/[0-9]*; do\n"
    "      y=${x#/proc/}\n"
    "      case \"$t\" in *\" $y \"*) continue;; esac\n"
    "      { read -r l <\"$x/stat\"; } 2>/dev/null || continue\n"
    "      set -- ${l##*) }\n"
    "      case \"$t\" in *\" $2 \"*) t=\"$t$y \"; c=1;; esac\n"
    "    done\n"
    "  done\n"
    "}\n"
    "scan\n"
    "g=\n"
    "if { read -r l <\"/proc/$p/stat\"; } 2>/dev/null; then set -- ${l##*) }; "
    "[ \"$3\" = \"$p\" ] && g=$p; fi\n"
    "if [ \"$s\" = 9 ]; then [ -n \"$g\" ] && kill -STOP -- -$g 2>/dev/null; "
    "kill -STOP $t 2>/dev/null; scan; fi\n"
    "if [ \"$s\" = 9 ]; then [ -n \"$g\" ] && kill -9 -- -$g 2>/dev/null; kill -9 $t "
    "2>/dev/null\n"
    "else t=${t# $p }; [ -n \"$t\" ] && kill -$s $t 2>/dev/null; fi\n";

static void fire_and_forget_done(struct grpc_call *c, const struct grpc_status *st,
                                 const uint8_t *msg, size_t len, void *privdata)
{
    if (st->code != GRPC_OK)
        log_warn("modal: kill exec failed: %s: %s", grpc_code_name(st->code),
                 st->message);
}

void modal_drain_done(struct grpc_call *c, const struct grpc_status *st,
                      const uint8_t *msg, size_t len, void *privdata)
{
    struct mdrain *d = privdata;
    if (st->code != GRPC_OK)
        log_warn("modal: at shutdown: %s: %s", grpc_code_name(st->code), st->message);
    if (--d->pending == 0 && d->done) {
        void (*done)(void *) = d->done;
        d->done = NULL;
        done(d->data);
    }
}

void modal_drain_count(struct mdrain *d, struct grpc_call *c)
{
    if (d && c)
        d->pending++;
}

void modal_kill_send(struct msb *ms, const char *tag, int sig, struct mdrain *d)
{
    grpc_done_cb cb = d ? modal_drain_done : fire_and_forget_done;
    struct grpc_call *c;
    struct mprov *mp = ms->mp;
    const char *task_id = ms->task_id;
    char signum[16];
    snprintf(signum, sizeof(signum), "%d", sig);
    char a0[] = "sh", a1[] = "-c";
    char *argv[] = {a0, a1, (char *)KILLER, (char *)tag, signum};
    if (ms->rt_mode == RT_ON && ms->rt_task && strcmp(ms->rt_task, task_id) == 0) {
        char id[40];
        modal_uuid4(id);
        Modal__TaskCommandRouter__TaskExecStartRequest rq =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_START_REQUEST__INIT;
        rq.task_id = (char *)task_id;
        rq.exec_id = id;
        rq.command_args = argv;
        rq.n_command_args = 5;
        rq._timeout_secs_case =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_START_REQUEST___TIMEOUT_SECS_TIMEOUT_SECS;
        rq.timeout_secs = 30;
        c = modal_router_unary(ms, "TaskExecStart", &rq.base, UNARY_TIMEOUT_S, cb, d);
        grpc_call_retry_budget(c, mp->retry_budget_s);
        modal_drain_count(d, c);
        return;
    }
    Modal__Client__ContainerExecRequest req = MODAL__CLIENT__CONTAINER_EXEC_REQUEST__INIT;
    req.task_id = (char *)task_id;
    req.command = argv;
    req.n_command = 5;
    req.timeout_secs = 30;
    /* Killing twice does no harm: this one may retry through an outage. */
    c = grpc_unary(&mp->ch, "ContainerExec", &req.base, UNARY_TIMEOUT_S, cb, d);
    grpc_call_retry_budget(c, mp->retry_budget_s);
    modal_drain_count(d, c);
}
