#!/usr/bin/env bash
# Installs the Debian 12 packages Pollux needs that are not installed yet.
#   scripts/install-deps.sh          build + run (library, examples, benchmarks)
#   scripts/install-deps.sh --test   also what the test suite needs (Soft-RoCE VM, namespaces)
# Runs apt-get only when something is missing, so a second run costs ~1 s.
set -euo pipefail

BUILD_PKGS=(
  build-essential cmake pkg-config git
  libboost-dev          # Boost.Lockfree spsc_queue (one of the two descriptor rings)
  libhwloc-dev          # topology, NUMA node of a NIC, pinning, node-bound memory
  libabsl-dev           # absl::Status/StatusOr and string formatting on the control path
  libtomlplusplus-dev   # TOML configuration
  libibverbs-dev librdmacm-dev ibverbs-providers   # RDMA transport (verbs, rdma_cm, rxe/mlx5 providers)
  libgtest-dev libgmock-dev   # tests
  libbenchmark-dev            # micro-benchmarks
  gnuplot-nox                 # pollux-bench-rate --plot (PNG charts, pngcairo terminal)
  valgrind                    # bench/callgrind/{shm,udp}-inline.sh (instruction counts per message)
  strace                      # bench/callgrind/udp-inline.sh (system calls per message)
  python3                     # bench/run-all.sh's summary.md, bench_cli_smoke's JSON checks
  pybind11-dev python3-dev    # the `pollux` Python module (api/python), built by default when found
  libpcap-dev                 # pollux-feed: replay of packet captures (feed.source = "pcap")
  # AF_XDP datapath of the UDP transport (docs/XDP.md): libxdp/libbpf, and clang (+ llvm) to
  # compile the XDP program with -target bpf; libelf/zlib are libbpf's static link needs
  libxdp-dev libbpf-dev libelf-dev zlib1g-dev clang llvm
)
TEST_PKGS=(
  # Soft-RoCE VM for the RDMA tests (tests/rdma/run-in-vm.sh)
  qemu-system-x86 busybox-static ibverbs-utils rdma-core perftest rdmacm-utils
  kmod cpio xz-utils binutils file
  # multi-host tests in network namespaces, wire loss with nftables
  iproute2 nftables
  libcap2-bin           # capsh: the AF_XDP tests' run without capabilities
  # libFuzzer harnesses (scripts/fuzz.sh): Debian's clang and its sanitizer/fuzzer runtimes
  clang libclang-rt-14-dev
  clang-format          # scripts/check-format.sh (the test command's format stage)
  python3-pytest python3-setuptools python3-venv python3-pip   # tests/python; `pip install .` (setup.py) checked in a venv
  # a packet analyser nobody here wrote: Wireshark's moldudp64 dissector over pollux-feed's
  # captures, and tcpdump's captures replayed through the handler
  tshark tcpdump
  # the metrics endpoint checked by the real things (tests/stat/metrics_test.cc): promtool and a
  # Prometheus server scraping pollux-stat --serve; headless Chromium rendering the live page
  prometheus chromium
)

want=("${BUILD_PKGS[@]}")
if [ "${1:-}" = "--test" ]; then want+=("${TEST_PKGS[@]}"); fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[deps] all ${#want[@]} packages present"
  exit 0
fi
echo "[deps] installing: ${missing[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "[deps] need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
# Try without refreshing the index first (fast when the cache is current), then refresh.
if ! $SUDO apt-get install -y --no-install-recommends "${missing[@]}" </dev/null; then
  $SUDO apt-get update </dev/null
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}" </dev/null
fi
