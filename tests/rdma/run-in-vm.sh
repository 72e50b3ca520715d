#!/usr/bin/env bash
# tests/rdma/run-in-vm.sh - Pollux's Soft-RoCE test VM.  Runs a command inside a
# throw-away qemu VM that boots Debian's own kernel with Soft-RoCE (rdma_rxe),
# so real RDMA verbs programs can run on a host whose kernel has no RDMA
# support at all (containers, CI).  Adapted from the team's measured recipe
# (run-in-rxe-vm.sh); the project carries its own copy so CI needs nothing else.
#
# Usage:  run-in-vm.sh '<shell command>'   run it (bash -c style) in the guest
#         run-in-vm.sh --setup             one-time preparation only
#         run-in-vm.sh --probe             can the VM run here?  (setup + a quick
#                                          boot; exit 0 = yes, else 125 and a
#                                          "RXEVM-PROBE-FAIL: <reason>" line)
#         run-in-vm.sh --clean             remove the prepared kernel/initramfs
#
# Prints the command's stdout/stderr (streamed live, to stdout/stderr) and exits
# with its status.  124 = host-side timeout, 125 = VM/guest setup failed before
# the command ran (the guest console/setup logs are then printed to stderr).
#
# One-time setup (cached in $RXEVM_WORK, default <repo>/build/rxevm): installs
# the missing Debian packages when run as root (qemu-system-x86 busybox-static
# ibverbs-utils ibverbs-providers rdma-core perftest rdmacm-utils kmod cpio
# xz-utils binutils file iproute2), "apt-get download"s linux-image-amd64,
# unpacks it, runs depmod, extracts an uncompressed vmlinux (PVH direct boot),
# builds a busybox initramfs and probe-boots it.
#
# Guest environment
#   * root fs = the HOST's "/" exported read-only over 9p, with a tmpfs overlay
#     on top: writable inside the guest, nothing ever reaches the host.  Host
#     binaries and libraries are used as-is (same Debian userland), so
#     build/bin/* runs in the guest at the same path.
#     /run, /dev/shm are fresh tmpfs.  The command runs as root, in the same
#     directory it was launched from on the host, with stdin = /dev/null.
#     RXEVM_GUEST=1 is set in the guest.
#   * /rxevm/share (also $RXEVM_SHARE) is READ-WRITE, backed by a host dir:
#     $RXEVM_SHARE_DIR if set, else a per-run dir that is kept and printed if
#     the guest put anything in it.  Use it to bring files back.
#   * no NIC to the outside world.  Internal RoCE "wire" (exists only in the guest):
#       rxe0 on veth0 10.0.0.1/24  <==== veth ====>  rxe1 on veth1 10.0.0.2/24
#     both in the root netns (6.1's rdma_rxe only works in init_net); policy
#     routing forces 10.0.0.1<->10.0.0.2 traffic across the veth.  A device can
#     also talk to itself (e.g. rxe0 -> 10.0.0.1).  RoCEv2/IPv4 GID index = 1
#     (ibv_*_pingpong -g 1, perftest -x 1).  rdma_cm and UD multicast work
#     (multicast receivers must join via rdma_cm / be IGMP members).
#   * guest kernel modules are modprobe-able (/lib/modules is wired up).
#
# Environment knobs
#   RXEVM_MEM=2048 (MiB)  RXEVM_SMP=2  RXEVM_TIMEOUT=1800 (s, whole VM lifetime)
#   RXEVM_ACCEL=auto|kvm|tcg (auto = what --setup probed)  RXEVM_MTU=1500
#   RXEVM_PASSENV="VAR1 VAR2" (host env vars to export in the guest)
#   RXEVM_SHARE_DIR=<dir>  RXEVM_KEEP=1 (keep run dir)  RXEVM_VERBOSE=1
#   RXEVM_QUIET=1 (no [rxevm] progress lines)  RXEVM_NO_RXE=1 (skip rxe setup)
#   RXEVM_TCG_OPTS=tb-size=256 (TCG translation cache MiB; qemu's 1 GiB default
#     roughly doubles qemu's RSS for no speed gain here)
#   RXEVM_WORK=<dir> (default: <repo>/build/rxevm)  RXEVM_KERNEL_PKG=linux-image-amd64
#   RXEVM_KERNEL_DEB=<linux-image-*.deb> (use this file instead of apt-get download;
#     handy for CI caches - Debian drops old kernel ABIs from the mirror)
#   RXEVM_PROBE_TIMEOUT=120 (s, for the --probe boot)
#   RXEVM_APPEND="..." (extra guest kernel arguments, e.g. "clocksource=tsc
#     tsc=reliable": TCG guests otherwise pick HPET, where clock_gettime costs ~1.4 us)
#   RXEVM_PARALLEL=1 (do not serialise VMs sharing one RXEVM_WORK; by default a
#     second run waits, since two TCG VMs on a 2-core host starve each other)
#   RXEVM_REASON_FILE=<file> (a fatal error's reason is also written there)
set -u -o pipefail
export PATH="${PATH:-/usr/bin:/bin}:/usr/local/sbin:/usr/sbin:/sbin"

