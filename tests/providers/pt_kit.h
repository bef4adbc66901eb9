/*
 * pt_kit.h - what the provider tests of every provider share (Docker's
 * ptest_docker*.c and Modal's ptest_modal*.c): one call made as another uid,
 * plain HTTP to a loopback port (the fake Modal's control port, a tunnel, a
 * server in a sandbox), a local file's digest and a process's RSS.
 *
 * Linked into each ptest_* binary (Makefile), below dk_kit.h and md_kit.h. It
 * counts no tests: testhelp.h's counters are per file.
 */
#ifndef SBX_PT_KIT_H
#define SBX_PT_KIT_H

#include <sys/types.h>

#include "itest.h"

/* One call as uid:gid (a forked child that drops to it; uid 0 stays root):
 * the answer, {"error":{"code":2}} when it cannot connect, NULL if none.
 * params is stolen. */
json_t *pt_as_uid(uid_t uid, gid_t gid, const char *sock, const char *method,
                  json_t *params, int call_ms);

/* The error code of one call as uid:uid (0: a result; 2: no answer). */
int pt_code_as_uid(uid_t uid, const char *sock, const char *method, json_t *params);

/* Sends req to 127.0.0.1:port and reads until the peer closes or 15 s pass:
 * the whole answer (malloc'd, NUL-terminated), or NULL if it cannot connect. */
char *pt_tcp_talk(int port, const char *req, size_t req_len);

/* One HTTP/1.1 request (Connection: close) to 127.0.0.1:port with a JSON body
 * (stolen, may be NULL): the answer's body parsed (a chunked one de-chunked),
 * a new reference, or NULL. */
json_t *pt_http_json(int port, const char *method, const char *path, json_t *body);

/* sha256 of a local file as 64 hex digits, by the system's tool ("" if none). */
void pt_sha256_file(const char *file, char out[65]);

/* The entry of provider name in a daemon.info answer (borrowed), or NULL. */
json_t *pt_provider_of(json_t *info, const char *name);

/* VmRSS of pid in KiB, -1 if unknown. */
long pt_rss_kb(pid_t pid);

#endif
