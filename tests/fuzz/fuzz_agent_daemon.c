/*
 * fuzz_agent_daemon.c - the daemon's end of the agent protocol: the input
 * is what a (hostile) sbx-init writes to Docker's attach stream. It goes
 * through docker_agent.c's own attach handler (att_data: stdout = channel
 * frames, with the PONG resync; stderr = agent diagnostics), chan.c's frame
 * parser and dka_frame: PONG/HELLO handshakes with process
 * reconciliation and adoption, STDOUT/STDERR into the core's process output,
 * STARTED, EXIT, REPLAY, LOG, ERROR (resync) and DIRECT, and the file
 * frames (FS_DATA, FS_RESULT, FS_EVENT) of four fs calls in flight through
 * core/fs.c and docker_fs.c: a read (channel request 1), a stat (2), a
 * write's first chunk (3, two answers expected) and a watch (4), so that
 * garbage answers, short and long reads, unknown ids and forged events all
 * land somewhere real. The provider's internals are reached through its
 * internal header (docker_int.h) and its provider table; there is no
 * engine: the sandbox has no container id, so a channel failure ends in
 * "sandbox lost" without an engine call.
 *
 * Input: byte 0 picks the starting state (bit 0: handshake after a
 * reconnect, else running; bit 1: an attach resync in progress), byte 1
 * the piece size; then the attach stream as Docker's demultiplexer hands
 * it over: [stream byte: odd = stdout, even = stderr][u16 length][bytes]...
 */
#include "fuzz_daemon.h"
#include "core/fs.h"

#include "providers/docker/docker_int.h"

extern const struct sbx_provider sbx_provider_docker;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fs_answers;

static void fs_done(sbx_err_t *err, json_t *result, void *privdata)
{
    (void)err;
    (void)result;
    (void)privdata;
    fs_answers++;
}

static int fs_on_event(json_t *params, void *owner)
{
    (void)params;
    (void)owner;
    return 0;
}

static int fs_owner;

static struct sbx_provider dk_fuzz_ops;
static struct provider_inst dk_fuzz_inst;
static struct dk_prov dk_fuzz_prov;

/* The fake provider, with docker.c's process and sandbox release so that
 * the core frees its records as it would Docker's. Made once. */
static void fuzz_provider_once(void)
{
    if (dk_fuzz_ops.name)
        return;
    dk_fuzz_ops = fz_provider;
    dk_fuzz_ops.name = "docker";
    dk_fuzz_ops.proc_release = sbx_provider_docker.proc_release;
    dk_fuzz_ops.sb_release = sbx_provider_docker.sb_release;
    dk_fuzz_ops.fs_call = dkf_call;
    dk_fuzz_ops.fs_release = dkf_release;
    dk_fuzz_ops.fs_tar = 1;
    dk_fuzz_inst.ops = &dk_fuzz_ops;
    dk_fuzz_inst.cookie = &dk_fuzz_prov;
    dk_fuzz_inst.enabled = dk_fuzz_inst.loaded = 1;
}

/* Four file calls waiting for the agent's answers (ids 1-4), and two
 * archives (ids 5-6): a tar read by handle, a tar write. */
static void fuzz_file_calls(struct sandbox *sb)
{
    fs_start(sb, 0, FS_OP_READ,
             json_pack("{s:s, s:i, s:i}", "path", "/r", "offset", 0, "length", 4096),
             NULL, 0, 0, NULL, &fs_owner, fs_on_event, fs_done, NULL);
    fs_start(sb, 0, FS_OP_STAT, json_pack("{s:s}", "path", "/s"), NULL, 0, 0, NULL,
             &fs_owner, fs_on_event, fs_done, NULL);
    uint8_t *chunk = malloc(8);
    memcpy(chunk, "abcdefgh", 8);
    fs_start(sb, 0, FS_OP_WRITE, json_pack("{s:s}", "path", "/w"), chunk, 8, 1, NULL,
             &fs_owner, NULL, fs_done, NULL);
    fs_start(sb, 0, FS_OP_WATCH, json_pack("{s:s, s:b}", "path", "/", "recursive", 1),
             NULL, 0, 0, NULL, &fs_owner, fs_on_event, fs_done, NULL);
    fs_start(sb, 0, FS_OP_READ,
             json_pack("{s:s, s:s, s:i}", "path", "/t", "format", "tar", "length", 4096),
             NULL, 0, 0, NULL, &fs_owner, NULL, fs_done, NULL);
    chunk = malloc(8);
    memcpy(chunk, "tartarta", 8);
    fs_start(sb, 0, FS_OP_WRITE, json_pack("{s:s, s:s}", "path", "/u", "format", "tar"),
             chunk, 8, 1, NULL, &fs_owner, NULL, fs_done, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_daemon_setup();
    fuzz_provider_once();
    if (size < 2)
        return 0;
    uint8_t mode = data[0];
    size_t piece = (size_t)data[1] * 16 + 1;
    data += 2;
    size -= 2;

    struct sandbox *sb = fz_sandbox("dk");
    sb->prov = &dk_fuzz_inst;
    struct dk_sb *ds = dk_ds_new(&dk_fuzz_prov, sb);
    dka_open_channel(ds);
    /* Two processes the daemon spawned (pids 1 and 2), one not yet. */
    for (int i = 0; i < 3; i++) {
        struct process *p = fz_process(sb);
        struct dk_proc *dpp = dk_proc_new(ds, p);
        dpp->spawned = i < 2;
        dpp->pc.started = i == 0;
    }
    if (mode & 1) {
        ds->phase = PH_HANDSHAKE;
        ds->why = WHY_RECOVER;
        ds->recovering = 1;
        ds->first_hello = 1;
    } else {
        ds->phase = PH_IDLE;
        ds->ready = 1;
    }
    if (mode & 2) {
        ds->att_sync = 1;
        ds->sync_k = 0;
    }
    fs_answers = 0;
    fuzz_file_calls(sb);

    /* [stream][len hi][len lo][bytes], each cut into pieces. */
    size_t off = 0;
    while (off + 3 <= size && sb->pdata == ds) {
        int stream = data[off] & 1 ? 1 : 2;
        size_t len = (size_t)data[off + 1] << 8 | data[off + 2];
        off += 3;
        if (len > size - off)
            len = size - off;
        for (size_t k = 0; k < len && sb->pdata == ds;) {
            size_t n = len - k < piece ? len - k : piece;
            dka_att_data(NULL, stream, data + off + k, n, ds);
            k += n;
        }
        off += len;
    }
    fs_drop_owner(&fs_owner);
    fz_daemon_reset(); /* releases ds through d_sb_release */
    /* Every call was answered exactly once, however the agent behaved. */
    if (fs_answers != 6)
        abort();
    return 0;
}
