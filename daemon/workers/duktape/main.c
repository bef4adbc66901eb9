/*
 * main.c - sbxd-worker: the Duktape isolate worker as its own small binary.
 * It links only duktape and jansson, so it starts in about a millisecond
 * (sbxd itself pulls in libcurl and its TLS stack: ~20 ms of dynamic
 * linking per start), and a sandbox escape finds none of the daemon's
 * memory in it.
 */
#include "workers/duktape/duk_worker.h"

int main(int argc, char **argv)
{
    return duk_worker_main(argc, argv);
}
