# What the callgrind scripts of bench/callgrind share, sourced after they set SCRIPT (their name,
# for messages) and VALUE_FLAGS (their options that take a value), and defined usage() and
# option FLAG [VALUE] (applies one option; returns 1 for a flag it does not know).
# shellcheck shell=bash

die() { echo "$SCRIPT: $* (see --help)" >&2; exit 64; }
num() { [[ "$2" =~ ^[0-9]+$ ]] || die "$1: not a number: \"$2\""; }

# The command line: --help, then each flag through option(), its value checked present.
parse_options() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --help|-h) usage; exit 0 ;;
    esac
    if [[ " $VALUE_FLAGS " == *" $1 "* ]]; then
      [ $# -ge 2 ] || die "$1 needs a value"
      option "$1" "$2"
      shift 2
    else
      option "$1" || die "unknown flag \"$1\""
      shift
    fi
  done
}

# need TOOL WHERE: TOOL on PATH, or a message saying WHERE it comes from and exit 1.
need() { command -v "$1" >/dev/null || { echo "$SCRIPT: $1 missing ($2)" >&2; exit 1; }; }
# need_program PATH TARGET: the workload program built, or how to build it and exit 1.
need_program() { [ -x "$1" ] || { echo "$SCRIPT: $1: no such program (cmake --build build --target $2)" >&2; exit 1; }; }
# work_dir: a temporary folder in T, removed at exit.
work_dir() { T=$(mktemp -d); trap 'rm -rf "$T"' EXIT; }
