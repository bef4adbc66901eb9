/*
 * test_agent.c - drives build/sbx-init over its channel (proto/CHANNEL.md) as a
 * child process with pipes for stdin/stdout, the way the Docker provider does
 * through an attach stream: hello, processes, env and cwd, stdin, kill and
 * timeouts, credit, ping/replay/forget, malformed input, reaping, limits.
 * The direct socket, SIGTERM, tini mode and PID 1 are test_agent_init.c;
 * both share tests/unit/agent_kit.h.
 *
 *   test_agent [-v] [path/to/sbx-init]
 *
 * Without a path: $SBX_INIT, else ../sbx-init next to this binary's directory
 * (build/tests/test_agent -> build/sbx-init), else build/sbx-init.
 *
 * The PID-1 part runs the agent under `unshare --pid --fork --mount-proc` and
 * is skipped, with the reason printed, when that is not possible.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_kit.h"
#include "sbx_chan.h"
#include "testhelp.h"

/* ---- tests --------------------------------------------------------------- */

static void test_hello_and_basics(struct agent *a)
{
    struct frame f;
    int r = recv_frame(a, &f, 3000);
    test_cond("HELLO is the first frame",
              r == 1 && f.type == SBX_CHAN_HELLO && f.proc == 0);
    json_t *j = r == 1 ? frame_json(&f) : NULL;
    test_cond("HELLO says version 1, agent sbx-init, procs []",
              j && jint(j, "version") == 1 && strcmp(jstr(j, "agent"), "sbx-init") == 0 &&
                  json_array_size(json_object_get(j, "procs")) == 0 &&
                  json_is_array(json_object_get(j, "procs")));
    json_decref(j);

    struct run run;
    spawn_run(a, 1, "{\"shell\":\"echo hi; echo oops >&2\"}", &run, 5000);
    test_cond("shell spawn: STARTED with an os_pid, before any output",
              run.started && run.os_pid > 1 && run.order_ok);
    test_cond("shell spawn: stdout \"hi\\n\", stderr \"oops\\n\"",
              run.out.len == 3 && memcmp(run.out.data, "hi\n", 3) == 0 &&
                  run.err.len == 5 && memcmp(run.err.data, "oops\n", 5) == 0);
    test_cond("shell spawn: EXIT 0, signal 0, not killed, no error",
              run.exit && jint(run.exit, "exit_code") == 0 &&
                  jint(run.exit, "signal") == 0 && jfalse(run.exit, "timed_out") &&
                  jfalse(run.exit, "killed") && !json_object_get(run.exit, "error"));
    run_free(&run);

    spawn_run(a, 2, "{\"argv\":[\"/bin/false\"]}", &run, 5000);
    test_cond("argv /bin/false exits 1", run.exit && jint(run.exit, "exit_code") == 1);
    run_free(&run);

    spawn_run(a, 3, "{\"argv\":[\"no-such-binary-sbx\"]}", &run, 5000);
    test_cond("missing binary: EXIT 127 with an error, no STARTED",
              run.exit && jint(run.exit, "exit_code") == 127 && !run.started &&
                  strstr(jstr(run.exit, "error"), "No such file") &&
                  strstr(jstr(run.exit, "error"), "no-such-binary-sbx"));
    run_free(&run);

    spawn_run(a, 4, "{\"argv\":[\"/etc/passwd\"]}", &run, 5000);
    test_cond("non-executable file: EXIT 126 with an error",
              run.exit && jint(run.exit, "exit_code") == 126 &&
                  strstr(jstr(run.exit, "error"), "ermission"));
    run_free(&run);

    spawn_run(a, 5, "{\"argv\":[\"sh\",\"-c\",\"kill -USR1 $$\"]}", &run, 5000);
    test_cond("death by signal: exit_code 128+10, signal 10",
              run.exit && jint(run.exit, "exit_code") == 138 &&
                  jint(run.exit, "signal") == 10);
    run_free(&run);
}

