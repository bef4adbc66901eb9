/*
 * main.c - sbxd: arguments, configuration, the listening socket (or the one
 * systemd passed), signals, readiness notification, and the event loop.
 */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/adoption.h"
#include "daemon.h"
#include "log.h"
#include "core/process.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "rpc/parse.h"
#include "rpc/fs_stream.h"
#include "rpc/session.h"
#include "core/usage.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sbxd [-c FILE] [--foreground] [--log-level LEVEL]\n"
            "       sbxd --check-config FILE\n"
            "       sbxd --version\n"
            "\n"
            "  -c, --config FILE      read the YAML configuration FILE\n"
            "      --check-config FILE validate FILE and exit (0 valid, 1 not)\n"
            "  -f, --foreground       run in the foreground (the default; for clarity)\n"
            "      --log-level LEVEL  error, warn, info or debug\n"
            "\n"
            "Environment: SBXD_SOCKET overrides the socket path; LISTEN_FDS/LISTEN_PID\n"
            "(systemd socket activation) and NOTIFY_SOCKET are honoured.\n");
}

static size_t provider_schemas(struct cfg_schema *out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; sbx_providers[i] && n < max; i++) {
        out[n].provider = sbx_providers[i]->name;
        out[n].keys = sbx_providers[i]->config_keys;
        n++;
    }
    return n;
}

/* sd_notify without libsystemd: one datagram to $NOTIFY_SOCKET. */
static void notify_systemd(const char *msg)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !path[0])
        return;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if (len >= sizeof(sa.sun_path))
        return;
    memcpy(sa.sun_path, path, len);
    if (sa.sun_path[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract namespace */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa,
               (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) < 0)
        log_debug("sd_notify: %s", strerror(errno));
    close(fd);
}

static int socket_activated(void)
{
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
    if (!pid || !fds || atoi(pid) != getpid() || atoi(fds) < 1)
        return -1;
    int fd = 3; /* SD_LISTEN_FDS_START */
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    return fd;
}

static int mkdir_parent(const char *path)
{
    char *dup = strdup(path);
    if (!dup)
        return -1;
    char *dir = dirname(dup);
    char partial[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
    size_t n = strlen(dir);
    int r = 0;
    if (n >= sizeof(partial)) {
        free(dup);
        return -1;
    }
    for (size_t i = 1; i <= n; i++) {
        if (dir[i] == '/' || dir[i] == '\0') {
            memcpy(partial, dir, i);
            partial[i] = '\0';
            if (mkdir(partial, 0755) < 0 && errno != EEXIST) {
                r = -1;
                break;
            }
        }
    }
    free(dup);
    return r;
}

static int open_listener(const char *path, unsigned mode, const char *group)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path)) {
        log_error("socket path too long: %s", path);
        return -1;
    }
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path); /* fits: checked above */
    mkdir_parent(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    /* A socket file left by a dead daemon is removed; a live one is not. */
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0) {
        if (connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            log_error("another sbxd is listening on %s", path);
            close(probe);
            close(fd);
            return -1;
        }
        close(probe);
    }
    unlink(path);
    /* Listening right after the bind, before the mode and group are set:
     * a client that sees the socket file meets at most a refusal for the
     * few instructions in between. (No bind under a temporary name and
     * rename: getpeername would give clients the temporary name, and
     * libsbx's raw file streams connect to what it gives.) The umask keeps
     * the file as narrow as the mode until chmod. */
    mode_t old = umask(0777 & ~mode);
    int r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old);
    if (r < 0) {
        log_error("bind %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (listen(fd, 512) < 0) {
        log_error("listen on %s: %s", path, strerror(errno));
        unlink(path);
        close(fd);
        return -1;
    }
    if (chmod(path, mode) < 0)
        log_warn("chmod %s: %s", path, strerror(errno));
    if (group) {
        struct group *gr = getgrnam(group);
        if (!gr)
            log_warn("socket group %s does not exist", group);
        else if (chown(path, (uid_t)-1, gr->gr_gid) < 0)
            log_warn("chown %s: %s", path, strerror(errno));
    }
    return fd;
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    for (int i = 0; i < 64; i++) {
        int fd = accept4(w->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR)
                log_warn("accept: %s", strerror(errno));
            return;
        }
        session_accept(fd);
    }
}

static double thread_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/*
 * A turn's CPU is the thread's CPU time from one prepare (the loop about to
 * sleep) to the next: one clock read per turn, not one at each end (a
 * thread's CPU clock is a real syscall, not the vDSO, and a ping is a turn of
 * its own). The span includes the epoll_wait between, whose own CPU is a
 * microsecond or so, so the figure errs on the long side.
 */