HERE="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
WORK="${RXEVM_WORK:-$REPO/build/rxevm}"
KPKG="${RXEVM_KERNEL_PKG:-linux-image-amd64}"
MEM="${RXEVM_MEM:-2048}"
SMP="${RXEVM_SMP:-2}"
TIMEOUT="${RXEVM_TIMEOUT:-1800}"

log() { [ "${RXEVM_QUIET:-0}" = 1 ] || echo "[rxevm] $*" >&2; }
die() {
  echo "[rxevm] ERROR: $*" >&2
  [ -z "${RXEVM_REASON_FILE:-}" ] || printf '%s\n' "$*" > "$RXEVM_REASON_FILE" 2>/dev/null
  exit 125
}

# modules the initramfs insmods (resolved with modules.dep, in order)
INITRD_MODS="virtio_pci 9pnet_virtio 9p overlay crc32_generic rdma_rxe ib_uverbs ib_umad rdma_ucm veth dummy"

# ------------------------------------------------------------------ setup --
need_pkgs() {
  local missing=()
  command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
  { [ -x /bin/busybox ] && file -L /bin/busybox 2>/dev/null | grep -q 'statically linked'; } \
    || missing+=(busybox-static)
  command -v file >/dev/null || missing+=(file)
  command -v ibv_devinfo >/dev/null || missing+=(ibverbs-utils)
  ls /usr/lib/*/libibverbs/librxe-rdmav*.so >/dev/null 2>&1 || missing+=(ibverbs-providers)
  command -v rdma >/dev/null || missing+=(iproute2)
  command -v ib_write_lat >/dev/null || missing+=(perftest)
  command -v rping >/dev/null || missing+=(rdmacm-utils)
  command -v depmod >/dev/null || missing+=(kmod)
  command -v cpio >/dev/null || missing+=(cpio)
  command -v xz >/dev/null || missing+=(xz-utils)
  command -v readelf >/dev/null || missing+=(binutils)
  [ -e /usr/sbin/rdma-ndd ] || missing+=(rdma-core)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing: ${missing[*]}"
    [ "$(id -u)" = 0 ] ||
      die "missing host packages (${missing[*]}) and not root, so cannot apt-get install them"
    command -v apt-get >/dev/null || die "missing host packages (${missing[*]}) and no apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
      { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; } ||
      die "apt-get install ${missing[*]} failed"
    command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 still missing after install"
  fi
}

build_initramfs() {
  local kv="$1" out="$2" d m f b
  d="$(mktemp -d "$WORK/initramfs.XXXXXX")"
  mkdir -p "$d"/{bin,proc,sys,dev,mnt/lower,mnt/rw,newroot,modules}
  cp /bin/busybox "$d/bin/busybox"
  : > "$d/modules/order"
  for m in $INITRD_MODS; do
    f="$(modprobe -d "$WORK/kroot" -S "$kv" --show-depends "$m" 2>&1)" ||
      die "kernel $kv has no module $m: $f"
    for f in $(printf '%s\n' "$f" | awk '$1=="insmod"{print $2}'); do
      b="$(basename "$f")"
      grep -qx "$b" "$d/modules/order" || { cp "$f" "$d/modules/"; echo "$b" >> "$d/modules/order"; }
    done
  done
  cat > "$d/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
fail() { echo "RXEVM-INIT-FAIL: $*"; reboot -f; }
case " $(cat /proc/cmdline) " in *" rxevm.probe "*) echo "RXEVM-PROBE-OK"; reboot -f;; esac
while read -r m; do insmod "/modules/$m" || echo "rxevm: insmod $m failed"; done < /modules/order
o="trans=virtio,version=9p2000.L,msize=512000"
mount -t 9p -o "$o,ro,cache=loose" hostroot /mnt/lower || fail "mount hostroot (9p)"
mount -t tmpfs -o mode=0755 tmpfs /mnt/rw
mkdir -p /mnt/rw/upper /mnt/rw/work
mount -t overlay overlay -o lowerdir=/mnt/lower,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work /newroot \
  || fail "mount overlay"
mkdir -p /newroot/rxevm/ctl /newroot/rxevm/share
mount -t 9p -o "$o,cache=none" ctl /newroot/rxevm/ctl || fail "mount ctl (9p)"
mount -t 9p -o "$o,cache=none" share /newroot/rxevm/share || fail "mount share (9p)"
for f in proc sys dev; do mount --move /$f /newroot/$f; done
[ -x /newroot/bin/bash ] || fail "no /bin/bash in host root"
exec switch_root /newroot /bin/bash /rxevm/ctl/stage2.sh
EOF
  chmod +x "$d/init"
  (cd "$d" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) > "$out.tmp" &&
    mv "$out.tmp" "$out" || die "building initramfs failed"
  rm -rf "$d"
}

# uncompressed ELF vmlinux for PVH direct boot: skips the in-guest XZ
# decompression, which costs ~6 s under TCG
extract_vmlinux() {
  local img="$1" out="$2" pos
  for pos in $(tr '\3757zXZ\000\n' '\nabcde=' < "$img" | grep -abo '^abcde' | cut -d: -f1); do
    tail -c "+$pos" "$img" | xz -dc 2>/dev/null > "$out.tmp"
    if readelf -n "$out.tmp" 2>/dev/null | grep -q 'type: (0x00000012)'; then  # XEN_ELFNOTE_PHYS32_ENTRY
      mv "$out.tmp" "$out"; return 0
    fi
  done
  rm -f "$out.tmp"; return 1
}

# boot the kernel with "rxevm.probe" (init prints a marker and reboots at once)
# qemu's stderr and the console go to $WORK/probe.log (quoted in error reasons)
probe_boot() { # probe_boot <kernel image> <seconds> <accel opts...>
  local kimg="$1" secs="$2" rc; shift 2
  timeout -k 5 "$secs" qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot \
    -machine q35 "$@" -smp 1 -m 512 -kernel "$kimg" -initrd "$WORK/initramfs.cpio.gz" \
    -append "console=ttyS0 panic=-1 quiet rxevm.probe" -serial stdio -monitor none -nic none \
    > "$WORK/probe.log" 2>&1 < /dev/null
  rc=$?
  grep -q RXEVM-PROBE-OK "$WORK/probe.log" && return 0
  [ "$rc" = 124 ] && echo "qemu probe boot timed out after ${secs}s" >> "$WORK/probe.log"
  return 1
}
probe_why() {
  tr -d '\r' < "$WORK/probe.log" 2>/dev/null | grep -v '^[[:space:]]*$' | tail -n 3 | paste -sd ' ' -
}

setup() {
  mkdir -p "$WORK" || die "cannot create $WORK"
  exec 9>"$WORK/.lock"; flock 9
  if [ -s "$WORK/ready" ]; then flock -u 9; return 0; fi
  need_pkgs
  log "one-time setup in $WORK"
  local dep deb kv t0 kimg accel=tcg kvmcpu="" tsetup
  tsetup=$(date +%s)
  rm -rf "$WORK/debs" "$WORK/kroot" "$WORK/runs"; mkdir -p "$WORK/debs" "$WORK/kroot"
  if [ -n "${RXEVM_KERNEL_DEB:-}" ]; then
    cp "$RXEVM_KERNEL_DEB" "$WORK/debs/" || die "cannot copy $RXEVM_KERNEL_DEB"
  else
    # linux-image-amd64 is a meta package -> the real linux-image-6.1.0-NN-amd64.
    # Resolve it again after an 'apt-get update' (stale/missing lists, or Debian
    # dropped the ABI the old lists name).
    kdep() {
      local d; d="$(apt-cache depends "$KPKG" 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')"
      [ -n "$d" ] || ! apt-cache show "$KPKG" >/dev/null 2>&1 || d="$KPKG"   # already a real image pkg
      echo "$d"
    }
    dep="$(kdep)"
    { [ -n "$dep" ] && (cd "$WORK/debs" && apt-get download "$dep" >&2 2>/dev/null); } || {
      rm -f "$WORK"/debs/*
      if [ "$(id -u)" = 0 ]; then apt-get update -q >&2 || log "apt-get update failed"; fi
      dep="$(kdep)"
      [ -n "$dep" ] || die "apt knows no kernel package $KPKG (apt lists missing or stale? run apt-get update)"
      (cd "$WORK/debs" && apt-get download "$dep" >&2)
    } || die "apt-get download $dep failed"
  fi
  deb="$(ls "$WORK"/debs/*.deb 2>/dev/null | head -1)"
  [ -n "$deb" ] || die "no kernel .deb in $WORK/debs"
  dpkg -x "$deb" "$WORK/kroot" || die "dpkg -x $deb failed"
  # newer Debian kernels ship /usr/lib/modules only (merged /usr)
  [ -d "$WORK/kroot/lib/modules" ] || [ ! -d "$WORK/kroot/usr/lib/modules" ] ||
    { mkdir -p "$WORK/kroot/lib" && ln -s ../usr/lib/modules "$WORK/kroot/lib/modules"; }
  kv="$(ls "$WORK/kroot/lib/modules" 2>/dev/null | head -1)"
  [ -n "$kv" ] && [ -f "$WORK/kroot/boot/vmlinuz-$kv" ] || die "no vmlinuz in $deb"
  depmod -b "$WORK/kroot" "$kv" || die "depmod failed"
  build_initramfs "$kv" "$WORK/initramfs.cpio.gz"
  kimg="$WORK/kroot/boot/vmlinuz-$kv"
  local tcg_ok=0
  if extract_vmlinux "$kimg" "$WORK/vmlinux-$kv" &&
     probe_boot "$WORK/vmlinux-$kv" 120 -accel tcg -cpu max; then
    kimg="$WORK/vmlinux-$kv"; tcg_ok=1
  else
    log "PVH boot of vmlinux failed; using the compressed bzImage (slower)"
  fi
  if [ -w /dev/kvm ]; then
    for c in host host,-arch-capabilities; do
      t0=$(date +%s)
      if probe_boot "$kimg" 15 -accel kvm -cpu "$c"; then accel=kvm; kvmcpu="$c"; break; fi
      log "KVM (-cpu $c) does not boot this kernel ($(( $(date +%s) - t0 ))s probe)"
    done
  fi
  [ "$tcg_ok" = 1 ] || probe_boot "$kimg" 180 -accel tcg -cpu max || [ "$accel" = kvm ] ||
    die "qemu-system-x86_64 cannot boot kernel $kv (TCG): $(probe_why)"
  { echo "KV=$kv"; echo "DEB=$(basename "$deb")"; echo "KIMG=$kimg"
    echo "ACCEL_DEFAULT=$accel"; echo "KVM_CPU=$kvmcpu"; } > "$WORK/ready.tmp"
  mv "$WORK/ready.tmp" "$WORK/ready"
  log "ready: kernel $kv, image $(basename "$kimg"), accel $accel (setup took $(( $(date +%s) - tsetup ))s)"
  flock -u 9
}

# ---------------------------------------------------------------- stage 2 --
# Runs as PID 1 in the guest (the host's /bin/bash, after switch_root).
write_stage2() {
  cat > "$1" <<'EOF'
#!/bin/bash
CTL=/rxevm/ctl
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb LANG=C.UTF-8 RXEVM_SHARE=/rxevm/share RXEVM_GUEST=1
. $CTL/env
exec 3>>$CTL/setup.log
note() { echo "[guest $(cut -d' ' -f1 /proc/uptime)] $*" >&3; }
finish() {
  echo "$1" > $CTL/rc.tmp && mv $CTL/rc.tmp $CTL/rc; sync
  echo o > /proc/sysrq-trigger; sleep 5; echo b > /proc/sysrq-trigger
}
fail() { note "FAILED: $*"; finish 125; }
note "stage2 start"
# / is an overlay (host root read-only + tmpfs): /tmp etc. are writable and
# still show the host's files.  /run gets a fresh tmpfs.
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /dev/pts /dev/shm /dev/mqueue
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t mqueue mqueue /dev/mqueue 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
rm -rf /lib/modules && mkdir -p /lib/modules && ln -s "$KROOT/lib/modules/$KV" "/lib/modules/$KV"
echo rxevm > /proc/sys/kernel/hostname
ulimit -l unlimited
if [ "${RXEVM_NO_RXE:-0}" != 1 ]; then
  # rxe0/veth0 10.0.0.1 <-> veth1/rxe1 10.0.0.2, all in init_net (6.1's rxe
  # only listens for RoCE (UDP 4791) in init_net).  Policy routing makes
  # locally generated traffic for the other end's IP really cross the veth
  # instead of short-cutting through 'lo'; accept_local lets it back in.
  ip link add veth0 type veth peer name veth1 >&3 2>&1 || fail "ip link add veth"
  for k in all default veth0 veth1; do
    echo 0 > /proc/sys/net/ipv4/conf/$k/rp_filter
    echo 1 > /proc/sys/net/ipv4/conf/$k/accept_local
  done
  ip -batch - >&3 2>&1 <<EOB || fail "ip -batch"
link set lo up
link set veth0 mtu $MTU
link set veth1 mtu $MTU
addr add 10.0.0.1/24 dev veth0
addr add 10.0.0.2/24 dev veth1
link set veth0 up
link set veth1 up
rule add pref 1000 lookup local
rule del pref 0 lookup local
route add 10.0.0.2 dev veth0 src 10.0.0.1 table 100
route add 10.0.0.1 dev veth1 src 10.0.0.2 table 101
rule add pref 100 to 10.0.0.2 iif lo lookup 100
rule add pref 101 to 10.0.0.1 iif lo lookup 101
route add 224.0.0.0/4 dev veth0
EOB
  rdma -b - >&3 2>&1 <<EOB || fail "rdma link add"
link add rxe0 type rxe netdev veth0
link add rxe1 type rxe netdev veth1
EOB
  for i in $(seq 1 200); do   # wait for the RoCEv2 IPv4 GIDs (index 1)
    { read -r g0 < /sys/class/infiniband/rxe0/ports/1/gids/1; } 2>/dev/null
    { read -r g1 < /sys/class/infiniband/rxe1/ports/1/gids/1; } 2>/dev/null
    case "$g0/$g1" in *:0a00:0001/*:0a00:0002) break;; esac
    sleep 0.05
  done
  note "rxe0 gid1=$g0 rxe1 gid1=$g1"
  case "$g0/$g1" in *:0a00:0001/*:0a00:0002) ;; *) fail "rxe GIDs did not appear";; esac
else
  ip link set lo up
fi
note "setup done; running command"
cd "$RXEVM_CWD" 2>/dev/null || cd /
touch $CTL/started
bash $CTL/cmd.sh > $CTL/out 2> $CTL/err < /dev/null
rc=$?
cd /
note "command exited with $rc"
finish $rc
EOF
}

# -------------------------------------------------------------------- run --
run_vm() {
  local cmd="$1" run share accel cpu qpid qrc rc=125 t0 t1 tb="" tp1 tp2 tr v rss=""
  # shellcheck disable=SC1091
  . "$WORK/ready"
  if [ "${RXEVM_PARALLEL:-0}" != 1 ]; then   # one VM at a time per RXEVM_WORK
    exec 8>"$WORK/.vm.lock"
    flock -n 8 || { log "waiting for another VM using $WORK to finish"; flock 8; }
  fi
  mkdir -p "$WORK/runs"
  run="$(mktemp -d "$WORK/runs/run.XXXXXX")" || die "mktemp failed"
  share="${RXEVM_SHARE_DIR:-$run/share}"; mkdir -p "$share" || die "cannot create $share"
  printf '%s\n' "$cmd" > "$run/cmd.sh"
  write_stage2 "$run/stage2.sh"
  {
    printf 'KV=%q\nKROOT=%q\nMTU=%q\nRXEVM_NO_RXE=%q\nRXEVM_CWD=%q\n' "$KV" "$WORK/kroot" \
      "${RXEVM_MTU:-1500}" "${RXEVM_NO_RXE:-0}" "$PWD"
    for v in ${RXEVM_PASSENV:-}; do [ -n "${!v+x}" ] && printf 'export %s=%q\n' "$v" "${!v}"; done
  } > "$run/env"
  : > "$run/out"; : > "$run/err"; : > "$run/setup.log"

  accel="${RXEVM_ACCEL:-auto}"; [ "$accel" = auto ] && accel="$ACCEL_DEFAULT"
  case "$accel" in
    kvm) cpu="${KVM_CPU:-host}"; [ -n "$cpu" ] || cpu=host ;;
    tcg) accel="tcg,thread=multi,${RXEVM_TCG_OPTS:-tb-size=256}"; cpu=max ;;
    *) die "RXEVM_ACCEL must be auto, kvm or tcg" ;;
  esac
  log "booting $KV (accel=${accel%%,*}, ${SMP} vCPU, ${MEM} MiB) run dir $run"
  t0=$(date +%s.%N)
  timeout -k 10 "$TIMEOUT" qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot \
    -machine q35 -accel "$accel" -cpu "$cpu" -smp "$SMP" -m "$MEM" \
    -kernel "$KIMG" -initrd "$WORK/initramfs.cpio.gz" \
    -append "console=ttyS0 panic=-1 quiet mitigations=off${RXEVM_APPEND:+ $RXEVM_APPEND}" \
    -serial "file:$run/console.log" -monitor none -nic none -pidfile "$run/qemu.pid" \
    -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
    -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
    -fsdev local,id=ctl,path="$run",security_model=none \
    -device virtio-9p-pci,fsdev=ctl,mount_tag=ctl \
    -fsdev local,id=share,path="$share",security_model=none \
    -device virtio-9p-pci,fsdev=share,mount_tag=share \
    > "$run/qemu.log" 2>&1 < /dev/null &
  qpid=$!
  (  # qemu's peak RSS (VmHWM), sampled once a second while it runs
    while kill -0 "$qpid" 2>/dev/null; do
      { read -r p < "$run/qemu.pid"; } 2>/dev/null &&
        awk '/^VmHWM:/{print $2}' "/proc/$p/status" > "$run/rss.tmp" 2>/dev/null &&
        [ -s "$run/rss.tmp" ] && mv "$run/rss.tmp" "$run/rss"
      sleep 1
    done
  ) &
  tr=$!
  local intr=0
  trap 'intr=1; kill $qpid 2>/dev/null' INT TERM HUP
  tail -n +1 -s 0.2 -F --pid="$qpid" "$run/out" 2>/dev/null &
  tp1=$!
  tail -n +1 -s 0.2 -F --pid="$qpid" "$run/err" >&2 2>/dev/null &
  tp2=$!
  wait "$qpid"; qrc=$?
  while kill -0 "$qpid" 2>/dev/null; do wait "$qpid"; qrc=$?; done   # after a trapped signal
  wait "$tp1" "$tp2" "$tr" 2>/dev/null
  trap - INT TERM HUP
  t1=$(date +%s.%N)
  [ -s "$run/rss" ] && rss=", qemu peak RSS $(( $(cat "$run/rss") / 1024 )) MiB"
  [ -e "$run/started" ] &&
    tb=", boot-to-command $(awk -v a="$t0" -v b="$(stat -c %.9Y "$run/started")" 'BEGIN{printf "%.1f", b-a}')s"
  if [ "$intr" = 1 ]; then
    echo "[rxevm] interrupted" >&2; rc=130
  elif [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
    echo "[rxevm] TIMEOUT: VM killed after ${TIMEOUT}s (RXEVM_TIMEOUT)" >&2; rc=124
  elif [ -s "$run/rc" ]; then
    rc="$(cat "$run/rc")"
  else
    echo "[rxevm] VM exited (qemu status $qrc) without a command result" >&2; rc=125
  fi
  if [ "$rc" = 125 ] || [ "$rc" = 124 ] || [ "${RXEVM_VERBOSE:-0}" = 1 ]; then
    { echo "----- qemu.log"; cat "$run/qemu.log"; echo "----- guest setup.log"; cat "$run/setup.log"
      echo "----- guest console (tail)"; tail -n 40 "$run/console.log"; echo "-----"; } >&2
  fi
  log "done in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')s${tb}${rss}, exit $rc"
  if [ -z "${RXEVM_SHARE_DIR:-}" ] && [ -n "$(ls -A "$share" 2>/dev/null)" ]; then
    log "files written by the guest are in $share"; RXEVM_KEEP=1
  fi
  [ "${RXEVM_KEEP:-0}" = 1 ] || rm -rf "$run"
  return "$rc"
}

# --probe: can a VM run here?  Setup (cached) plus a quick probe boot of the
# kernel with the accelerator runs would use.  Exit 0, or 125 with a reason.
probe() {
  local t0 accel cpu why
  t0=$(date +%s.%N)
  ( setup ) || exit 125
  # shellcheck disable=SC1091
  . "$WORK/ready"
  accel="${RXEVM_ACCEL:-auto}"; [ "$accel" = auto ] && accel="$ACCEL_DEFAULT"
  case "$accel" in
    kvm) cpu="${KVM_CPU:-host}"; [ -n "$cpu" ] || cpu=host ;;
    *) accel=tcg; cpu=max ;;
  esac
  if ! probe_boot "$KIMG" "${RXEVM_PROBE_TIMEOUT:-120}" -accel "$accel" -cpu "$cpu"; then
    why="$(probe_why)"
    die "qemu-system-x86_64 cannot boot kernel $KV ($accel): ${why:-no output}"
  fi
  log "probe OK: kernel $KV, accel $accel, $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s"
}

case "${1:-}" in
  --setup) setup; exit $? ;;
  --probe)
    if [ -z "${RXEVM_REASON_FILE:-}" ]; then
      RXEVM_REASON_FILE="$(mktemp)" || exit 125; trap 'rm -f "$RXEVM_REASON_FILE"' EXIT
    fi
    : > "$RXEVM_REASON_FILE"
    ( probe ) && exit 0
    [ -s "$RXEVM_REASON_FILE" ] || echo "setup failed (see the lines above)" > "$RXEVM_REASON_FILE"
    echo "RXEVM-PROBE-FAIL: $(head -c 2000 "$RXEVM_REASON_FILE")" >&2
    exit 125 ;;
  --clean) rm -rf "$WORK"; exit 0 ;;
  ""|-h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
[ $# -eq 1 ] || die "pass the guest command as ONE argument, e.g. $0 'ibv_devinfo -v'"
setup || exit 125
run_vm "$1"
exit $?
