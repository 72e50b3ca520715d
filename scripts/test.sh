#!/usr/bin/env bash
# The second quick-start command: installs what is missing, builds, and runs every test
# through ctest (unit, multi-process, network-namespace and - in a Soft-RoCE VM - RDMA tests).
# CI (.ci/run) runs exactly this. With CI=true warnings are errors.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --test
werror=OFF
if [ "${CI:-}" = "true" ]; then werror=ON; fi
bash scripts/build.sh -DPOLLUX_WERROR="$werror"
# Serial: several tests run two or three busy processes, and the machine may have 2 cores.
ctest --test-dir build --output-on-failure --timeout 2400 "$@"