static void prepare_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
    sessions_before_sleep();
    sandboxes_before_sleep();
    double now = thread_cpu_ms();
    if (D->turn.cpu0 > 0) {
        double ms = now - D->turn.cpu0;
        D->turn.turns++;
        for (int i = 0; i < 5 && ms > (double)(1 << i); i++)
            D->turn.over[i]++;
        if (ms > D->turn.longest_ms)
            D->turn.longest_ms = ms;
    }
    D->turn.cpu0 = now;
}

/*
 * SIGTERM/SIGINT: no new sessions or calls (D->draining), then the
 * providers' shutdown_drain (Docker removes its warm pools' unused
 * containers) on the running loop, bounded by limits.shutdown_drain_ms; the
 * loop ends when they are done, at that deadline, or at a second signal.
 */
static ev_timer drain_timer;
static int drains_left;

static void drain_over(struct ev_loop *loop)
{
    ev_timer_stop(loop, &drain_timer);
    sessions_before_sleep(); /* flush what we can */
    ev_break(loop, EVBREAK_ALL);
}

static void drain_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    log_warn("shutdown: the providers did not finish within limits.shutdown_drain_ms "
             "(%lld ms); exiting without them",
             (long long)D->cfg.shutdown_drain_ms);
    drain_over(loop);
}

static void provider_drained(void *data)
{
    (void)data;
    if (--drains_left == 0)
        drain_over(D->loop);
}

static void stop_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
    if (D->draining) {
        log_info("signal %d again: exiting now", w->signum);
        drain_over(loop);
        return;
    }
    log_info("signal %d: shutting down", w->signum);
    notify_systemd("STOPPING=1");
    D->draining = 1;
    ev_io_stop(loop, &D->listen_io);
    drains_left = 0;
    for (int i = 0; i < D->nproviders && D->cfg.shutdown_drain_ms > 0; i++) {
        struct provider_inst *pi = &D->providers[i];
        if (pi->loaded && pi->ops->shutdown_drain &&
            pi->ops->shutdown_drain(pi->cookie, provider_drained, NULL) > 0)
            drains_left++;
    }
    if (drains_left == 0) {
        drain_over(loop);
        return;
    }
    ev_timer_init(&drain_timer, drain_timeout_cb,
                  (double)D->cfg.shutdown_drain_ms / 1000.0, 0.);
    ev_timer_start(loop, &drain_timer);
}

/*
 * SIGHUP: the file is read and parsed on a thread, not on the loop (a 4 MiB
 * file is a long parse on a busy host); the values are applied on the loop
 * when it is done. A SIGHUP during a reload starts another one after it.
 */
static struct {
    pthread_t thread;
    int busy, again, ok;
    ev_async done;
    char *path;
    struct cfg_schema schemas[MAX_PROVIDERS];
    size_t nschemas;
    struct sbx_config next;
    sbx_err_t err;
} reload;

static void *reload_main(void *arg)
{
    reload.ok = config_init_defaults(&reload.next) == 0 &&
                config_load_file(&reload.next, reload.path, reload.schemas,
                                 reload.nschemas, &reload.err) == 0;
    ev_async_send(D->loop, &reload.done);
    return NULL;
}

static void apply_reload(struct sbx_config *next)
{
    /* Limits and log level apply at once; socket and providers need a restart. */
    D->cfg.log_level = next->log_level;
    D->cfg.max_sessions = next->max_sessions;
    D->cfg.max_sandboxes_per_uid = next->max_sandboxes_per_uid;
    D->cfg.max_processes_per_sandbox = next->max_processes_per_sandbox;
    D->cfg.max_queued_per_sandbox = next->max_queued_per_sandbox;
    D->cfg.exec_output_bytes = next->exec_output_bytes;
    D->cfg.replay_bytes = next->replay_bytes;
    D->cfg.max_sessions_per_uid = next->max_sessions_per_uid;
    D->cfg.admin_reserved_sessions = next->admin_reserved_sessions;
    D->cfg.session_idle_timeout_ms = next->session_idle_timeout_ms;
    D->cfg.input_bytes_per_uid = next->input_bytes_per_uid;
    D->cfg.output_bytes_total = next->output_bytes_total;
    D->cfg.retained_bytes_per_sandbox = next->retained_bytes_per_sandbox;
    D->cfg.retained_bytes_total = next->retained_bytes_total;
    D->cfg.env_bytes = next->env_bytes;
    D->cfg.max_snapshots_per_uid = next->max_snapshots_per_uid;
    D->cfg.snapshot_bytes_per_uid = next->snapshot_bytes_per_uid;
    D->cfg.max_memory_limit_mb = next->max_memory_limit_mb;
    D->cfg.op_timeout_ms = next->op_timeout_ms;
    D->cfg.agent_log_lines_per_s = next->agent_log_lines_per_s;
    D->cfg.fs_chunk_bytes = next->fs_chunk_bytes;
    D->cfg.fs_transfers_per_uid = next->fs_transfers_per_uid;
    D->cfg.fs_bytes_in_flight_per_uid = next->fs_bytes_in_flight_per_uid;
    D->cfg.fs_watches_per_sandbox = next->fs_watches_per_sandbox;
    D->cfg.fs_event_queue = next->fs_event_queue;
    D->cfg.fs_list_max = next->fs_list_max;
    D->cfg.fs_handle_idle_ms = next->fs_handle_idle_ms;
    D->cfg.queued_bytes_per_uid = next->queued_bytes_per_uid;
    D->cfg.memory_per_uid = next->memory_per_uid;
    D->cfg.adopt_wait_ms = next->adopt_wait_ms;
    D->cfg.shutdown_drain_ms = next->shutdown_drain_ms;
    log_set_level(next->log_level);
}

