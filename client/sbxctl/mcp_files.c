/*
 * mcp_files.c - the file tools of `sbxctl mcp`, on fs.* in the command
 * sandbox (proto/PROTOCOL.md "Files"), modelled on the reference MCP
 * filesystem server: read_file, write_file, edit_file (exact replacement),
 * list_directory, directory_tree, move_file, search_files, get_file_info.
 * Their argument tables are in mcp_tools.c with the other tools'. Bounds:
 * what one call reads or returns is at most --max-output bytes and one fs
 * chunk (limits.fs_chunk_bytes); a listing is one fs.list page.
 */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_tools.h"
#include "sbxctl.h"

static const char *arg_str(struct call *c, const char *key)
{
    return json_string_value(json_object_get(c->args, key));
}

static void failed(struct call *c, const sbx_rpc_error *err, const char *what)
{
    mcp_answer_error(c, "%s: %s", what, mcp_errtext(c->m, err));
}

/* Starts method on the command sandbox once it is ready. */
static void call_sb(struct call *c, const char *method, json_t *params, dreply_fn fn)
{
    if (!c->sandbox)
        c->sandbox = strdup(c->slot->id);
    json_object_set_new(params, "sandbox", json_string(c->sandbox));
    if (mcp_dcall(c, method, params, fn) < 0)
        mcp_answer_error(c, "cannot reach sbxd");
}

/* ---- read_file --------------------------------------------------------------------- */

static void read_done(struct call *c, json_t *r, const sbx_rpc_error *err)
{
    if (!r) {
        failed(c, err, "cannot read the file");
        return;
    }
    json_t *out = json_pack(
        "{s:O, s:O, s:O, s:O, s:O}", "path", json_object_get(r, "path"), "size",
        json_object_get(r, "size"), "offset", json_object_get(r, "offset"), "length",
        json_object_get(r, "length"), "eof", json_object_get(r, "eof"));
    json_t *d = json_object_get(r, "data");
    if (d) {
        json_object_set(out, "content", d);
        mcp_answer(c, out, 0, json_string_value(d));
    } else {
        json_object_set(out, "content_b64", json_object_get(r, "data_b64"));
        mcp_answer(c, out, 0, NULL);
    }
}

static void read_ready(struct call *c)
{
    json_int_t len = (json_int_t)c->m->conf.max_output;
    json_t *l = json_object_get(c->args, "length");
    if (json_is_integer(l) && json_integer_value(l) < len)
        len = json_integer_value(l);
    json_t *o = json_object_get(c->args, "offset");
    call_sb(c, SBX_M_FS_READ,
            json_pack("{s:s, s:I, s:I}", "path", arg_str(c, "path"), "offset",
                      json_is_integer(o) ? json_integer_value(o) : 0, "length", len),
            read_done);
}

void mcpf_read_start(struct call *c)
{
    mcp_slot_use(c, &c->m->sb.cmd, read_ready);
}

/* ---- write_file -------------------------------------------------------------------- */

static void write_done(struct call *c, json_t *r, const sbx_rpc_error *err)
{
    if (!r) {
        failed(c, err, "cannot write the file");
        return;
    }
    char text[600];
    snprintf(text, sizeof(text), "wrote %lld bytes to %s",
             (long long)json_integer_value(json_object_get(r, "size")),
             json_string_value(json_object_get(r, "path")));
    mcp_answer(c,
               json_pack("{s:O, s:O}", "path", json_object_get(r, "path"), "size",
                         json_object_get(r, "size")),
               0, text);
}

static void write_ready(struct call *c)
{
    call_sb(c, SBX_M_FS_WRITE,
            json_pack("{s:s, s:O, s:b}", "path", arg_str(c, "path"), "data",
                      json_object_get(c->args, "content"), "mkdir_parents", 1),
            write_done);
}

void mcpf_write_start(struct call *c)
{
    mcp_slot_use(c, &c->m->sb.cmd, write_ready);
}

/* ---- edit_file: read, one exact replacement, write (atomic) ------------------------ */

static void edit_read(struct call *c, json_t *r, const sbx_rpc_error *err)
{
    if (!r) {
        failed(c, err, "cannot read the file");
        return;
    }
    const char *text = json_string_value(json_object_get(r, "data"));
    if (!text || !json_is_true(json_object_get(r, "eof"))) {
        mcp_answer_error(c,
                         "%s is not a text file that fits one read (%zu bytes): use "
                         "exec_command to edit it",
                         arg_str(c, "path"), c->m->conf.max_output);
        return;
    }
    size_t tl = json_string_length(json_object_get(r, "data"));
    const char *old = arg_str(c, "old_text"), *new = arg_str(c, "new_text");
    size_t ol = strlen(old), nl = strlen(new);
    if (ol == 0) {
        mcp_answer_error(c, "old_text must not be empty");
        return;
    }
    const char *hit = NULL;
    int count = 0;
    for (const char *p = text; (p = memmem(p, tl - (size_t)(p - text), old, ol));
         p += ol) {
        if (!hit)
            hit = p;
        count++;
    }
    if (count == 0) {
        mcp_answer_error(c, "old_text was not found in %s", arg_str(c, "path"));
        return;
    }
    if (count > 1) {
        mcp_answer_error(
            c,
            "old_text occurs %d times in %s: include more context so that it "
            "is unique",
            count, arg_str(c, "path"));
        return;
    }
    size_t pre = (size_t)(hit - text), total = tl - ol + nl;
    char *out = malloc(total + 1);
    if (!out) {
        mcp_answer_error(c, "out of memory");
        return;
    }
    memcpy(out, text, pre);
    memcpy(out + pre, new, nl);
    memcpy(out + pre + nl, hit + ol, tl - pre - ol);
    out[total] = '\0';
    json_t *data = json_stringn(out, total);
    free(out);
    call_sb(c, SBX_M_FS_WRITE,
            json_pack("{s:s, s:o}", "path", arg_str(c, "path"), "data", data),
            write_done);
}

