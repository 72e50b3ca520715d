#!/usr/bin/env bash
# The first quick-start command: installs what is missing, builds (Release), and runs the
# sample ITCH 5.0 feed handler (build/bin/pollux-feed) on its embedded default configuration:
# a generated 5M-message feed replayed over shared memory (no RDMA hardware needed) to a
# subscriber process that rebuilds every order book, with progress lines and a summary.
# A second run only re-checks packages and the build (a few seconds). Extra arguments go to
# pollux-feed, e.g. --itch FILE, --set feed.replay=rate, --book-out books.jsonl (docs/FEED.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
exec build/bin/pollux-feed "$@"
