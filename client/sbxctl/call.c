/*
 * call.c - sbxctl's side of sbxd (sbxctl.h): the socket, connecting,
 * calling and printing what comes back. Below every verb file; messages
 * through cli.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbxctl.h"

/* ---- daemon access ---------------------------------------------------------------- */

const char *socket_path(void)
{
    if (g.socket)
        return g.socket;
    const char *env = getenv("SBXD_SOCKET");
    return env && *env ? env : SBX_DEFAULT_SOCKET;
}

sbx_ctx *ctl_connect(void)
{
    sbx_ctx *c = sbx_connect_unix(socket_path(), 10000);
    if (!c) {
        warnx_("out of memory");
        exit(EXIT_RPC);
    }
    if (c->err) {
        warnx_("cannot connect to sbxd: %s", c->errstr);
        sbx_free(c);
        exit(EXIT_RPC);
    }
    return c;
}

void print_rpc_error(const sbx_rpc_error *e)
{
    warnx_("%s (code %d)", e->message, e->code);
}

int ctl_call(sbx_ctx *c, const char *method, json_t *params, json_t **result_out)
{
    sbx_rpc_error *e = NULL;
    json_t *result = NULL;

    if (result_out)
        *result_out = NULL;
    if (sbx_call_new(c, &result, &e, method, params) != SBX_OK) {
        if (e)
            print_rpc_error(e);
        else
            warnx_("%s: %s", method, c->errstr);
        sbx_rpc_error_free(e);
        return EXIT_RPC;
    }
    if (result_out)
        *result_out = result;
    else
        json_decref(result);
    return 0;
}

/* Reals rounded to microseconds (of a second or a millisecond alike): the
 * numbers stay numbers, the float noise of 4.7792541980743408 goes. */
static void round_reals(json_t *v)
{
    const char *k;
    json_t *e;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach(v, k, e) {
            if (json_is_real(e))
                json_real_set(e, round(json_real_value(e) * 1e6) / 1e6);
            else
                round_reals(e);
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, e) {
            if (json_is_real(e))
                json_real_set(e, round(json_real_value(e) * 1e6) / 1e6);
            else
                round_reals(e);
        }
    }
}

void print_json(json_t *v)
{
    round_reals(v);
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
    if (s) {
        puts(s);
        free(s);
    }
}

int ctl_simple(const char *method, json_t *params, json_t **result_out)
{
    json_t *result;
    if (result_out)
        *result_out = NULL;
    sbx_ctx *c = ctl_connect();
    int rc = ctl_call(c, method, params, &result);
    sbx_free(c);
    if (rc)
        return rc;
    if (g.json)
        print_json(result);
    if (result_out)
        *result_out = result;
    else
        json_decref(result);
    return 0;
}

void print_progress(const char *method, json_t *params)
{
    if (strcmp(method, SBX_N_PROGRESS) != 0 || !isatty(2))
        return;
    const char *stage = json_string_value(json_object_get(params, "stage"));
    const char *msg = json_string_value(json_object_get(params, "message"));
    json_t *cur = json_object_get(params, "current"),
           *tot = json_object_get(params, "total");
    fprintf(stderr, "sbxctl: %s%s%s", stage ? stage : "", stage && msg ? ": " : "",
            msg ? msg : "");
    if (json_is_integer(cur) && json_is_integer(tot))
        fprintf(stderr, " (%" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT ")",
                json_integer_value(cur), json_integer_value(tot));
    fputc('\n', stderr);
}
