#!/usr/bin/env bash
# What a user does with an installed Pollux, checked end to end (ctest: install_static,
# install_shared):
#   1. install Pollux into a prefix - static: this build tree; shared: a library-only build of
#      the same sources with -DBUILD_SHARED_LIBS=ON (kept in WORK/shared-build, incremental);
#   2. check that no installed CMake or pkg-config file names a path of this machine (the source
#      or build tree, the prefix, a system library), then MOVE the prefix elsewhere;
#   3. build examples/quickstart against the moved prefix twice - with find_package(pollux)
#      (its CMakeLists.txt) and with pkg-config + make (its Makefile) - and run each build's
#      quickstart-sub and quickstart-pub as two processes over shared memory: every quote must
#      arrive;
#   4. pkg-config's Cflags are include directories only (no -D of a dependency leaks into a
#      user's compile), and README.md's API example ("The API in one page") compiles with them,
#      links and runs;
#   5. static: the programs were installed into <prefix>/bin (the tools, and pollux-feed and
#      pollux-exchange when this tree built the examples) and run from the moved prefix;
#   6. shared: the programs need libpollux.so.0 (the SONAME), pkg-config's shared link line is
#      libpollux and Abseil only, and libpollux.so exports only namespace pollux.
#
#   install_test.sh static|shared SOURCE_DIR BUILD_DIR WORK [CMAKE-ARGS for the shared build...]
set -euo pipefail

variant=${1:?static|shared}
src=$(cd "${2:?source dir}" && pwd)
build=$(cd "${3:?build dir}" && pwd)
work=${4:?work dir}
shift 4
count=20000
jobs=$(nproc 2>/dev/null || echo 2)

fail() { echo "install_test ($variant): FAILED: $*" >&2; exit 1; }
step() { echo "[install_test $variant] $*"; }

mkdir -p "$work"
work=$(cd "$work" && pwd)
root="$work/$variant"
rm -rf "$root"
mkdir -p "$root"
prefix="$root/prefix"

# ---- 1. install ----------------------------------------------------------------------------
if [ "$variant" = static ]; then
  step "cmake --install $build --prefix $prefix"
  cmake --install "$build" --prefix "$prefix" >"$root/install.log" || { cat "$root/install.log"; fail "cmake --install"; }
  [ -f "$prefix/lib/libpollux.a" ] || fail "no lib/libpollux.a in the installed prefix"
  [ ! -e "$prefix/lib/libpollux.so" ] || fail "a static build installed libpollux.so"
