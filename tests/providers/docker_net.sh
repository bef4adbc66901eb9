#!/bin/sh
# docker_net.sh BUILD_DIR TMPDIR - who may expose what (policy grants, Unix
# sockets, per-sandbox bounds) and the egress proxy's IPv6 literals and lookup
# bounds (issue 18, ptest_docker_net.c) on the engine docker.sh finds.
SBX_PTEST_BIN=ptest_docker_net exec sh "$(dirname "$0")/docker.sh" "$@"