static void reload_finish(void)
{
    if (!reload.busy)
        return;
    pthread_join(reload.thread, NULL);
    reload.busy = 0;
    free(reload.path);
    reload.path = NULL;
}

static void start_reload(void);

static void reload_done_cb(struct ev_loop *loop, ev_async *w, int revents)
{
    reload_finish();
    if (!reload.ok) {
        log_error("SIGHUP: config not reloaded: %s",
                  reload.err.msg ? reload.err.msg : "out of memory");
    } else {
        apply_reload(&reload.next);
        log_info("SIGHUP: configuration reloaded (limits, log level)");
    }
    err_clear(&reload.err);
    config_deinit(&reload.next);
    if (reload.again) {
        reload.again = 0;
        start_reload();
    }
}

static void start_reload(void)
{
    memset(&reload.next, 0, sizeof(reload.next));
    memset(&reload.err, 0, sizeof(reload.err));
    reload.nschemas = provider_schemas(reload.schemas, MAX_PROVIDERS);
    reload.path = strdup(D->cfg.path);
    if (!reload.path || pthread_create(&reload.thread, NULL, reload_main, NULL) != 0) {
        log_error("SIGHUP: cannot start the reload: %s", strerror(errno));
        free(reload.path);
        reload.path = NULL;
        return;
    }
    reload.busy = 1;
}

static void hup_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
    if (!D->cfg.path) {
        log_info("SIGHUP: no config file to reload");
        return;
    }
    if (reload.busy) {
        reload.again = 1;
        return;
    }
    start_reload();
}

static void ready_cb(void *privdata)
{
    notify_systemd("READY=1\nSTATUS=serving");
}

static void load_providers(void)
{
    for (size_t i = 0; sbx_providers[i] && D->nproviders < MAX_PROVIDERS; i++) {
        const struct sbx_provider *ops = sbx_providers[i];
        struct provider_inst *pi = &D->providers[D->nproviders++];
        pi->ops = ops;
        json_t *conf = config_provider(&D->cfg, ops->name);
        json_t *en = json_object_get(conf, "enabled");
        pi->enabled = en ? json_is_true(en) : ops->enabled_by_default;
        if (!pi->enabled)
            continue;
        sbx_err_t err = {0};
        /* Before load: a provider may finish its listing inside it. */
        if (ops->adopts_at_load)
            adoption_begin(ops->name);
        if (ops->load(conf, &pi->cookie, &err) < 0) {
            sandbox_adoption_done(ops->name);
            pi->load_error = strdup(err.msg ? err.msg : "failed to load");
            log_warn("provider %s unavailable: %s", ops->name, pi->load_error);
            err_clear(&err);
            continue;
        }
        pi->loaded = 1;
        const char *reason = NULL;
        if (ops->available(pi->cookie, &reason))
            log_info("provider %s ready", ops->name);
        else
            log_info("provider %s not available yet: %s", ops->name,
                     reason ? reason : "?");
    }
}