else
  sb="$work/shared-build"
  step "configuring and building libpollux.so in $sb"
  cmake -S "$src" -B "$sb" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DPOLLUX_BUILD_TESTS=OFF \
        -DPOLLUX_BUILD_BENCH=OFF -DPOLLUX_BUILD_EXAMPLES=OFF "$@" >"$root/configure.log" ||
    { cat "$root/configure.log"; fail "configuring the shared build"; }
  cmake --build "$sb" -j"$jobs" --target pollux >"$root/build.log" 2>&1 || { tail -50 "$root/build.log"; fail "building libpollux.so"; }
  # The library's components only (the tools are not built here).
  for c in Runtime Development; do
    cmake --install "$sb" --prefix "$prefix" --component "$c" >>"$root/install.log" ||
      { cat "$root/install.log"; fail "cmake --install --component $c"; }
  done
  [ -L "$prefix/lib/libpollux.so" ] || fail "no lib/libpollux.so link (the Development component)"
  [ ! -e "$prefix/lib/libpollux.a" ] || fail "a shared build installed libpollux.a"
  soname=$(readelf -d "$prefix/lib/libpollux.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [ "$soname" = libpollux.so.0 ] || fail "SONAME is '$soname', expected libpollux.so.0"
  real=$(readlink -f "$prefix/lib/libpollux.so")
  [[ "$(basename "$real")" =~ ^libpollux\.so\.0\.[0-9]+\.[0-9]+$ ]] || fail "libpollux.so points at $(basename "$real")"
  [ -f "$prefix/lib/libpollux.so.0" ] || fail "no lib/libpollux.so.0 (the Runtime component)"
fi
for f in include/pollux/pollux.h include/pollux/export.h include/pollux/clock.h lib/pkgconfig/pollux.pc \
         lib/cmake/pollux/polluxConfig.cmake lib/cmake/pollux/polluxTargets.cmake share/doc/pollux/LICENSE; do
  [ -f "$prefix/$f" ] || fail "$f was not installed"
done
programs=()
if [ "$variant" = static ]; then
  programs=(pollux-stat pollux-config pollux-doctor pollux-latency)
  # The examples' programs, when this tree built them (POLLUX_BUILD_EXAMPLES, the default).
  for p in pollux-feed pollux-exchange; do
    if [ -x "$build/bin/$p" ]; then programs+=("$p"); fi
  done
  for p in "${programs[@]}"; do
    [ -x "$prefix/bin/$p" ] || fail "bin/$p was not installed (it is in $build/bin)"
  done
fi

# ---- 2. nothing of this machine in the package, then move it --------------------------------
step "checking the installed CMake and pkg-config files for absolute paths"
meta=("$prefix"/lib/cmake/pollux/*.cmake "$prefix/lib/pkgconfig/pollux.pc")
for needle in "$prefix" "$src" "$build" "$work"; do
  if grep -n -F "$needle" "${meta[@]}"; then fail "an installed file names $needle (above)"; fi
done
if grep -n -E '(^|[";: ]|-[LI])/(usr|lib|opt)/[^ ";]*' "${meta[@]}"; then
  fail "an installed file names a system path (above): dependencies must be imported targets or -l flags"
fi
moved="$root/moved/to/elsewhere"
mkdir -p "$(dirname "$moved")"
mv "$prefix" "$moved"
step "moved the prefix to $moved"

# ---- 3. build the quickstart both ways against the moved prefix, run it ----------------------
# The quickstart's own quickstart.toml with this run's shm directory (parallel runs never meet).
exchange() {  # exchange DIR-WITH-THE-PROGRAMS LABEL
  local dir=$1 label=$2 shm cfg sub_pid sub_rc=0 pub_rc=0
  shm=$(mktemp -d /dev/shm/pollux-install-test-XXXXXX)
  cfg="$shm.toml"
  sed "/^\[runtime\]/a shm_dir = \"$shm\"" "$src/examples/quickstart/quickstart.toml" >"$cfg"
  "$dir/quickstart-sub" --config "$cfg" --count "$count" >"$root/$label-sub.out" 2>&1 &
  sub_pid=$!
  timeout 120 "$dir/quickstart-pub" --config "$cfg" --count "$count" >"$root/$label-pub.out" 2>&1 || pub_rc=$?
  wait "$sub_pid" || sub_rc=$?
  rm -rf "$shm" "$cfg"
  cat "$root/$label-pub.out" "$root/$label-sub.out"
  [ "$pub_rc" = 0 ] || fail "$label: quickstart-pub exited $pub_rc"
  [ "$sub_rc" = 0 ] || fail "$label: quickstart-sub exited $sub_rc"
  grep -q "received=$count lost=0 bad=0" "$root/$label-sub.out" || fail "$label: the subscriber did not get all $count quotes"
}

# Outputs are captured before grep: with pipefail, `prog | grep -q` fails when grep exits at the
# first match while prog still writes (SIGPIPE), depending on timing.
needs_libpollux_so() {
  local dyn
  dyn=$(readelf -d "$1")
  grep -q 'NEEDED.*\[libpollux\.so\.0\]' <<<"$dyn"
}
check_linkage() {  # check_linkage PROGRAM
  if [ "$variant" = shared ]; then
    needs_libpollux_so "$1" || fail "$1 does not load libpollux.so.0"
    local deps
    deps=$(ldd "$1")
    grep -q "libpollux.so.0 => $moved/" <<<"$deps" || { echo "$deps"; fail "$1 does not find libpollux.so.0 in the moved prefix"; }
  else
    ! needs_libpollux_so "$1" || fail "$1 loads libpollux.so although Pollux was installed static"
  fi
}

step "find_package(pollux): cmake -S examples/quickstart -DCMAKE_PREFIX_PATH=<moved prefix>"
cmake -S "$src/examples/quickstart" -B "$root/cmake-build" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$moved" >"$root/cmake-consumer.log" 2>&1 ||
  { cat "$root/cmake-consumer.log"; fail "configuring the quickstart with find_package(pollux)"; }
cmake --build "$root/cmake-build" -j"$jobs" >>"$root/cmake-consumer.log" 2>&1 ||
  { cat "$root/cmake-consumer.log"; fail "building the quickstart with find_package(pollux)"; }
check_linkage "$root/cmake-build/quickstart-pub"
exchange "$root/cmake-build" cmake

step "pkg-config + make: the quickstart's Makefile with PKG_CONFIG_PATH=<moved prefix>/lib/pkgconfig"
mkdir -p "$root/make-build"
cp "$src"/examples/quickstart/{pub.cc,sub.cc,quickstart.h,Makefile} "$root/make-build/"
make -C "$root/make-build" PKG_CONFIG_PATH="$moved/lib/pkgconfig" >"$root/make-consumer.log" 2>&1 ||
  { cat "$root/make-consumer.log"; fail "building the quickstart with pkg-config + make"; }
cat "$root/make-consumer.log"
check_linkage "$root/make-build/quickstart-sub"
exchange "$root/make-build" make

# ---- 4. pkg-config's Cflags, and README.md's API example built with them -----------------------
for mode in "" --static; do
  cflags=$(PKG_CONFIG_PATH="$moved/lib/pkgconfig" pkg-config $mode --cflags pollux)
  step "pkg-config $mode --cflags pollux: $cflags"
  for f in $cflags; do
    case "$f" in
      -I*|-isystem*) ;;
      *) fail "pkg-config $mode --cflags pollux gives users' compiles '$f': only include directories belong there" ;;
    esac
  done
done
api="$root/api-example"
mkdir -p "$api"
awk '/<!-- compiled: tests\/install\/install_test.sh api-example -->/ { marked = 1; next }
     marked && /^```cpp$/ { inside = 1; next }
     inside && /^```$/ { exit }
     inside { print }' "$src/README.md" >"$api/example.cc"
[ -s "$api/example.cc" ] || fail "README.md lost its API example (<!-- compiled: tests/install/install_test.sh api-example --> and a \`\`\`cpp block)"
grep -q '#include <pollux/pollux.h>' "$api/example.cc" || fail "README.md's API example does not include <pollux/pollux.h>"
pc_cflags=$(PKG_CONFIG_PATH="$moved/lib/pkgconfig" pkg-config --cflags pollux)
pc_libs=$(PKG_CONFIG_PATH="$moved/lib/pkgconfig" pkg-config --static --libs pollux)
pc_libdir=$(PKG_CONFIG_PATH="$moved/lib/pkgconfig" pkg-config --variable=libdir pollux)
step "c++ -std=c++20 -Wall -Wextra -Werror \$(pkg-config --cflags pollux) README.md's API example \$(pkg-config --static --libs pollux)"
# shellcheck disable=SC2086  # the flags are words
c++ -std=c++20 -O2 -Wall -Wextra -Werror $pc_cflags -o "$api/example" "$api/example.cc" $pc_libs \
    -Wl,-rpath,"$pc_libdir" >"$api/build.log" 2>&1 || { cat "$api/build.log"; fail "README.md's API example does not build"; }
check_linkage "$api/example"
shm=$(mktemp -d /dev/shm/pollux-install-test-XXXXXX)
printf '[runtime]\nthreading = "inline"\nshm_dir = "%s"\n' "$shm" >"$shm.toml"
api_rc=0
timeout 60 "$api/example" "$shm.toml" >"$api/run.out" 2>&1 || api_rc=$?
left=$(find "$shm" -mindepth 1 ! -name pollux-clock)
rm -rf "$shm" "$shm.toml"
cat "$api/run.out"
[ "$api_rc" = 0 ] || fail "README.md's API example exited $api_rc"
grep -q '^hello: sequence 1, ' "$api/run.out" || fail "README.md's API example did not receive its message"
[ -z "$left" ] || fail "README.md's API example left files behind: $left"

# ---- 5. the installed programs run from the moved prefix ---------------------------------------
for p in "${programs[@]}"; do
  out=$("$moved/bin/$p" --version) || fail "$moved/bin/$p --version failed"
  [[ "$out" == "$p "* ]] || fail "$moved/bin/$p --version printed '$out'"
done
[ ${#programs[@]} = 0 ] || step "installed and run from the moved prefix: ${programs[*]}"

# ---- 6. shared: link line and exported symbols -------------------------------------------------
if [ "$variant" = shared ]; then
  libs=$(PKG_CONFIG_PATH="$moved/lib/pkgconfig" pkg-config --libs pollux)
  step "pkg-config --libs pollux: $libs"
  for l in $libs; do
    case "$l" in
      -L*|-lpollux|-labsl_*|-pthread|-lrt|-latomic|-Wl,--push-state,--as-needed|-Wl,--pop-state) ;;
      *) fail "the shared link line has '$l': a libpollux.so consumer needs only -lpollux (and Abseil, of the headers)" ;;
    esac
  done
  nm -D --defined-only -C "$moved/lib/libpollux.so" | awk '{ $1 = ""; $2 = ""; sub(/^  /, ""); print }' >"$root/exports.txt"
  exported=$(grep -c . "$root/exports.txt")
  step "libpollux.so exports $exported symbols (nm -D --defined-only)"
  others=$(grep -v -E '^pollux::|^POLLUX_[0-9]+\.[0-9]+$' "$root/exports.txt" || true)
  [ -z "$others" ] || fail "libpollux.so exports symbols outside namespace pollux: $others"
  for want in 'pollux::now_ns()' 'pollux::Context::from_file(' 'pollux::Publisher::offer(' 'pollux::Publisher::commit(' \
              'pollux::Subscriber::poll_impl(' 'pollux::result_name('; do
    grep -q -F "$want" "$root/exports.txt" || fail "libpollux.so does not export $want"
  done
  if grep -E '^pollux::(core|detail|transport|shm|udp|rdma|reliability)::' "$root/exports.txt"; then
    fail "libpollux.so exports internal symbols (above)"
  fi
fi
step "passed"
