/*
 * test_grpc.c - grpc.c's reading of server-directed retries: the
 * RPCRetryPolicy inside grpc-status-details-bin (base64 of a google.rpc.Status
 * whose details hold a google.protobuf.Any). The payloads were made with a
 * protobuf encoder written from the wire format (see the fake's
 * retryPolicyStatus, which the SDK test shows npm modal 0.11.1 accepts).
 */
#include <math.h>

#include "providers/modal/grpc.h"
#include "testhelp.h"

/* Status{code 8, "slow down", details [Any{.../modal.client.RPCRetryPolicy,
 * {retry_after_secs: X}}]} for X = 1.5, -2, 1e9, NaN; another type; the policy
 * second after a DebugInfo. */
static const char OK[] =
    "CAgSCXNsb3cgZG93bho4Ci90eXBlLmdvb2dsZWFwaXMuY29tL21vZGFsLmNsaWVudC5SUENS"
    "ZXRyeVBvbGljeRIFDQAAwD8=";
static const char NEG[] =
    "CAgSCXNsb3cgZG93bho4Ci90eXBlLmdvb2dsZWFwaXMuY29tL21vZGFsLmNsaWVudC5SUEN"
    "SZXRyeVBvbGljeRIFDQAAAMA=";
static const char BIG[] =
    "CAgSCXNsb3cgZG93bho4Ci90eXBlLmdvb2dsZWFwaXMuY29tL21vZGFsLmNsaWVudC5SUEN"
    "SZXRyeVBvbGljeRIFDShrbk4=";
static const char NAN_[] =
    "CAgSCXNsb3cgZG93bho4Ci90eXBlLmdvb2dsZWFwaXMuY29tL21vZGFsLmNsaWVudC5SUE"
    "NSZXRyeVBvbGljeRIFDQAAwH8=";
static const char OTHER[] =
    "CAgSCXNsb3cgZG93bhoxCih0eXBlLmdvb2dsZWFwaXMuY29tL2dvb2dsZS5ycGMuUmV0c"
    "nlJbmZvEgUNAADAPw==";
static const char SECOND[] =
    "CA4aKgoodHlwZS5nb29nbGVhcGlzLmNvbS9nb29nbGUucnBjLkRlYnVnSW5mbxomCh14"
    "L21vZGFsLmNsaWVudC5SUENSZXRyeVBvbGljeRIFDQAAgD4=";

static int parse(const char *s, size_t n, double *out)
{
    *out = -99;
    return grpc_retry_policy_parse(s, n, out);
}

int main(void)
{
    double v;
    test_cond("policy: 1.5 s", parse(OK, strlen(OK), &v) == 0 && v == 1.5);
    /* gRPC sends -bin values unpadded. */
    size_t n = strlen(OK);
    while (OK[n - 1] == '=')
        n--;
    test_cond("policy: without base64 padding", parse(OK, n, &v) == 0 && v == 1.5);
    test_cond("policy: found after another detail",
              parse(SECOND, strlen(SECOND), &v) == 0 && fabs(v - 0.25) < 1e-6);
    test_cond("policy: a negative delay is 0",
              parse(NEG, strlen(NEG), &v) == 0 && v == 0);
    test_cond("policy: NaN is 0", parse(NAN_, strlen(NAN_), &v) == 0 && v == 0);
    test_cond("policy: a huge delay is capped at an hour",
              parse(BIG, strlen(BIG), &v) == 0 && v == 3600);
    test_cond("no policy: another detail type", parse(OTHER, strlen(OTHER), &v) == -1);
    test_cond("no policy: cut short", parse(OK, 40, &v) == -1);
    test_cond("no policy: not base64", parse("%%%%", 4, &v) == -1);
    test_cond("no policy: empty or NULL",
              parse("", 0, &v) == -1 && parse(NULL, 5, &v) == -1);
    char junk[256];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = "AB/+"[i % 4];
    test_cond("no policy: well-formed base64 of junk",
              parse(junk, sizeof(junk), &v) == -1);
    return test_report();
}
