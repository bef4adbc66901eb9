/*
 * port.c - sbxctl port-forward ID [HOSTPORT:]PORT: sandbox.expose, then
 * wait until Ctrl-C (or SIGTERM) and sandbox.unexpose, as kubectl
 * port-forward does. sbxd does the relaying; sbxctl only holds the
 * exposure open. --keep leaves it exposed and exits at once. --address ADDR
 * listens on another host address (the policy decides who may), --unix on a
 * Unix socket only the sandbox's owner can open.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbxctl.h"

static volatile sig_atomic_t stop_asked;

static void on_stop(int sig)
{
    (void)sig;
    stop_asked = 1;
}

static const struct opt port_opts[] = {
    {"keep", 0, 0, 1},
    {"address", 0, 1, 2},
    {"unix", 0, 0, 3},
    {NULL, 0, 0, 0},
};

int cmd_port_forward(int argc, char **argv)
{
    struct parser p;
    const char *id = NULL, *spec = NULL, *address = NULL;
    int o, keep = 0, unix_sock = 0;

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, port_opts)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        if (o == 1)
            keep = 1;
        else if (o == 2)
            address = p.arg;
        else if (o == 3)
            unix_sock = 1;
        else if (!id)
            id = p.arg;
        else if (!spec)
            spec = p.arg;
        else
            usage_error("unexpected argument: %s", p.arg);
    }
    if (!id || !spec)
        usage_error("missing %s", id ? "PORT" : "sandbox ID");
    const char *colon = strchr(spec, ':');
    json_int_t host_port = 0, port;
    if (colon) {
        char hp[16];
        size_t n = (size_t)(colon - spec);
        if (n == 0 || n >= sizeof(hp))
            usage_error("bad HOSTPORT:PORT: %s", spec);
        memcpy(hp, spec, n);
        hp[n] = '\0';
        host_port = arg_int("HOSTPORT", hp);
        port = arg_int("PORT", colon + 1);
    } else {
        port = arg_int("PORT", spec);
    }
    if (port < 1 || port > 65535 || host_port < 0 || host_port > 65535)
        usage_error("ports are 1..65535");

    sbx_ctx *c = ctl_connect();
    json_t *r = NULL;
    json_t *params = json_pack("{s:s, s:I}", "id", id, "port", port);
    if (host_port)
        json_object_set_new(params, "host_port", json_integer(host_port));
    if (address)
        json_object_set_new(params, "host", json_string(address));
    if (unix_sock)
        json_object_set_new(params, "unix", json_true());
    int rc = ctl_call(c, SBX_M_EXPOSE, params, &r);
    if (rc) {
        sbx_free(c);
        return rc;
    }
    if (g.json)
        print_json(r);
    else if (json_is_string(json_object_get(r, "unix")))
        printf("Forwarding from %s -> %lld (%s)\n",
               json_string_value(json_object_get(r, "unix")), (long long)port,
               json_string_value(json_object_get(r, "url")));
    else
        printf("Forwarding from %s:%lld -> %lld (%s)\n",
               json_string_value(json_object_get(r, "host")),
               (long long)json_integer_value(json_object_get(r, "host_port")),
               (long long)port, json_string_value(json_object_get(r, "url")));
    fflush(stdout);
    json_decref(r);
    if (keep) {
        sbx_free(c);
        return 0;
    }
    struct sigaction sa = {.sa_handler = on_stop};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    while (!stop_asked) {
        json_t *m = NULL;
        int st = sbx_read_notification(c, &m, 500);
        json_decref(m);
        if (st != SBX_OK && c->err != SBX_ERR_TIMEOUT) {
            warnx_("connection to sbxd lost: %s (port %lld stays exposed)", c->errstr,
                   (long long)port);
            sbx_free(c);
            return EXIT_RPC;
        }
    }
    rc = ctl_call(c, SBX_M_UNEXPOSE, json_pack("{s:s, s:I}", "id", id, "port", port),
                  NULL);
    sbx_free(c);
    return rc ? rc : 0;
}