static void test_env_cwd(struct agent *a)
{
    char json[1024], cwd[256];
    struct run run;
    snprintf(cwd, sizeof(cwd), "%s/new/deep/dir", tmpdir);
    snprintf(json, sizeof(json),
             "{\"argv\":[\"/usr/bin/env\"],\"env\":{\"FOO\":\"bar baz\",\"E\":\"\"},"
             "\"cwd\":\"%s\"}",
             cwd);
    spawn_run(a, 10, json, &run, 5000);
    const char *want = "FOO=bar baz\nE=\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                       "/usr/bin:/sbin:/bin\n";
    test_cond("env is exactly as given, plus a default PATH",
              run.exit && jint(run.exit, "exit_code") == 0 && run.out.data &&
                  strcmp((char *)run.out.data, want) == 0);
    struct stat sb;
    test_cond("cwd was created (mkdir -p)", stat(cwd, &sb) == 0 && S_ISDIR(sb.st_mode));
    run_free(&run);

    snprintf(json, sizeof(json), "{\"argv\":[\"/bin/pwd\"],\"cwd\":\"%s\"}", cwd);
    spawn_run(a, 11, json, &run, 5000);
    char wantcwd[300];
    snprintf(wantcwd, sizeof(wantcwd), "%s\n", cwd);
    test_cond("the process runs in cwd",
              run.out.data && strcmp((char *)run.out.data, wantcwd) == 0);
    run_free(&run);

    /* argv[0] is looked up in the PATH of the given env, not the agent's. */
    char bin[256], script[300];
    snprintf(bin, sizeof(bin), "%s/bin", tmpdir);
    mkdir(bin, 0755);
    snprintf(script, sizeof(script), "%s/sbx-hello", bin);
    FILE *fp = fopen(script, "w");
    if (fp) {
        fputs("echo script ran \"$1\"\n", fp); /* no #!: run by /bin/sh like execvp */
        fclose(fp);
    }
    chmod(script, 0755);
    snprintf(json, sizeof(json),
             "{\"argv\":[\"sbx-hello\",\"x\"],\"env\":{\"PATH\":\"/nonexistent:%s\"}}",
             bin);
    spawn_run(a, 12, json, &run, 5000);
    test_cond("argv[0] found through the env's PATH; #!-less script runs with sh",
              run.exit && jint(run.exit, "exit_code") == 0 && run.out.data &&
                  strcmp((char *)run.out.data, "script ran x\n") == 0);
    run_free(&run);

    spawn_run(a, 13, "{\"argv\":[\"sbx-hello\"],\"env\":{\"PATH\":\"/nonexistent\"}}",
              &run, 5000);
    test_cond("not on the env's PATH: 127",
              run.exit && jint(run.exit, "exit_code") == 127);
    run_free(&run);

    snprintf(json, sizeof(json), "{\"argv\":[\"/bin/true\"],\"cwd\":\"%s\"}", script);
    spawn_run(a, 14, json, &run, 5000);
    test_cond("cwd that cannot be created: 126 and a cwd error",
              run.exit && jint(run.exit, "exit_code") == 126 &&
                  strstr(jstr(run.exit, "error"), "cwd"));
    run_free(&run);

    /* UTF-8 and escapes from the JSON reach argv intact. */
    spawn_run(a, 15,
              "{\"argv\":[\"printf\",\"%s|\",\"\\u00e9\\ud83d\\ude00\",\"a\\\"b\\\\c\\/"
              "d\\t\"]}",
              &run, 5000);
    test_cond("\\u escapes and surrogate pairs decode to UTF-8 in argv",
              run.out.data && strcmp((char *)run.out.data,
                                     "\xc3\xa9\xf0\x9f\x98\x80|a\"b\\c/d\t|") == 0);
    run_free(&run);
}

static void test_stdin(struct agent *a)
{
    struct run run;
    memset(&run, 0, sizeof(run));
    send_str(a, SBX_CHAN_SPAWN, 20, "{\"argv\":[\"cat\"]}");
    size_t total = 3 * 1024 * 1024 + 7;
    uint8_t *data = malloc(total);
    for (size_t k = 0; k < total; k++)
        data[k] = (uint8_t)(k * 7 + k / 251);
    /* Send in frames of various sizes while reading the echo back. */
    size_t sent = 0;
    int64_t until = mono_ms() + 20000;
    run.order_ok = true;
    bool exited = false;
    while (!exited && mono_ms() < until) {
        if (sent < total) {
            size_t n = total - sent < 100000 ? total - sent : 100000;
            send_frame(a, SBX_CHAN_STDIN, 20, data + sent, n);
            sent += n;
            if (sent == total)
                send_frame(a, SBX_CHAN_STDIN_EOF, 20, NULL, 0);
        }
        struct frame f;
        while (recv_frame(a, &f, sent < total ? 0 : 200) == 1) {
            if (f.proc != 20)
                continue;
            if (f.type == SBX_CHAN_STDOUT) {
                dbuf_add(&run.out, f.data, f.len);
                send_u32(a, SBX_CHAN_CREDIT, 20, (uint32_t)f.len);
            } else if (f.type == SBX_CHAN_EXIT) {
                run.exit = frame_json(&f);
                exited = true;
                break;
            }
        }
    }
    test_cond("stdin round trip through cat (3 MiB, then STDIN_EOF)",
              run.out.len == total && memcmp(run.out.data, data, total) == 0);
    test_cond("cat exits 0 after STDIN_EOF",
              run.exit && jint(run.exit, "exit_code") == 0);
    run_free(&run);
    free(data);
}

