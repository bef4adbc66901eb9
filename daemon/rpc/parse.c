/*
 * parse.c - the parser thread (see parse.h). jansson keeps no mutable global
 * state besides its hash seed, which it sets up thread-safely, and the values
 * a job builds are touched by one thread at a time: the parser until the job
 * is queued back, the loop after.
 */
#include "rpc/parse.h"

#include <ev.h>
#include <jansson.h>
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "io/jdepth.h"
#include "log.h"
#include "sbx_proto.h"

struct job {
    struct job *next;
    int dispose; /* a value to free, not a line to parse */
    uint64_t owner;
    parse_done_fn done;
    char *line;
    size_t len;
    json_t *v;
    int depth_ok;
    json_error_t err;
};

static pthread_t thread;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct job *todo, *todo_tail, *done, *done_tail;
static int running, stopping;
static ev_async wake;

static void push(struct job **head, struct job **tail, struct job *j)
{
    j->next = NULL;
    if (*tail)
        (*tail)->next = j;
    else
        *head = j;
    *tail = j;
}

static void *parser_main(void *arg)
{
    /* Below the loop thread: on a busy host the loop (everyone's requests)
     * goes first, the large line (one client's) waits. */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10) < 0)
        log_debug("parser thread: setpriority: %s", strerror(errno));
    pthread_mutex_lock(&mu);
    for (;;) {
        while (!todo && !stopping)
            pthread_cond_wait(&cv, &mu);
        if (stopping)
            break;
        struct job *j = todo;
        todo = j->next;
        if (!todo)
            todo_tail = NULL;
        pthread_mutex_unlock(&mu);
        if (j->dispose) {
            /* Its memory came from this thread's malloc arena: freeing it
             * here keeps the loop from waiting on that arena's lock. */
            json_decref(j->v);
            free(j);
            pthread_mutex_lock(&mu);
            continue;
        }
        j->v = json_loadb(j->line, j->len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &j->err);
        j->depth_ok = j->v && parse_depth_ok(j->v, 0);
        free(j->line);
        j->line = NULL;
        pthread_mutex_lock(&mu);
        push(&done, &done_tail, j);
        ev_async_send(D->loop, &wake);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

int parse_depth_ok(json_t *v, int depth)
{
    return jdepth_ok(v, depth, SBX_MAX_JSON_DEPTH);
}

/* On the loop: hand parsed values to their owners, in submission order. */
static void wake_cb(struct ev_loop *loop, ev_async *w, int revents)
{
    pthread_mutex_lock(&mu);
    struct job *list = done;
    done = done_tail = NULL;
    pthread_mutex_unlock(&mu);
    while (list) {
        struct job *j = list;
        list = j->next;
        j->done(j->owner, j->v, j->depth_ok, &j->err);
        free(j);
    }
}

int parse_submit(uint64_t owner, const char *line, size_t len, parse_done_fn cb)
{
    if (!running) {
        ev_async_init(&wake, wake_cb);
        ev_async_start(D->loop, &wake);
        ev_unref(D->loop); /* the thread's wakeups alone keep no loop alive */
        stopping = 0;
        if (pthread_create(&thread, NULL, parser_main, NULL) != 0) {
            ev_ref(D->loop);
            ev_async_stop(D->loop, &wake);
            log_warn("cannot start the parser thread: parsing large lines on the loop");
            return -1;
        }
        running = 1;
    }
    struct job *j = calloc(1, sizeof(*j));
    char *copy = malloc(len);
    if (!j || !copy) {
        free(j);
        free(copy);
        return -1;
    }
    memcpy(copy, line, len);
    j->owner = owner;
    j->done = cb;
    j->line = copy;
    j->len = len;
    pthread_mutex_lock(&mu);
    push(&todo, &todo_tail, j);
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    return 0;
}

void parse_dispose(json_t *v)
{
    struct job *j = running && v ? calloc(1, sizeof(*j)) : NULL;
    if (!j) {
        json_decref(v);
        return;
    }
    j->dispose = 1;
    j->v = v;
    pthread_mutex_lock(&mu);
    push(&todo, &todo_tail, j);
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
}

static void drop_list(struct job *j)
{
    while (j) {
        struct job *n = j->next;
        free(j->line);
        json_decref(j->v);
        free(j);
        j = n;
    }
}

void parse_shutdown(void)
{
    if (!running)
        return;
    pthread_mutex_lock(&mu);
    stopping = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(thread, NULL);
    ev_ref(D->loop);
    ev_async_stop(D->loop, &wake);
    drop_list(todo);
    drop_list(done);
    todo = todo_tail = done = done_tail = NULL;
    running = 0;
}
