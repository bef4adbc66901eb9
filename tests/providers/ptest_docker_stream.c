/*
 * ptest_docker_stream.c - large streams to a slow reader: bounded
 * memory and every byte in order, over the direct channel and over the
 * attach stream only (direct_channel: false).
 *
 *   ptest_docker_stream SBXD BUILD_DIR TMPDIR
 *
 * One part of the main Docker suite (dk_suite.h: its sbxd, config and calls;
 * the environment is docker.sh's, see ptest_docker.c), run by
 * tests/providers/docker.sh.
 *   SBX_STREAM_MB          size of the slow-reader stream test (default 256)
 */

#include <curl/curl.h>
#include <fcntl.h>
#include <grp.h>
#include <stdint.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "dk_suite.h"
#include "testhelp.h"

/* Bytes of the ordered stream: "B%08d\n" + chunk, repeated. */
static char chunk[1 << 20];
static size_t chunk_len;

struct gen {
    uint64_t block;
    size_t pos; /* in header+chunk */
    char hdr[16];
};

static int gen_check(struct gen *g, const char *d, size_t n)
{
    while (n > 0) {
        size_t hl = 10;
        if (g->pos == 0)
            snprintf(g->hdr, sizeof(g->hdr), "B%08llu\n", (unsigned long long)g->block);
        if (g->pos < hl) {
            size_t k = hl - g->pos < n ? hl - g->pos : n;
            if (memcmp(g->hdr + g->pos, d, k) != 0)
                return -1;
            g->pos += k, d += k, n -= k;
            continue;
        }
        size_t cp = g->pos - hl;
        size_t k = chunk_len - cp < n ? chunk_len - cp : n;
        if (memcmp(chunk + cp, d, k) != 0)
            return -1;
        g->pos += k, d += k, n -= k;
        if (g->pos == hl + chunk_len) {
            g->pos = 0;
            g->block++;
        }
    }
    return 0;
}

/* Starts the stream of mb MB in sandbox id: the chunk copied in, then a loop that
 * prints it in numbered blocks; its pid, *total the bytes it will print. */
static json_int_t stream_start(conn *c, const char *id, int mb, uint64_t *total)
{
    chunk_len = 0;
    for (int k = 0; chunk_len + 8 < sizeof(chunk) - 64 * 1024; k++)
        chunk_len +=
            (size_t)snprintf(chunk + chunk_len, sizeof(chunk) - chunk_len, "%07d\n", k);
    uint64_t blocks = ((uint64_t)mb << 20) / (chunk_len + 10);
    *total = blocks * (chunk_len + 10);
    json_t *r;
    json_t *in = json_pack("{s:s, s:s, s:s%}", "sandbox", id, "command",
                           "cat > /tmp/chunk", "stdin", chunk, chunk_len);
    r = cn_call(c, "process.exec", in);
    json_decref(r);
    char cmd[256];
    snprintf(cmd, sizeof(cmd),
             "i=0; while [ $i -lt %llu ]; do printf 'B%%08d\\n' $i; cat /tmp/chunk; "
             "i=$((i+1)); done",
             (unsigned long long)blocks);
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", id, "command", cmd));
    json_int_t pid = res_int(r, "pid");
    json_decref(r);
    return pid;
}

/* mb MB of numbered lines from sandbox `id` of the sbxd `spid`, to a reader that
 * stalls, then reads slowly, then fast: bounded memory, every byte in order. */
