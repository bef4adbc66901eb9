/*
 * test_modal.c - the Modal provider's pure helpers (modal.c, through
 * modal_int.h): decoding a reply only when the call ended OK, what a
 * GetTaskId reply says about a sandbox's end, Modal failures as daemon
 * errors (unreachable -32002, else -32006 with Modal's own words), sandbox
 * ids, V2 method twins, JWT expiry, option numbers, UUIDs, and the state
 * file read at load (only a file of ours that nobody else may write, for
 * this server and version).
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "providers/modal/modal_int.h"
#include "sbx_proto.h"
#include "testhelp.h"

static struct mprov mp; /* zeroed: what the helpers read of it */

static void test_replies(void)
{
    Modal__Client__SandboxGetTaskIdResponse r;
    modal__client__sandbox_get_task_id_response__init(&r);
    static char task_id[] = "ta-1", oom[] = "OOM killed";
    r._task_id_case = MODAL__CLIENT__SANDBOX_GET_TASK_ID_RESPONSE___TASK_ID_TASK_ID;
    r.task_id = task_id;
    uint8_t buf[256];
    size_t n = modal__client__sandbox_get_task_id_response__pack(&r, buf);
    const ProtobufCMessageDescriptor *desc =
        &modal__client__sandbox_get_task_id_response__descriptor;
    struct grpc_status ok = {
        .code = GRPC_OK, .message = "", .method = "SandboxGetTaskId"};
    Modal__Client__SandboxGetTaskIdResponse *got = modal_reply(desc, &ok, buf, n);
    test_cond("an OK reply decodes",
              got && got->task_id && !strcmp(got->task_id, "ta-1"));
    test_cond("a running task has not ended", !modal_task_ended(&ok, got));
    modal_reply_free(got);
    struct grpc_status nf = {.code = GRPC_NOT_FOUND, .message = "gone", .method = "X"};
    test_cond("a failed call has no reply, whatever its bytes",
              modal_reply(desc, &nf, buf, n) == NULL);
    test_cond("no descriptor, no reply", modal_reply(NULL, &ok, buf, n) == NULL);
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    test_cond("bytes that do not decode are no reply",
              modal_reply(desc, &ok, junk, sizeof(junk)) == NULL);
    modal_reply_free(NULL);
    test_cond("NOT_FOUND means the sandbox ended", modal_task_ended(&nf, NULL));

    Modal__Client__GenericResult res;
    modal__client__generic_result__init(&res);
    res.status = 4;
    r._task_id_case = MODAL__CLIENT__SANDBOX_GET_TASK_ID_RESPONSE___TASK_ID__NOT_SET;
    r._task_result_case =
        MODAL__CLIENT__SANDBOX_GET_TASK_ID_RESPONSE___TASK_RESULT_TASK_RESULT;
    r.task_result = &res;
    n = modal__client__sandbox_get_task_id_response__pack(&r, buf);
    got = modal_reply(desc, &ok, buf, n);
    test_cond("a reply with a task result means it ended",
              got && modal_task_ended(&ok, got));
    test_eq_str("and says how", modal_result_text(got ? got->task_result : NULL),
                "timed out");
    modal_reply_free(got);
    res.exception = oom;
    test_eq_str("an exception's text wins", modal_result_text(&res), "OOM killed");
    test_eq_str("no result: ended", modal_result_text(NULL), "ended");
}

static void test_errors(void)
{
    sbx_err_t err = {0};
    struct grpc_status tr = {.code = GRPC_UNAVAILABLE,
                             .message = "connect refused",
                             .transport = 1,
                             .method = "AppGet"};
    test_cond("a transport failure is -32002 (unreachable)",
              modal_grpc_err(&mp, &err, &tr, "create") < 0 &&
                  err.code == SBX_E_UNAVAILABLE &&
                  !strcmp(json_string_value(json_object_get(err.data, "reason")),
                          "connect refused"));
    err_clear(&err);
    struct grpc_status nf = {
        .code = GRPC_NOT_FOUND, .message = "no such app", .method = "AppGet"};
    modal_grpc_err(&mp, &err, &nf, "create");
    test_cond("Modal's refusal is -32006 with its words, code and RPC",
              err.code == SBX_E_PROVIDER && strstr(err.msg, "no such app") &&
                  !strcmp(json_string_value(json_object_get(err.data, "message")),
                          "no such app") &&
                  json_integer_value(json_object_get(err.data, "grpc_status")) == 5 &&
                  !strcmp(json_string_value(json_object_get(err.data, "rpc")), "AppGet"));
    test_cond("and is kept as the provider's last error",
              strstr(mp.last_error, "AppGet") && strstr(mp.last_error, "no such app"));
    err_clear(&err);
    modal_plain_err(&err, "image build failed");
    test_cond("a plain provider error: -32006, the text as data.message",
              err.code == SBX_E_PROVIDER &&
                  !strcmp(json_string_value(json_object_get(err.data, "message")),
                          "image build failed"));
    err_clear(&err);
}