static void test_kill_timeout(struct agent *a)
{
    struct frame f;
    send_str(a, SBX_CHAN_SPAWN, 30, "{\"shell\":\"sleep 100 & sleep 100\"}");
    json_t *j = expect(a, SBX_CHAN_STARTED, 30, &f, 3000) == 1 ? frame_json(&f) : NULL;
    int pid = j ? (int)jint(j, "os_pid") : -1;
    json_decref(j);
    test_cond("KILL: the group has sh and two sleeps",
              pid > 0 && wait_group_size(pid, 3, 3000));
    send_u32(a, SBX_CHAN_KILL, 30, SIGTERM);
    struct run run;
    memset(&run, 0, sizeof(run));
    collect(a, 30, &run, true, 5000);
    test_cond("KILL SIGTERM: EXIT 143, signal 15, killed",
              run.exit && jint(run.exit, "exit_code") == 143 &&
                  jint(run.exit, "signal") == 15 && jtrue(run.exit, "killed") &&
                  jfalse(run.exit, "timed_out"));
    test_cond("KILL: every process of the group is gone (and reaped)",
              pid > 0 && wait_group_size(pid, 0, 3000));
    run_free(&run);

    int64_t t0 = mono_ms();
    send_str(a, SBX_CHAN_SPAWN, 31,
             "{\"shell\":\"sleep 100 & sleep 100\",\"timeout_ms\":300}");
    j = expect(a, SBX_CHAN_STARTED, 31, &f, 3000) == 1 ? frame_json(&f) : NULL;
    pid = j ? (int)jint(j, "os_pid") : -1;
    json_decref(j);
    memset(&run, 0, sizeof(run));
    collect(a, 31, &run, true, 5000);
    int64_t ms = mono_ms() - t0;
    test_cond("timeout_ms: EXIT 124, timed_out, killed, signal 9",
              run.exit && jint(run.exit, "exit_code") == 124 &&
                  jtrue(run.exit, "timed_out") && jtrue(run.exit, "killed") &&
                  jint(run.exit, "signal") == 9);
    test_cond("timeout_ms 300 fires after 300 ms and well under 2 s",
              ms >= 290 && ms < 2000);
    test_cond("timeout: the whole group is gone",
              pid > 0 && wait_group_size(pid, 0, 3000));
    run_free(&run);

    /* The leader exits; a background child keeps stdout open. */
    t0 = mono_ms();
    spawn_run(a, 32, "{\"shell\":\"sleep 300 & echo started\"}", &run, 5000);
    ms = mono_ms() - t0;
    test_cond("background child holding the pipe: EXIT comes promptly (< 2 s)",
              run.exit && ms < 2000 && jint(run.exit, "exit_code") == 0);
    test_cond("... with the leader's output \"started\\n\"",
              run.out.data && strcmp((char *)run.out.data, "started\n") == 0);
    pid = run.os_pid;
    test_cond("... and the background sleep still runs",
              pid > 0 && count_group(pid) == 1);
    send_u32(a, SBX_CHAN_KILL, 32, SIGKILL);
    test_cond("KILL after EXIT still signals the leftover group",
              pid > 0 && wait_group_size(pid, 0, 3000));
    run_free(&run);

    /* A leader that exits right after writing more than a pipe buffer, with no credit. */
    send_str(a, SBX_CHAN_SPAWN, 33,
             "{\"shell\":\"sleep 300 & head -c 60000 /dev/zero\",\"window\":1000}");
    memset(&run, 0, sizeof(run));
    collect(a, 33, &run, false, 500);
    test_cond("no credit: output stops at the window", run.out.len == 1000 && !run.exit);
    send_u32(a, SBX_CHAN_CREDIT, 33, 100000);
    collect(a, 33, &run, false, 3000);
    test_cond("after the grace period, output the leader left in the pipe is delivered",
              run.out.len == 60000 && run.exit && jint(run.exit, "exit_code") == 0);
    send_u32(a, SBX_CHAN_KILL, 33, SIGKILL); /* the background sleep */
    run_free(&run);
}

