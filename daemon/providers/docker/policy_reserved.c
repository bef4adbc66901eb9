/*
 * policy_reserved.c - what only sbxd names: label keys sbxd.* and the
 * container name prefixes of its own containers are refused to every uid,
 * root included (ownership is recorded by sbxd, never by a request). Moved
 * out of policy.c (issue 22's 1,200-line bound).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "providers/docker/docker_int.h"
#include "providers/docker/policy.h"
#include "sbx_proto.h"

/* ---- what only sbxd names ---------------------------------------------------------- */

static int reserved_key(const char *k, size_t n)
{
    while (n > 0 && isspace((unsigned char)*k)) {
        k++;
        n--;
    }
    return n >= 5 && !strncasecmp(k, "sbxd.", 5);
}

static int reserved(sbx_err_t *err, const char *option, json_t *v, const char *what)
{
    json_t *data = json_pack("{s:s, s:s, s:O}", "option", option, "reason", "reserved",
                             "requested", v);
    return err_make_data(err, SBX_E_PERMISSION, data,
                         "docker: policy: options.%s: %s is reserved for sbxd's own "
                         "bookkeeping (ownership is sbxd's to record)",
                         option, what);
}

int policy_reserved(json_t *req, sbx_err_t *err)
{
    json_t *l = json_object_get(req, "labels");
    const char *k;
    json_t *v;
    size_t i;
    if (json_is_object(l)) {
        json_object_foreach(l, k, v)
            if (reserved_key(k, strlen(k)))
                return reserved(err, "labels", l, "label key sbxd.*");
    } else if (json_is_array(l) || json_is_string(l)) {
        /* "k=v" entries, or "k=v,k2=v2" */
        json_t *one = json_is_string(l) ? json_pack("[O]", l) : json_incref(l);
        json_array_foreach(one, i, v) {
            const char *s = json_string_value(v);
            while (s && *s) {
                size_t n = strcspn(s, json_is_string(l) ? "," : "");
                size_t kl = strcspn(s, "=");
                if (kl > n)
                    kl = n;
                if (reserved_key(s, kl)) {
                    json_decref(one);
                    return reserved(err, "labels", l, "label key sbxd.*");
                }
                s += n;
                if (*s == ',')
                    s++;
            }
        }
        json_decref(one);
    }
    json_t *nm = json_object_get(req, "name");
    const char *name = json_string_value(nm);
    if (name && name[0]) {
        static const char *const pre[] = {"sbxp.", "sbxpool-", "sbxd-", "sbx-", NULL};
        char *san = dkspec_name(name, "");
        const char *p = name;
        while (*p == '/')
            p++; /* the engine drops a leading slash */
        for (size_t j = 0; pre[j]; j++)
            if (!strncasecmp(p, pre[j], strlen(pre[j])) ||
                (san && !strncasecmp(san, pre[j], strlen(pre[j])) &&
                 strcmp(pre[j], "sbx-") != 0)) {
                free(san);
                return reserved(
                    err, "name", nm,
                    "a container name starting sbx-, sbxp., sbxpool- or sbxd-");
            }
        free(san);
    }
    return 0;
}