int main(int argc, char **argv)
{
    const char *cfg_path = NULL, *check = NULL, *level = NULL;
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"check-config", required_argument, NULL, 'C'},
        {"foreground", no_argument, NULL, 'f'},
        {"log-level", required_argument, NULL, 'l'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "c:fhV", opts, NULL)) != -1) {
        switch (o) {
        case 'c':
            cfg_path = optarg;
            break;
        case 'C':
            check = optarg;
            break;
        case 'f':
            break;
        case 'l':
            level = optarg;
            break;
        case 'V':
            printf("sbxd %s (protocol %s)\n", SBX_VERSION, SBX_PROTO_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    struct cfg_schema schemas[MAX_PROVIDERS];
    size_t ns = provider_schemas(schemas, MAX_PROVIDERS);
    if (check) {
        sbx_err_t err = {0};
        if (config_check_file(check, schemas, ns, &err) < 0) {
            fprintf(stderr, "%s\n", err.msg ? err.msg : "invalid configuration");
            err_clear(&err);
            return 1;
        }
        printf("%s: OK\n", check);
        return 0;
    }

    static struct daemon d;
    D = &d;
    D->listen_fd = -1;
    if (config_init_defaults(&D->cfg) < 0)
        return 1;
    if (cfg_path) {
        sbx_err_t err = {0};
        if (config_load_file(&D->cfg, cfg_path, schemas, ns, &err) < 0) {
            fprintf(stderr, "sbxd: %s\n", err.msg ? err.msg : "invalid configuration");
            err_clear(&err);
            return 1;
        }
    }
    config_apply_env(&D->cfg);
    if (level) {
        static const char *names[] = {"error", "warn", "info", "debug"};
        int found = 0;
        for (int i = 0; i < 4; i++)
            if (strcmp(level, names[i]) == 0) {
                D->cfg.log_level = (enum log_level)i;
                found = 1;
            }
        if (!found) {
            fprintf(stderr, "sbxd: unknown log level %s\n", level);
            return 2;
        }
    }
    log_set_level(D->cfg.log_level);
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);

    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    D->exe_path = strdup(n > 0 ? exe : argv[0]);
    D->loop = EV_DEFAULT;
    D->started_mono = ev_now(D->loop);
    D->snapshots = json_object();
    if (D->cfg.admin_group) {
        struct group *gr = getgrnam(D->cfg.admin_group);
        if (gr) {
            D->admin_gid = gr->gr_gid;
            D->have_admin_gid = 1;
        } else {
            log_warn("admin group %s does not exist", D->cfg.admin_group);
        }
    }

    int fd = socket_activated();
    if (fd >= 0) {
        D->listen_activated = 1;
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        log_info("using the socket passed by systemd");
    } else {
        fd = open_listener(D->cfg.socket_path, D->cfg.socket_mode, D->cfg.socket_group);
        if (fd < 0) {
            log_error("cannot listen on %s", D->cfg.socket_path);
            return 1;
        }
    }
    D->listen_fd = fd;

    load_providers();

    ev_io_init(&D->listen_io, accept_cb, fd, EV_READ);
    ev_io_start(D->loop, &D->listen_io);
    ev_prepare_init(&D->prepare, prepare_cb);
    ev_prepare_start(D->loop, &D->prepare);
    ev_signal_init(&D->sig_term, stop_cb, SIGTERM);
    ev_signal_start(D->loop, &D->sig_term);
    ev_signal_init(&D->sig_int, stop_cb, SIGINT);
    ev_signal_start(D->loop, &D->sig_int);
    ev_signal_init(&D->sig_hup, hup_cb, SIGHUP);
    ev_signal_start(D->loop, &D->sig_hup);
    ev_async_init(&reload.done, reload_done_cb);
    ev_async_start(D->loop, &reload.done);
    ev_unref(D->loop); /* the reload's wakeup alone keeps no loop alive */

    log_info("sbxd %s listening on %s (pid %d)", SBX_VERSION,
             D->listen_activated ? "the activated socket" : D->cfg.socket_path,
             (int)getpid());
    /* Ready once the providers have adopted what they had before a restart:
     * until then calls naming an id wait (issue 16, item 12). */
    adoption_wait(ready_cb, NULL);
    ev_run(D->loop, 0);

    parse_shutdown();
    reload_finish(); /* a reload still parsing: its result is dropped */
    err_clear(&reload.err);
    config_deinit(&reload.next);
    adoption_free_all();
    session_free_all();
    fs_stream_free_all();
    sandbox_free_all();
    usage_free_all();
    for (int i = 0; i < D->nproviders; i++)
        if (D->providers[i].loaded)
            D->providers[i].ops->unload(D->providers[i].cookie);
    for (int i = 0; i < D->nproviders; i++)
        free(D->providers[i].load_error);
    close(fd);
    if (!D->listen_activated)
        unlink(D->cfg.socket_path);
    json_decref(D->snapshots);
    free(D->exe_path);
    config_deinit(&D->cfg);
    curl_global_cleanup();
    ev_loop_destroy(D->loop);
    return 0;
}