static void test_credit(struct agent *a)
{
    struct run run;
    memset(&run, 0, sizeof(run));
    send_str(a, SBX_CHAN_SPAWN, 40,
             "{\"shell\":\"head -c 100 /dev/zero\",\"window\":16}");
    collect(a, 40, &run, false, 600);
    test_cond("window 16: exactly 16 bytes, then silence, no EXIT",
              run.out.len == 16 && !run.exit);
    send_u32(a, SBX_CHAN_CREDIT, 40, 50);
    collect(a, 40, &run, false, 400);
    test_cond("CREDIT 50: 66 bytes in all, still no EXIT",
              run.out.len == 66 && !run.exit);
    send_u32(a, SBX_CHAN_CREDIT, 40, 34);
    collect(a, 40, &run, false, 3000);
    test_cond("CREDIT 34: all 100 bytes, then EXIT 0",
              run.out.len == 100 && run.exit && jint(run.exit, "exit_code") == 0);
    run_free(&run);

    /* 50 MB, in order, credit granted as frames arrive (window 256 KiB). */
    int64_t t0 = mono_ms();
    spawn_run(a, 41, "{\"argv\":[\"seq\",\"1\",\"6000000\"]}", &run, 60000);
    int64_t ms = mono_ms() - t0;
    bool ok = run.exit && jint(run.exit, "exit_code") == 0 && run.out.len > 40000000;
    const char *s = run.out.data ? (const char *)run.out.data : "";
    long want = 1;
    while (ok && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (v != want || *end != '\n') {
            ok = false;
            break;
        }
        want++;
        s = end + 1;
    }
    test_cond("seq 1 6000000 (~47 MB) arrives complete and in order",
              ok && want == 6000001);
    printf("      (%zu bytes in %lld ms, %zu frames)\n", run.out.len, (long long)ms,
           run.frames);
    run_free(&run);
}

static void ping_hello(struct agent *a)
{
    struct frame f;
    send_str(a, SBX_CHAN_SPAWN, 50, "{\"argv\":[\"cat\"]}");
    expect(a, SBX_CHAN_STARTED, 50, &f, 3000);
    send_frame(a, SBX_CHAN_STDIN, 50, "abc", 3);
    struct run run;
    memset(&run, 0, sizeof(run));
    collect(a, 50, &run, true, 300);
    send_frame(a, SBX_CHAN_PING, 0, NULL, 0);
    int r = recv_frame(a, &f, 3000);
    test_cond("PING: PONG comes next", r == 1 && f.type == SBX_CHAN_PONG && f.len == 0);
    r = recv_frame(a, &f, 3000);
    json_t *j = r == 1 && f.type == SBX_CHAN_HELLO ? frame_json(&f) : NULL;
    json_t *procs = json_object_get(j, "procs"), *mine = NULL, *done = NULL;
    size_t k;
    json_t *e;
    json_array_foreach(procs, k, e) {
        if (jint(e, "proc") == 50)
            mine = e;
        if (jint(e, "proc") == 1)
            done = e;
    }
    test_cond("... then HELLO listing the running cat with its stdout offset",
              mine && jtrue(mine, "running") && jint(mine, "stdout") == 3 &&
                  jint(mine, "stderr") == 0 && !json_object_get(mine, "exit"));
    test_cond("... and exited proc 1 with its exit record",
              done && jfalse(done, "running") &&
                  jint(json_object_get(done, "exit"), "exit_code") == 0 &&
                  jint(done, "stdout") == 3);
    test_cond("... each with its command (argv joined, or the shell string)",
              mine && strcmp(jstr(mine, "command"), "cat") == 0 && done &&
                  strcmp(jstr(done, "command"), "echo hi; echo oops >&2") == 0);
    json_decref(j);
    send_frame(a, SBX_CHAN_STDIN_EOF, 50, NULL, 0);
    collect(a, 50, &run, true, 3000);
    run_free(&run);
}

