/*
 * params.c - param checks shared by the method files (params.h).
 */
#include "rpc/params.h"

#include <stdio.h>
#include <string.h>

#include "rpc/call.h"
#include "sbx_proto.h"
#include "wallclock.h"

int param_bad(struct call *c, const char *param, const char *msg)
{
    call_error(c, SBX_E_PARAMS, json_pack("{s:s}", "param", param), "%s: %s", param, msg);
    return -1;
}

/* Optional string. 0 ok (out may stay NULL), -1 answered. */
int param_str(struct call *c, json_t *params, const char *key, const char **out)
{
    json_t *v = json_object_get(params, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return param_bad(c, key, "must be a string");
    /* Strings here name things (ids, providers, paths): "a\u0000zz" must not
     * quietly become "a". */
    if (strlen(json_string_value(v)) != json_string_length(v))
        return param_bad(c, key, "must not contain a NUL byte");
    *out = json_string_value(v);
    return 0;
}

int param_req_str(struct call *c, json_t *params, const char *key, const char **out)
{
    if (param_str(c, params, key, out) < 0)
        return -1;
    if (!*out)
        return param_bad(c, key, "is required");
    return 0;
}

int param_int(struct call *c, json_t *params, const char *key, int64_t lo, int64_t hi,
              int64_t *out)
{
    json_t *v = json_object_get(params, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        char msg[96];
        snprintf(msg, sizeof(msg), "must be an integer in %lld..%lld", (long long)lo,
                 (long long)hi);
        return param_bad(c, key, msg);
    }
    *out = json_integer_value(v);
    return 0;
}

int param_bool(struct call *c, json_t *params, const char *key, int *out)
{
    json_t *v = json_object_get(params, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return param_bad(c, key, "must be a boolean");
    *out = json_is_true(v);
    return 0;
}

/* output_encoding: "utf8" (the default) or "auto" (PROTOCOL.md). */
int param_encoding(struct call *c, json_t *params, enum out_enc *out)
{
    json_t *v = json_object_get(params, "output_encoding");
    *out = ENC_UTF8;
    if (!v || json_is_null(v))
        return 0;
    const char *e = json_string_value(v);
    if (e && strcmp(e, "auto") == 0 && json_string_length(v) == 4)
        *out = ENC_AUTO;
    else if (!e || strcmp(e, "utf8") != 0 || json_string_length(v) != 4)
        return param_bad(c, "output_encoding", "must be \"utf8\" or \"auto\"");
    return 0;
}

/* since: a Unix time in seconds (a number, fractions kept to the ns) or an
 * RFC 3339 string (PROTOCOL.md, process.attach), into ns since the epoch. */
int param_since(struct call *c, json_t *params, int64_t *out)
{
    json_t *v = json_object_get(params, "since");
    *out = 0;
    if (!v || json_is_null(v))
        return 0;
    /* ns since the epoch in int64: up to 2262-04-11 */
    const json_int_t max_s = INT64_MAX / 1000000000 - 1;
    if (json_is_integer(v) && json_integer_value(v) >= 0 &&
        json_integer_value(v) <= max_s) {
        *out = (int64_t)json_integer_value(v) * 1000000000;
        return 0;
    }
    if (json_is_real(v) && json_real_value(v) >= 0 &&
        json_real_value(v) <= (double)max_s) {
        *out = (int64_t)(json_real_value(v) * 1e9);
        return 0;
    }
    if (json_is_string(v) &&
        wallclock_parse(out, json_string_value(v), json_string_length(v)) == 0 &&
        *out >= 0)
        return 0;
    return param_bad(c, "since",
                     "must be a Unix time in seconds (0 to 9223372035) or an RFC 3339 "
                     "date-time such as \"2026-12-01T16:25:00.5Z\" (1970 to 2262)");
}

/* A JSON string with a NUL inside (JSON_ALLOW_NUL lets "\u0000" through). */
int param_has_nul(json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) != json_string_length(v);
}
