#!/bin/sh
# docker_fsraw.sh BUILD_DIR TMPDIR - raw transfers of fs.read/fs.write on a
# real Docker engine: tests/providers/ptest_docker_fsraw.c, run by
# docker.sh's engine setup.
SBX_PTEST_BIN=ptest_docker_fsraw exec sh "$(dirname "$0")/docker.sh" "$@"
