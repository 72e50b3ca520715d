#!/usr/bin/env bash
# The first quick-start command: installs what is missing, builds (Release), and runs the
# sample publish/subscribe program on the embedded default configuration (shared memory,
# no RDMA hardware needed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
exec build/bin/pollux-demo "$@"
