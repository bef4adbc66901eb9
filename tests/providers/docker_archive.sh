#!/bin/sh
# docker_archive.sh BUILD_DIR TMPDIR - archives (fs.read/fs.write format tar)
# and sbxctl cp on a real Docker engine: tests/providers/ptest_docker_archive.c,
# run by docker.sh's engine setup.
SBX_PTEST_BIN=ptest_docker_archive exec sh "$(dirname "$0")/docker.sh" "$@"