static void replay_exited(struct agent *a)
{
    struct frame f;
    struct run run;
    int r;
    json_t *j;
    /* REPLAY of an exited process: marker, the bytes again, EXIT again. */
    send_str(a, SBX_CHAN_REPLAY, 1, "{\"stdout\":0,\"stderr\":0}");
    r = expect(a, SBX_CHAN_REPLAY, 1, &f, 3000);
    j = r == 1 ? frame_json(&f) : NULL;
    test_cond("REPLAY from 0 answers {stdout:0, stderr:0}",
              j && jint(j, "stdout") == 0 && jint(j, "stderr") == 0);
    json_decref(j);
    memset(&run, 0, sizeof(run));
    collect(a, 1, &run, true, 3000);
    test_cond("... then resends the ring (\"hi\\n\" / \"oops\\n\") and EXIT",
              run.out.len == 3 && memcmp(run.out.data, "hi\n", 3) == 0 &&
                  run.err.len == 5 && run.exit && jint(run.exit, "exit_code") == 0);
    run_free(&run);

    send_str(a, SBX_CHAN_REPLAY, 1, "{\"stdout\":1}");
    r = expect(a, SBX_CHAN_REPLAY, 1, &f, 3000);
    j = r == 1 ? frame_json(&f) : NULL;
    memset(&run, 0, sizeof(run));
    collect(a, 1, &run, true, 3000);
    test_cond("REPLAY from an offset resends from there",
              j && jint(j, "stdout") == 1 && jint(j, "stderr") == 0 && run.out.len == 2 &&
                  memcmp(run.out.data, "i\n", 2) == 0);
    json_decref(j);
    run_free(&run);
}

static void replay_ring(struct agent *a)
{
    struct frame f;
    struct run run;
    int r;
    json_t *j;
    /* More output than the ring keeps: replay starts at the oldest byte held. */
    spawn_run(a, 51, "{\"shell\":\"seq 1 500000\"}", &run, 20000);
    size_t total = run.out.len;
    struct dbuf first = run.out;
    memset(&run.out, 0, sizeof(run.out));
    run_free(&run);
    send_str(a, SBX_CHAN_REPLAY, 51, "{\"stdout\":0,\"stderr\":0}");
    r = expect(a, SBX_CHAN_REPLAY, 51, &f, 3000);
    j = r == 1 ? frame_json(&f) : NULL;
    json_int_t start = j ? jint(j, "stdout") : -1;
    test_cond("REPLAY beyond the 1 MiB ring starts at total - 1 MiB",
              total > (1u << 20) && start == (json_int_t)(total - (1u << 20)));
    json_decref(j);
    collect(a, 51, &run, true, 10000);
    test_cond("... and resends exactly the last 1 MiB",
              start >= 0 && run.out.len == (1u << 20) &&
                  memcmp(run.out.data, first.data + start, run.out.len) == 0 && run.exit);
    run_free(&run);
    dbuf_free(&first);
}

static void forget(struct agent *a)
{
    struct frame f;
    int r;
    json_t *j;
    size_t k;
    json_t *e;
    /* FORGET drops the record. */
    send_frame(a, SBX_CHAN_FORGET, 1, NULL, 0);
    send_frame(a, SBX_CHAN_PING, 0, NULL, 0);
    expect(a, SBX_CHAN_PONG, 0, &f, 3000);
    r = expect(a, SBX_CHAN_HELLO, 0, &f, 3000);
    j = r == 1 ? frame_json(&f) : NULL;
    bool listed = false, others = false;
    json_array_foreach(json_object_get(j, "procs"), k, e) {
        if (jint(e, "proc") == 1)
            listed = true;
        if (jint(e, "proc") == 51)
            others = true;
    }
    test_cond("FORGET: proc 1 is no longer listed, others are", j && !listed && others);
    json_decref(j);
    int logs = a->logs;
    send_frame(a, SBX_CHAN_FORGET, 1, NULL, 0);
    send_frame(a, SBX_CHAN_PING, 0, NULL, 0);
    expect(a, SBX_CHAN_HELLO, 0, &f, 3000);
    test_cond("a frame for a forgotten proc only costs a LOG", a->logs == logs + 1);
}

static void test_ping_replay_forget(struct agent *a)
{
    ping_hello(a);
    replay_exited(a);
    replay_ring(a);
    forget(a);
}

