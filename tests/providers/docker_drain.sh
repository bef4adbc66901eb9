#!/bin/sh
# docker_drain.sh BUILD_DIR TMPDIR - a stopped sbxd leaves no warm-pool
# container running, users' sandboxes stay (ptest_docker_drain.c), on the
# engine docker.sh finds.
SBX_PTEST_BIN=ptest_docker_drain exec sh "$(dirname "$0")/docker.sh" "$@"