static void stream_slow_reader(conn *c, pid_t spid, const char *id, int mb,
                               const char *what)
{
    int slow_build = getenv("SBX_SANITIZED") || getenv("SBX_VALGRIND");
    /* sanitizers keep freed memory in quarantine: RSS says less there */
    long rss_limit = slow_build ? 400 * 1024 : 200 * 1024;
    char name[120];
    uint64_t total;
    json_int_t pid = stream_start(c, id, mb, &total);
    /* A slow reader: nothing for 3 s. sbxd must push back, not buffer. */
    sleep(3);
    long rss = pt_rss_kb(spid);
    snprintf(name, sizeof(name),
             "%s: sbxd memory stays bounded while the client does not read", what);
    test_cond(name, rss > 0 && rss < rss_limit);
    printf("      sbxd RSS with a stalled %d MB stream: %ld KiB\n", mb, rss);
    struct gen g = {0};
    uint64_t got = 0, expect_off = 0;
    int bad = 0, exited = 0, code = -1;
    double t0 = now_ms();
    double until = t0 + 600000;
    /* then slowly for a while (small pauses), then as fast as we can */
    int slow_msgs = 1000;
    long max_rss = rss;
    while (!exited && now_ms() < until) {
        json_t *m = cn_read(c, 10000);
        if (!m) {
            if (c->closed)
                break;
            continue;
        }
        const char *meth = json_string_value(json_object_get(m, "method"));
        json_t *p = json_object_get(m, "params");
        if (meth && strcmp(meth, "process.output") == 0 &&
            json_integer_value(json_object_get(p, "pid")) == pid) {
            if (slow_msgs-- > 0) {
                usleep(2000);
                if (slow_msgs % 100 == 0 && pt_rss_kb(spid) > max_rss)
                    max_rss = pt_rss_kb(spid);
            }
            const char *d = json_string_value(json_object_get(p, "data"));
            size_t n = json_string_length(json_object_get(p, "data"));
            if ((uint64_t)json_integer_value(json_object_get(p, "offset")) !=
                    expect_off ||
                !d)
                bad = 1;
            if (!bad && gen_check(&g, d, n) < 0)
                bad = 1;
            expect_off += n;
            got += n;
        } else if (meth && strcmp(meth, "process.exit") == 0 &&
                   json_integer_value(json_object_get(p, "pid")) == pid) {
            exited = 1;
            code = (int)json_integer_value(json_object_get(p, "exit_code"));
        }
        json_decref(m);
    }
    double secs = (now_ms() - t0) / 1000.0;
    snprintf(name, sizeof(name), "%s: memory stays bounded while it reads slowly", what);
    test_cond(name, max_rss < rss_limit);
    snprintf(name, sizeof(name), "%s: every byte arrived, in order", what);
    test_cond(name, !bad && got == total);
    snprintf(name, sizeof(name), "%s: then the exit", what);
    test_cond(name, exited && code == 0);
    printf(
        "      %d MB stream: %llu bytes in %.1f s after the stall (%.0f MB/s), sbxd RSS "
        "at most %ld KiB\n",
        mb, (unsigned long long)got, secs, got / 1048576.0 / secs, max_rss);
}

static void test_stream(conn *c)
{
    /* 1 GiB; 256 MiB under sanitizers or valgrind (time). */
    int slow_build = getenv("SBX_SANITIZED") || getenv("SBX_VALGRIND");
    int mb = getenv("SBX_STREAM_MB") ? atoi(getenv("SBX_STREAM_MB"))
             : slow_build            ? 256
                                     : 1024;
    /* The stream may take a minute on a loaded machine: it is about
     * backpressure, not the default command timeout. */
    json_decref(create(c, "big1", json_pack("{s:i}", "command_timeout_ms", 600000)));
    stream_slow_reader(c, main_pid, "big1", mb, "slow reader");
    destroy(c, "big1");
}

/* An sbxd told not to use the direct socket (direct_channel: false): everything
 * through Docker's attach stream, the way a remote engine is driven. */
static void test_attach_only(void)
{
    pid_t pid;
    conn *c = start_other("attach", docker_host, "    direct_channel: false\n", &pid);
    json_t *r = c && docker_up(c) ? create(c, "att1", NULL) : NULL;
    test_cond("attach only: the attach stream is the channel",
              c && strcmp(channel_of(r), "attach") == 0);
    json_decref(r);
    if (c) {
        test_cond("attach only: exec", exec_ok(c, "att1", "echo hi; echo e >&2", "hi\n"));
        r = cn_call(c, "process.exec",
                    json_pack("{s:s, s:s, s:s}", "sandbox", "att1", "command",
                              "cat | wc -c", "stdin", "12345"));
        test_eq_str("attach only: stdin", res_str(r, "stdout"), "5\n");
        json_decref(r);
        stream_slow_reader(c, pid, "att1", 64, "attach only");
        destroy(c, "att1");
        cn_close(c);
    }
    stop_sbxd(pid, SIGTERM);
}

int main(int argc, char **argv)
{
    conn *c;
    int st = dk_suite_start(argc, argv, "main-stream", &c);
    if (st)
        return st;
    DK_STEP(test_attach_only());
    if (c)
        DK_STEP(test_stream(c));
    dk_suite_end(c);
    return test_report();
}
