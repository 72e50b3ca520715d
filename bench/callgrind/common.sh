# What the callgrind scripts of bench/callgrind share. Before calling these functions a script
# sets SCRIPT (its name, for messages) and VALUE_FLAGS (its options that take a value), and
# defines usage() and option FLAG [VALUE] (applies one option; returns 1 for a flag it does not
# know).
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
# need_callgrind: valgrind and its callgrind_annotate on PATH, or a message and exit 1.
need_callgrind() {
  need valgrind "scripts/install-deps.sh installs it"
  need callgrind_annotate "package valgrind"
}
# inline_start "$@": the start of an inline script (shm-inline.sh, udp-inline.sh): ARGV (the
# command line, for the JSON), the options, --b above --a (their difference is what the
# per-message cost is taken over), callgrind present.
inline_start() {
  ARGV="$0 $*"
  parse_options "$@"
  [ "$B" -gt "$A" ] || die "--b ($B) must be larger than --a ($A)"
  need_callgrind
}
