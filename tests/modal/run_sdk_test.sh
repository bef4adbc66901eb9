#!/bin/sh
# Runs the official Modal JS SDK (modal@0.11.1, the newest release, pinned in
# fake/package-lock.json: a bare `npm i modal` installs an unrelated package)
# against the local fake Modal control plane and command router
# (tests/modal/fake/server.js, both over TLS with the fake's own CA), plus raw
# gRPC checks of the fake.
# Installs the pinned npm packages first (npm ci) if tests/modal/fake/node_modules
# is missing or does not match package-lock.json; once they are installed no
# network is needed.
#
# Usage: tests/modal/run_sdk_test.sh [extra `node --test` args]
# Exit status: 0 if every test passed, non-zero otherwise.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
fake="$here/fake"

command -v node >/dev/null 2>&1 || { echo "run_sdk_test: node is not installed" >&2; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
    echo "run_sdk_test: node >= 20 is required (found $(node --version))" >&2
    exit 1
fi

# node_modules is up to date when every package npm installed (its hidden
# lock file node_modules/.package-lock.json) has the version and integrity
# that package-lock.json asks for, and every non-optional package is there.
up_to_date() {
    node -e '
        const fs = require("fs");
        const dir = process.argv[1];
        let want, have;
        try {
            want = JSON.parse(fs.readFileSync(dir + "/package-lock.json", "utf8")).packages;
            have = JSON.parse(fs.readFileSync(dir + "/node_modules/.package-lock.json", "utf8")).packages;
        } catch { process.exit(1); }
        for (const [k, v] of Object.entries(have)) {
            const w = want[k];
            if (!w || w.version !== v.version || w.integrity !== v.integrity) process.exit(1);
        }
        for (const [k, w] of Object.entries(want)) {
            if (k === "" || w.optional) continue;
            if (!have[k] || !fs.existsSync(dir + "/" + k + "/package.json")) process.exit(1);
        }
    ' "$fake"
}

if ! up_to_date; then
    command -v npm >/dev/null 2>&1 || { echo "run_sdk_test: npm is not installed" >&2; exit 1; }
    echo "run_sdk_test: installing npm packages in $fake (npm ci)" >&2
    # --ignore-scripts: nothing used here needs install scripts (cbor-x works
    # without its optional native addon). --prefer-offline: use the npm cache.
    (cd "$fake" && npm ci --ignore-scripts --no-audit --no-fund --prefer-offline) >&2
fi

exec node --test "$@" "$here/sdk_test.mjs" "$here/sdk_ws_test.mjs"