static void malformed_spawn(struct agent *a)
{
    static const char *const bad[] = {
        "{\"argv\":",                           /* truncated */
        "{\"argv\":[\"true\"],}",               /* trailing comma */
        "{\"argv\":[\"true\"]} x",              /* trailing garbage */
        "{\"argv\":[\"\\ud800\"]}",             /* lone high surrogate */
        "{\"argv\":[\"\\udc00\"]}",             /* lone low surrogate */
        "{\"argv\":[\"a\\x\"]}",                /* bad escape */
        "{\"argv\":[\"a\tb\"]}",                /* raw control character */
        "{\"argv\":[\"\xc3\x28\"]}",            /* invalid UTF-8 */
        "{\"argv\":[\"\xed\xa0\x80\"]}",        /* UTF-8 encoded surrogate */
        "{\"argv\":[\"\xc0\xaf\"]}",            /* overlong */
        "{\"argv\":[\"true\"],\"window\":012}", /* leading zero */
        "{\"argv\":[\"true\"],\"window\":1.5}", /* not an integer */
        "{\"argv\":[\"true\"],\"window\":0}",   /* zero window */
        "{\"argv\":[\"true\"],\"timeout_ms\":-1}",
        "{\"argv\":[\"true\"],\"argv\":[\"false\"]}", /* duplicate key */
        "{\"argv\":[]}",
        "{\"argv\":[\"a\\u0000b\"]}", /* NUL inside a C string */
        "{\"argv\":[\"true\"],\"shell\":\"true\"}",
        "{\"shell\":1}",
        "{\"code\":\"1\"}",
        "{\"argv\":[\"true\"],\"env\":{\"A=B\":\"x\"}}",
        "{\"argv\":[\"true\"],\"env\":{\"A\":1}}",
        "{\"argv\":[\"true\"],\"cwd\":\"relative\"}",
        "[\"true\"]",
        "",
        "nul",
        "{\"argv\":[\"true\"]}\x01",
    };
    size_t nbad = sizeof(bad) / sizeof(bad[0]), rejected = 0;
    for (size_t k = 0; k < nbad; k++) {
        struct run run;
        spawn_run(a, 100 + (uint32_t)k, bad[k], &run, 3000);
        if (run.exit && jint(run.exit, "exit_code") == 126 && !run.started &&
            strlen(jstr(run.exit, "error")) > 0)
            rejected++;
        else
            printf("      not rejected: %s\n", bad[k]);
        run_free(&run);
    }
    test_cond("every bad SPAWN payload gets EXIT 126 with an error", rejected == nbad);
}

static void malformed_nesting(struct agent *a)
{
    /* Deep nesting is capped. */
    struct dbuf deep = {0};
    dbuf_add(&deep, "{\"argv\":[\"true\"],\"x\":", 21);
    for (int k = 0; k < 40; k++)
        dbuf_add(&deep, "[", 1);
    for (int k = 0; k < 40; k++)
        dbuf_add(&deep, "]", 1);
    dbuf_add(&deep, "}", 1);
    struct run run;
    spawn_run(a, 140, (const char *)deep.data, &run, 3000);
    test_cond("JSON nested 40 deep is rejected",
              run.exit && strstr(jstr(run.exit, "error"), "deep"));
    run_free(&run);
    dbuf_free(&deep);
    spawn_run(
        a, 141,
        "{\"argv\":[\"true\"],\"x\":[[[[[[[[[[{\"a\":[1,-2.5e3,true,false,null,\"\"]}"
        "]]]]]]]]]],\"y\":{}, \"timeout_ms\":0 ,\"window\":65536,\"env\":null}",
        &run, 3000);
    test_cond("valid JSON with every value type and unknown keys is accepted",
              run.exit && jint(run.exit, "exit_code") == 0 && run.started);
    run_free(&run);
}