static void edit_ready(struct call *c)
{
    call_sb(c, SBX_M_FS_READ,
            json_pack("{s:s, s:I}", "path", arg_str(c, "path"), "length",
                      (json_int_t)c->m->conf.max_output),
            edit_read);
}

void mcpf_edit_start(struct call *c)
{
    mcp_slot_use(c, &c->m->sb.cmd, edit_ready);
}

/* ---- list_directory, directory_tree, search_files ---------------------------------- */

static void list_done(struct call *c, json_t *r, const sbx_rpc_error *err)
{
    if (!r) {
        failed(c, err, "cannot list the directory");
        return;
    }
    const char *pattern = arg_str(c, "pattern");
    int tree = json_object_get(c->args, "depth") != NULL ||
               !strcmp(c->tool->name, "directory_tree");
    json_t *ents = json_array();
    size_t i, len = 0, cap = 4096;
    char *text = malloc(cap);
    json_t *e;
    if (!text) {
        json_decref(ents);
        mcp_answer_error(c, "out of memory");
        return;
    }
    text[0] = '\0';
    json_array_foreach(json_object_get(r, "entries"), i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *path = json_string_value(json_object_get(e, "path"));
        const char *type = json_string_value(json_object_get(e, "type"));
        if (!name || !path || !type)
            continue;
        if (pattern && fnmatch(pattern, name, 0) != 0 && !strstr(name, pattern))
            continue;
        json_array_append_new(ents, json_pack("{s:s, s:s, s:s, s:O}", "name", name,
                                              "path", path, "type", type, "size",
                                              json_object_get(e, "size")));
        const char *shown = pattern || tree ? path : name;
        size_t need = strlen(shown) + 16;
        if (len + need >= cap) {
            char *t = realloc(text, cap = (len + need) * 2);
            if (!t)
                break;
            text = t;
        }
        len += (size_t)snprintf(text + len, cap - len, "[%s] %s\n",
                                !strcmp(type, "dir") ? "DIR" : "FILE", shown);
    }
    json_t *out =
        json_pack("{s:O, s:o, s:b}", "path", json_object_get(r, "path"), "entries", ents,
                  "truncated", json_object_get(r, "cursor") != NULL);
    mcp_answer(c, out, 0, len ? text : "(no entries)");
    free(text);
}

static void list_ready(struct call *c)
{
    const char *tool = c->tool->name;
    json_int_t depth = 1;
    if (!strcmp(tool, "directory_tree")) {
        json_t *d = json_object_get(c->args, "depth");
        depth = json_is_integer(d) ? json_integer_value(d) : 3;
    } else if (!strcmp(tool, "search_files")) {
        depth = 16;
    }
    call_sb(c, SBX_M_FS_LIST,
            json_pack("{s:s, s:I}", "path", arg_str(c, "path"), "depth", depth),
            list_done);
}

void mcpf_list_start(struct call *c)
{
    mcp_slot_use(c, &c->m->sb.cmd, list_ready);
}

/* ---- move_file, get_file_info ---------------------------------------------------- */

static void move_done(struct call *c, json_t *r, const sbx_rpc_error *err)
{
    if (!r) {
        failed(c, err, "cannot move");
        return;
    }
    char text[1100];
    snprintf(text, sizeof(text), "moved %s to %s",
             json_string_value(json_object_get(r, "path")),
             json_string_value(json_object_get(r, "to")));
    mcp_answer(c, json_incref(r), 0, text);
}

static void move_ready(struct call *c)
{
    call_sb(c, SBX_M_FS_RENAME,
            json_pack("{s:s, s:s, s:b}", "path", arg_str(c, "source"), "to",
                      arg_str(c, "destination"), "overwrite", 0),
            move_done);
}

void mcpf_move_start(struct call *c)
{
    mcp_slot_use(c, &c->m->sb.cmd, move_ready);
}

static void info_done(struct call *c, json_t *r, const sbx_rpc_error *err)
{
    if (!r) {
        failed(c, err, "cannot stat");
        return;
    }
    mcp_answer(c, json_incref(r), 0, NULL);
}

static void stat_ready(struct call *c)
{
    call_sb(c, SBX_M_FS_STAT,
            json_pack("{s:s, s:b}", "path", arg_str(c, "path"), "follow", 0), info_done);
}

void mcpf_info_start(struct call *c)
{
    mcp_slot_use(c, &c->m->sb.cmd, stat_ready);
}