static void test_ids_and_values(void)
{
    test_cond("sb- and 22 base62 characters is a V1 id",
              modal_v1_id("sb-abcdefghijABCDEFGHIJ01"));
    test_cond("anything else is not", !modal_v1_id("sb-abcdefghijABCDEFGHIJ0") &&
                                          !modal_v1_id("sb-abcdefghijABCDEFGHI-01") &&
                                          !modal_v1_id("xx-abcdefghijABCDEFGHIJ01") &&
                                          !modal_v1_id(NULL));
    struct msb v1 = {0}, v2 = {.v2 = 1};
    test_eq_str("a V2 sandbox calls the V2 twin", modal_rpc(&v2, "SandboxWait"),
                "SandboxWaitV2");
    test_eq_str("a V1 sandbox the method itself", modal_rpc(&v1, "SandboxWait"),
                "SandboxWait");
    test_eq_str("a method without a twin is itself", modal_rpc(&v2, "ImageGetOrCreate"),
                "ImageGetOrCreate");
    test_eq_str("no sandbox: the method", modal_rpc(NULL, "SandboxCreate"),
                "SandboxCreate");

    test_cond("a JWT's exp is read from its payload",
              modal_jwt_exp("h.eyJleHAiOjE3MDAwMDAwMDAsInN1YiI6IngifQ.s") ==
                  1700000000.0);
    test_cond("a JWT without exp, or not a JWT, is 0", modal_jwt_exp("h.WzFd.s") == 0 &&
                                                           modal_jwt_exp("nodots") == 0 &&
                                                           modal_jwt_exp("a.!!!.b") == 0);

    double d = 0;
    json_t *v = json_pack("[f, s, s, s, b]", 2.0, "2.5", "abc", "", 1);
    test_cond("a number or a numeric string is a number",
              modal_opt_number(json_array_get(v, 0), &d) == 0 && d == 2.0 &&
                  modal_opt_number(json_array_get(v, 1), &d) == 0 && d == 2.5);
    test_cond("anything else is not",
              modal_opt_number(json_array_get(v, 2), &d) < 0 &&
                  modal_opt_number(json_array_get(v, 3), &d) < 0 &&
                  modal_opt_number(json_array_get(v, 4), &d) < 0);
    json_decref(v);

    char a[37], b[37];
    modal_uuid4(a);
    modal_uuid4(b);
    test_cond("a UUIDv4: 36 characters, version 4, variant 10",
              strlen(a) == 36 && a[8] == '-' && a[14] == '4' && strchr("89ab", a[19]));
    test_cond("two are different", strcmp(a, b) != 0);
}

/* ---- the state file ------------------------------------------------------------- */

static char dir[] = "/tmp/sbx-modal-state.XXXXXX";
static char path[200];

static void put(const char *text, mode_t mode)
{
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        if (write(fd, text, strlen(text)) < 0)
            perror("write");
        fchmod(fd, mode);
        close(fd);
    }
}

/* Reads the state file as load does; 1 if it gave sandboxes (and snapshots). */
static int read_state(int *snaps)
{
    json_decref(mp.snaps);
    json_decref(mp.saved);
    mp.snaps = mp.saved = NULL;
    modal_state_read(&mp);
    *snaps = (int)json_object_size(mp.snaps);
    return mp.saved && json_object_get(mp.saved, "sb-a") != NULL;
}

static void test_state_file(void)
{
    if (!mkdtemp(dir)) {
        test_skip("the state file", "no temporary directory");
        return;
    }
    snprintf(path, sizeof(path), "%s/modal-state.json", dir);
    static char url[] = "http://127.0.0.1:1";
    mp.url = url;
    int snaps = -1;
    mp.state_path = NULL;
    test_cond("no state path: an empty state",
              !read_state(&snaps) && snaps == 0 && mp.snaps);
    mp.state_path = path;
    test_cond("a missing file is an empty state", !read_state(&snaps) && snaps == 0);
    const char *good = "{\"version\":1,\"server_url\":\"http://127.0.0.1:1\","
                       "\"sandboxes\":{\"sb-a\":{\"owner\":1000}},"
                       "\"snapshots\":{\"snap-1\":{\"owner\":1000}}}";
    put(good, 0600);
    test_cond("a good file gives its sandboxes and snapshots",
              read_state(&snaps) && snaps == 1);
    put(good, 0620);
    test_cond("a file others may write is ignored", !read_state(&snaps) && snaps == 0);
    put(good, 0602);
    test_cond("world-writable too", !read_state(&snaps) && snaps == 0);
    char link[220];
    snprintf(link, sizeof(link), "%s/link.json", dir);
    put(good, 0600);
    symlink(path, link);
    mp.state_path = link;
    test_cond("a symlink is not followed", !read_state(&snaps) && snaps == 0);
    unlink(link);
    mp.state_path = path;
    put("{\"version\":2,\"server_url\":\"http://127.0.0.1:1\",\"sandboxes\":{\"sb-a\":{}}}",
        0600);
    test_cond("another version is ignored", !read_state(&snaps));
    put("{\"version\":1,\"server_url\":\"http://elsewhere\",\"sandboxes\":{\"sb-a\":{}}}",
        0600);
    test_cond("another server's file is ignored", !read_state(&snaps));
    put("{\"version\":1,", 0600);
    test_cond("a truncated file is ignored", !read_state(&snaps) && snaps == 0);
    put("{\"version\":1,\"server_url\":\"http://127.0.0.1:1\",\"sandboxes\":{}}", 0600);
    test_cond("no sandboxes: nothing to adopt", !read_state(&snaps) && mp.saved == NULL);
    json_decref(mp.snaps);
    json_decref(mp.saved);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    test_replies();
    test_errors();
    test_ids_and_values();
    test_state_file();
    return test_report();
}