static void malformed_frames(struct agent *a)
{
    int logs = a->logs;
    send_frame(a, SBX_CHAN_KILL, 141, "\0\0", 2);
    send_frame(a, 0x77, 0, "zz", 2);
    send_u32(a, SBX_CHAN_KILL, 9999, 9);
    send_str(a, SBX_CHAN_REPLAY, 141, "{\"stdout\":-1}");
    send_str(a, SBX_CHAN_SPAWN, 141, "{\"argv\":[\"true\"]}"); /* exists */
    send_str(a, SBX_CHAN_SPAWN, 0, "{\"argv\":[\"true\"]}");
    /* Late CREDIT and stdin for a gone process are normal: silent. */
    send_u32(a, SBX_CHAN_CREDIT, 9998, 100);
    send_frame(a, SBX_CHAN_STDIN, 9998, "x", 1);
    send_frame(a, SBX_CHAN_STDIN_EOF, 9998, NULL, 0);
    struct frame f;
    send_frame(a, SBX_CHAN_PING, 0, NULL, 0);
    expect(a, SBX_CHAN_HELLO, 0, &f, 3000);
    test_cond("six bad but well-framed frames: six LOGs, no ERROR",
              a->logs == logs + 6 && a->errors == 0);

    send_frame(a, SBX_CHAN_SNAPSHOT, 0, NULL, 0);
    int r = expect(a, SBX_CHAN_SNAP_DATA, 0, &f, 3000);
    json_t *j = r == 1 ? frame_json(&f) : NULL;
    test_cond("SNAPSHOT: SNAP_DATA {error}", j && strlen(jstr(j, "error")) > 0);
    json_decref(j);

    /* A process that never reads its stdin: the buffer stops at 8 MiB. */
    send_str(a, SBX_CHAN_SPAWN, 144, "{\"argv\":[\"sleep\",\"100\"]}");
    expect(a, SBX_CHAN_STARTED, 144, &f, 3000);
    logs = a->logs;
    static uint8_t mib[1 << 20];
    for (int k = 0; k < 10; k++)
        send_frame(a, SBX_CHAN_STDIN, 144, mib, sizeof(mib));
    send_frame(a, SBX_CHAN_PING, 0, NULL, 0);
    expect(a, SBX_CHAN_HELLO, 0, &f, 3000);
    test_cond("stdin beyond 8 MiB buffered: dropped with a LOG", a->logs > logs);
    send_u32(a, SBX_CHAN_KILL, 144, SIGKILL);
    struct run kr;
    memset(&kr, 0, sizeof(kr));
    collect(a, 144, &kr, true, 3000);
    test_cond("... and the process can still be killed",
              kr.exit && jint(kr.exit, "signal") == SIGKILL);
    run_free(&kr);
}

static void malformed_header(struct agent *a)
{
    struct frame f;
    int r;
    json_t *j;
    struct run run;
    /* A broken header: ERROR, input dropped until a PING. */
    static const uint8_t broken[SBX_CHAN_HDR] = {
        SBX_CHAN_SPAWN, 1, 0, 0, 0, 0, 0, 9, 0, 0, 0, 2};
    write_all(a->in, broken, sizeof(broken));
    r = expect(a, SBX_CHAN_ERROR, 0, &f, 3000);
    j = r == 1 ? frame_json(&f) : NULL;
    test_cond("malformed header (flags set): ERROR {message}",
              j && strlen(jstr(j, "message")) > 0);
    json_decref(j);
    /* Garbage and a whole valid SPAWN frame are discarded while out of sync. */
    write_all(a->in, "garbage\x50\0\0", 10);
    send_str(a, SBX_CHAN_SPAWN, 142, "{\"argv\":[\"true\"]}");
    send_frame(a, SBX_CHAN_PING, 0, NULL, 0);
    r = expect(a, SBX_CHAN_PONG, 0, &f, 3000);
    test_cond("... resync at the next PING: PONG", r == 1);
    r = expect(a, SBX_CHAN_HELLO, 0, &f, 3000);
    j = r == 1 ? frame_json(&f) : NULL;
    bool listed = false;
    size_t k;
    json_t *e;
    json_array_foreach(json_object_get(j, "procs"), k, e) {
        if (jint(e, "proc") == 142)
            listed = true;
    }
    test_cond("... and the SPAWN sent while out of sync was dropped", j && !listed);
    json_decref(j);
    spawn_run(a, 143, "{\"shell\":\"echo back\"}", &run, 3000);
    test_cond("... and the channel works again",
              run.out.data && strcmp((char *)run.out.data, "back\n") == 0);
    run_free(&run);
}

static void malformed_length(struct agent *a)
{
    struct frame f;
    int r;
    /* Too long a length is a broken header too. */
    static const uint8_t huge[SBX_CHAN_HDR] = {SBX_CHAN_STDIN, 0, 0, 0, 0, 0, 0, 1,
                                               0x10,           0, 0, 1};
    int errors = a->errors;
    write_all(a->in, huge, sizeof(huge));
    send_frame(a, SBX_CHAN_PING, 0, NULL, 0);
    r = expect(a, SBX_CHAN_PONG, 0, &f, 3000);
    test_cond("length over 1 MiB: ERROR, then PING resyncs",
              r == 1 && a->errors == errors + 1);
}

