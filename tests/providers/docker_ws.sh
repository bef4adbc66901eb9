#!/bin/sh
# docker_ws.sh BUILD_DIR TMPDIR - terminals, ports, egress and stats of Docker
# sandboxes (issue 18, ptest_docker_ws.c) on the engine docker.sh finds.
SBX_PTEST_BIN=ptest_docker_ws exec sh "$(dirname "$0")/docker.sh" "$@"
