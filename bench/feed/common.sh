# What the live-chain scripts of bench/feed share (capture.sh, live-chain.sh). Before calling
# these functions a script sets SCRIPT (its name, for messages), BIN (where the programs are),
# FLAGS ("--flag=VARIABLE ..." : each option and the variable its value goes into) and defines
# usage().
# shellcheck shell=bash

# parse_flags "$@": --help, then each "--flag VALUE" of FLAGS into its variable; anything else is
# refused (exit 64).
parse_flags() {
  while [ $# -gt 0 ]; do
    case "$1" in
      -h|--help) usage; exit 0 ;;
    esac
    local f var=""
    for f in $FLAGS; do
      if [ "${f%%=*}" = "$1" ]; then var=${f#*=}; fi
    done
    [ -n "$var" ] || { echo "$SCRIPT: unknown argument '$1' (see --help)" >&2; exit 64; }
    [ $# -ge 2 ] || { echo "$SCRIPT: $1 needs a value (see --help)" >&2; exit 64; }
    printf -v "$var" '%s' "$2"
    shift 2
  done
}

# itch_file NAME: a temporary folder in T (removed at exit) and, in FILE, the generated ITCH feed
# of MESSAGES messages over SYMBOLS symbols, made once in $TMPDIR as NAME-MESSAGES-SYMBOLS.itch.
itch_file() {
  T=$(mktemp -d)
  trap 'rm -rf "$T"' EXIT
  FILE="${TMPDIR:-/tmp}/$1-${MESSAGES}-${SYMBOLS}.itch"
  [ -s "$FILE" ] || "$BIN/pollux-itch-gen" --out "$FILE" --messages "$MESSAGES" --symbols "$SYMBOLS" --seed 1 >/dev/null 2>&1
}

# wait_ready LOG: up to 30 s for pollux-feed's "live: ready" line in LOG.
wait_ready() {
  for _ in $(seq 1 300); do grep -q "live: ready" "$1" && return 0; sleep 0.1; done
}