static void test_malformed(struct agent *a)
{
    malformed_spawn(a);
    malformed_nesting(a);
    malformed_frames(a);
    malformed_header(a);
    malformed_length(a);
}

static void test_reaping(struct agent *a)
{
    struct run run;
    spawn_run(a, 60, "{\"shell\":\"sleep 0.2 & exit 0\"}", &run, 3000);
    test_cond("sh -c 'sleep 0.2 & exit 0': EXIT 0 promptly",
              run.exit && jint(run.exit, "exit_code") == 0 && run.ms < 1000);
    run_free(&run);
    int zombies, all;
    count_children(a->pid, &zombies, &all);
    test_cond("the orphaned sleep is reparented to the agent (subreaper)", all >= 1);
    int64_t until = mono_ms() + 3000;
    do {
        sleep_ms(50);
        count_children(a->pid, &zombies, &all);
    } while ((all > 0 || zombies > 0) && mono_ms() < until);
    test_cond("... and reaped: no zombies, no children left", zombies == 0 && all == 0);
}

static void test_too_many(struct agent *a)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 1024) {
        char why[80];
        snprintf(why, sizeof(why), "RLIMIT_NOFILE %llu < 1024",
                 (unsigned long long)rl.rlim_cur);
        test_skip("256 processes tracked, the 257th SPAWN refused", why);
        return;
    }
    struct frame f;
    /* Some procs are still recorded from earlier tests: fill up to 256. */
    send_frame(a, SBX_CHAN_PING, 0, NULL, 0);
    expect(a, SBX_CHAN_HELLO, 0, &f, 3000);
    json_t *j = frame_json(&f);
    size_t have = json_array_size(json_object_get(j, "procs"));
    json_decref(j);
    size_t started = 0;
    uint32_t id = 1000;
    for (; have + started < 256; id++) {
        send_str(a, SBX_CHAN_SPAWN, id, "{\"argv\":[\"cat\"]}");
        if (expect(a, SBX_CHAN_STARTED, id, &f, 3000) == 1)
            started++;
        else
            break;
    }
    test_cond("256 processes can be tracked", have + started == 256);
    struct run run;
    spawn_run(a, 2000, "{\"argv\":[\"true\"]}", &run, 3000);
    test_cond("the 257th SPAWN: EXIT with \"too many processes\"",
              run.exit && strstr(jstr(run.exit, "error"), "too many processes"));
    run_free(&run);
    for (uint32_t p = 1000; p < id; p++)
        send_frame(a, SBX_CHAN_STDIN_EOF, p, NULL, 0);
    size_t exits = 0;
    int64_t until = mono_ms() + 10000;
    while (exits < started && mono_ms() < until)
        if (recv_frame(a, &f, 1000) == 1 && f.type == SBX_CHAN_EXIT && f.proc >= 1000) {
            exits++;
            send_frame(a, SBX_CHAN_FORGET, f.proc, NULL, 0);
        }
    test_cond("... all of them exit on STDIN_EOF", exits == started);
    spawn_run(a, 2001, "{\"argv\":[\"true\"]}", &run, 3000);
    test_cond("after FORGET there is room again",
              run.exit && jint(run.exit, "exit_code") == 0);
    run_free(&run);
}

int main(int argc, char **argv)
{
    int st = agent_kit_main(argc, argv);
    if (st < 0) {
        test_cond("sbx-init binary exists", 0);
        return test_report();
    }
    if (st)
        return st;

    struct agent a;
    if (agent_start_plain(&a) < 0) {
        perror("agent_start");
        return 1;
    }
    test_hello_and_basics(&a);
    test_env_cwd(&a);
    test_stdin(&a);
    test_kill_timeout(&a);
    test_credit(&a);
    test_ping_replay_forget(&a);
    test_malformed(&a);
    test_reaping(&a);
    test_too_many(&a);
    test_cond("no ERROR frame outside the malformed-header tests", a.errors == 2);
    close(a.in);
    a.in = -1;
    st = agent_wait(&a, 3000);
    test_cond("the agent exits 0 on channel EOF",
              st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    agent_close(&a);

    agent_kit_end();
    return test_report();
}
