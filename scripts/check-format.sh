#!/usr/bin/env bash
# Checks every C/C++ source file tracked by git against .clang-format (Google base, 120 columns):
#   scripts/check-format.sh          report files that differ, exit 1 if any does
#   scripts/check-format.sh --fix    rewrite them in place
# clang-format 14 (Debian 12's); another major version may format a few constructs differently.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  --fix) mode=fix ;;
  "") mode=check ;;
  *) echo "check-format.sh: unknown argument '$1' (--fix, --help)" >&2; exit 64 ;;
esac
command -v clang-format >/dev/null || { echo "check-format.sh: clang-format not found (apt-get install clang-format)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.c' '*.cpp' '*.hpp')
if [ "$mode" = fix ]; then
  clang-format -i "${files[@]}"
  echo "[format] ${#files[@]} files formatted"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -ne 0 ]; then
  echo "[format] ${#bad[@]} of ${#files[@]} files differ from .clang-format (scripts/check-format.sh --fix rewrites them):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "[format] ${#files[@]} files match .clang-format ($(clang-format --version | sed 's/.*version \([0-9.]*\).*/clang-format \1/'))"
