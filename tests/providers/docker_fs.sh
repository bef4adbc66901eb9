#!/bin/sh
# docker_fs.sh BUILD_DIR TMPDIR - fs.* (files) on a real Docker engine:
# tests/providers/ptest_docker_fs.c, run by docker.sh's engine setup.
SBX_PTEST_BIN=ptest_docker_fs exec sh "$(dirname "$0")/docker.sh" "$@"
