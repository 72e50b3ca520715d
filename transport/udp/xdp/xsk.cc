#include "transport/udp/xdp/xsk.h"

#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <net/if.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "transport/udp/xdp/xdp_maps.h"

extern "C" {
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <xdp/libxdp.h>
#include <xdp/xsk.h>
}

namespace pollux::transport::udp::xdp {

// The compiled XDP program (build/transport/pollux_xdp_bpf_object.cc, cmake/embed_bytes.cmake).
extern const unsigned char kBpfObject[];
extern const std::size_t kBpfObject_size;

namespace {

std::string errno_text(int e) { return absl::StrCat(std::strerror(e), " (errno ", e, ")"); }

// A libbpf/libxdp error (negative errno) as a Status naming the interface and the step.
absl::Status step_error(const std::string& ifname, absl::string_view step, int neg_errno, absl::string_view hint = "") {
  const int e = neg_errno < 0 ? -neg_errno : neg_errno;
  return absl::Status(absl::ErrnoToStatusCode(e),
                      absl::StrCat("AF_XDP on interface ", ifname, ": ", step, ": ", errno_text(e), hint));
}

// /proc/<pid>/stat's starttime (field 22), 0 when the process does not exist.
std::uint64_t process_start_time(std::uint32_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%u/stat", pid);
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return 0;
  char buf[1024];
  const std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // The command name (field 2) may hold spaces and parentheses: count fields after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  int field = 2;
  for (; *p != '\0' && field < 22; ++p) {
    if (*p == ' ') ++field;
  }
  return field == 22 ? std::strtoull(p, nullptr, 10) : 0;
}

// The fd of the map named `name` among the program `prog_fd` uses; -errno when none.
int program_map_fd(int prog_fd, const char* name) {
  std::uint32_t map_ids[16] = {};
  bpf_prog_info info{};
  info.nr_map_ids = 16;
  info.map_ids = reinterpret_cast<std::uint64_t>(map_ids);
  std::uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0) return -errno;
  for (std::uint32_t i = 0; i < info.nr_map_ids && i < 16; ++i) {
    const int fd = bpf_map_get_fd_by_id(map_ids[i]);
    if (fd < 0) continue;
    bpf_map_info map_info{};
    std::uint32_t map_len = sizeof(map_info);
    if (bpf_obj_get_info_by_fd(fd, &map_info, &map_len) == 0 && std::strcmp(map_info.name, name) == 0) return fd;
    ::close(fd);
  }
  return -ENOENT;
}

// The attached programs of `ifindex` (nullptr when none; an error other than "none" as Status).
absl::StatusOr<xdp_multiprog*> attached_programs(const std::string& ifname, int ifindex) {
  xdp_multiprog* mp = xdp_multiprog__get_from_ifindex(ifindex);
  const long err = libxdp_get_error(mp);
  if (err == -ENOENT) return nullptr;
  if (err != 0) return step_error(ifname, "listing attached XDP programs", static_cast<int>(err));
  if (mp == nullptr) return nullptr;
  return mp;
}

// Pollux's program among those attached (nullptr when absent).
xdp_program* find_pollux_program(xdp_multiprog* mp) {
  if (xdp_multiprog__is_legacy(mp)) {
    xdp_program* main = xdp_multiprog__main_prog(mp);
    if (main != nullptr && std::strncmp(xdp_program__name(main), POLLUX_XDP_PROG_KERNEL_NAME,
                                        std::strlen(POLLUX_XDP_PROG_KERNEL_NAME)) == 0) {
      return main;
    }
    return nullptr;
  }
  for (xdp_program* p = xdp_multiprog__next_prog(nullptr, mp); p != nullptr; p = xdp_multiprog__next_prog(p, mp)) {
    if (std::strncmp(xdp_program__name(p), POLLUX_XDP_PROG_KERNEL_NAME, std::strlen(POLLUX_XDP_PROG_KERNEL_NAME)) ==
        0) {
      return p;
    }
  }
  return nullptr;
}

// The owner record of Pollux's program `p` (zeros when it cannot be read), and whether the
// process it names still exists: same pid and same start time (a reused pid has another).
pollux_xdp_owner read_owner(xdp_program* p) {
  pollux_xdp_owner owner{};
  const int owner_fd = program_map_fd(xdp_program__fd(p), POLLUX_XDP_OWNER_MAP);
  if (owner_fd >= 0) {
    std::uint32_t key = 0;
    bpf_map_lookup_elem(owner_fd, &key, &owner);
    ::close(owner_fd);
  }
  return owner;
}

bool owner_alive(const pollux_xdp_owner& owner) {
  return owner.pid != 0 && owner.start_time != 0 && process_start_time(owner.pid) == owner.start_time;
}

}  // namespace

// One bound queue: its socket and rings. Their addresses are held by libxdp from creation to
// deletion, so the queues live in a fixed array.
struct XskQueue {
  xsk_socket* socket = nullptr;
  xsk_ring_prod fill{};
  xsk_ring_cons comp{};
  xsk_ring_cons rx{};
  xsk_ring_prod tx{};  // the first queue's only
};

struct Xsk::Impl {
  bpf_object* obj = nullptr;
  xdp_program* prog = nullptr;
  xdp_attach_mode attach_mode = XDP_MODE_UNSPEC;
  bool attached = false;
  int dests_fd = -1;
  int xsks_fd = -1;
  int owner_fd = -1;
  int epoll_fd = -1;  // the sockets' readiness, with several queues
  void* area = nullptr;
  std::size_t area_size = 0;
  xsk_umem* umem = nullptr;
  std::unique_ptr<XskQueue[]> q;
  std::uint32_t nq = 0;
  std::vector<std::uint64_t> tx_free;
};

absl::StatusOr<std::uint32_t> attached_pollux_program(int ifindex) {
  absl::StatusOr<xdp_multiprog*> mp = attached_programs(absl::StrCat("#", ifindex), ifindex);
  if (!mp.ok()) return mp.status();
  if (*mp == nullptr) return 0u;
  xdp_program* p = find_pollux_program(*mp);
  const std::uint32_t id = p != nullptr ? xdp_program__id(p) : 0;
  xdp_multiprog__close(*mp);
  return id;
}

absl::StatusOr<PolluxProgramOwner> pollux_program_owner(int ifindex) {
  absl::StatusOr<xdp_multiprog*> mp = attached_programs(absl::StrCat("#", ifindex), ifindex);
  if (!mp.ok()) return mp.status();
  PolluxProgramOwner out;
  if (*mp == nullptr) return out;
  if (xdp_program* p = find_pollux_program(*mp)) {
    const pollux_xdp_owner owner = read_owner(p);
    out.prog_id = xdp_program__id(p);
    out.pid = owner.pid;
    out.alive = owner_alive(owner);
  }
  xdp_multiprog__close(*mp);
  return out;
}

// Detaches a Pollux program whose owner is gone; refuses one whose owner lives. Sets `info`.
static absl::Status remove_stale_program(const std::string& ifname, int ifindex, XskInfo* info) {
  absl::StatusOr<xdp_multiprog*> mp = attached_programs(ifname, ifindex);
  if (!mp.ok()) return mp.status();
  if (*mp == nullptr) return absl::OkStatus();
  xdp_program* p = find_pollux_program(*mp);
  if (p == nullptr) {
    // Another program: attach decides (libxdp's dispatcher can run both where the kernel allows).
    xdp_multiprog__close(*mp);
    return absl::OkStatus();
  }
  const pollux_xdp_owner owner = read_owner(p);
  if (owner_alive(owner)) {
    const std::uint32_t id = xdp_program__id(p);
    xdp_multiprog__close(*mp);
    return absl::FailedPreconditionError(absl::StrCat("AF_XDP on interface ", ifname, ": Pollux's XDP program (id ", id,
                                                      ") is attached by the live process ", owner.pid,
                                                      "; one process per interface"));
  }
  int err = 0;
  if (xdp_multiprog__is_legacy(*mp)) {
    err = xdp_multiprog__detach(*mp);
  } else {
    err = xdp_program__detach(p, ifindex, xdp_multiprog__attach_mode(*mp), 0);
  }
  xdp_multiprog__close(*mp);
  if (err != 0) {
    return step_error(ifname, absl::StrCat("detaching the XDP program left by process ", owner.pid), err);
  }
  info->removed_stale = true;
  info->stale_pid = owner.pid;
  return absl::OkStatus();
}

// xsk_socket__create, retried for a bounded time while the queue is busy: the kernel releases a
// closed socket's hold on its queue (its buffer pool) from a work queue, after close() returned,
// so a socket opened right after another one on the same queue, or after its process died, can
// find the queue still taken for a moment. A queue a live socket holds stays busy: EBUSY then.
// libbpf and libxdp print informational lines at every load ("skipping unrecognized data
// section", "falling back to loading single prog without dispatcher"). They are process-wide
// settings; Pollux keeps warnings and errors (on stderr, where those libraries put them: open()
// runs on the control path) and drops the rest, which open()'s Status and XskInfo already say.
static int quiet_libbpf(enum libbpf_print_level level, const char* format, va_list args) {
  return level == LIBBPF_WARN ? std::vfprintf(stderr, format, args) : 0;
}
// libxdp warns when bpffs is missing and it loads the program without its dispatcher; open()
// handles that case (XskInfo, docs/XDP.md), so those two are dropped too.
static int quiet_libxdp(enum libxdp_print_level level, const char* format, va_list args) {
  if (level != LIBXDP_WARN || std::strstr(format, "bpffs") != nullptr) return 0;
  return std::vfprintf(stderr, format, args);
}

static int create_socket(const std::string& ifname, std::uint32_t queue, xsk_umem* umem, XskQueue* q, bool first,
                         const xsk_socket_config* config) {
  constexpr int kBusyRetries = 2000;  // x 1 ms
  int err = 0;
  for (int attempt = 0; attempt <= kBusyRetries; ++attempt) {
    // The first socket uses the UMEM's own fill and completion rings and transmits; the others
    // receive only, each with fill and completion rings of its own (a UMEM shared across queues).
    err = first ? xsk_socket__create(&q->socket, ifname.c_str(), queue, umem, &q->rx, &q->tx, config)
                : xsk_socket__create_shared(&q->socket, ifname.c_str(), queue, umem, &q->rx, nullptr, &q->fill,
                                            &q->comp, config);
    if (err != -EBUSY) break;
    q->socket = nullptr;
    usleep(1000);
  }
  if (err != 0) q->socket = nullptr;
  return err;
}

Xsk::Xsk(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Xsk::~Xsk() { close(); }

int Xsk::fd() const { return impl_->nq == 1 ? xsk_socket__fd(impl_->q[0].socket) : impl_->epoll_fd; }

std::string Xsk::queues_label() const {
  if (queues_.size() == 1) return absl::StrCat("queue ", queues_[0]);
  bool run = true;
  for (std::size_t i = 1; i < queues_.size(); ++i) run &= queues_[i] == queues_[i - 1] + 1;
  if (run) return absl::StrCat("queues ", queues_.front(), "-", queues_.back());
  return absl::StrCat("queues ", absl::StrJoin(queues_, ","));
}

std::string Xsk::describe() const {
  return absl::StrCat("AF_XDP ", ifname_, " ", queues_label(), ", ",
                      info_.zero_copy ? "zero-copy (native XDP)"
                      : info_.native  ? "copy mode (native XDP)"
                                      : "copy mode (generic XDP)",
                      ", program id ", info_.prog_id);
}

std::uint64_t Xsk::kernel_dropped() const {
  std::uint64_t total = 0;
  for (std::uint32_t i = 0; i < impl_->nq; ++i) {
    xdp_statistics st{};
    socklen_t len = sizeof st;
    if (getsockopt(xsk_socket__fd(impl_->q[i].socket), SOL_XDP, XDP_STATISTICS, &st, &len) == 0) {
      total += st.rx_dropped + st.rx_ring_full + st.rx_fill_ring_empty_descs + st.rx_invalid_descs;
    }
  }
  return total;
}

absl::StatusOr<std::unique_ptr<Xsk>> Xsk::open(const XskOptions& options) {
  const std::string& ifname = options.ifname;
  const std::uint32_t frames = options.frame_count;
  if (frames < 16 || (frames & (frames - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AF_XDP on interface ", ifname, ": frame_count ", frames, " is not a power of two >= 16"));
  }
  if (options.frame_size != 2048 && options.frame_size != 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("AF_XDP on interface ", ifname, ": frame_size ", options.frame_size, " is not 2048 or 4096"));
  }
  const std::vector<std::uint32_t>& queues = options.queues;
  if (queues.empty()) return absl::InvalidArgumentError(absl::StrCat("AF_XDP on interface ", ifname, ": no queue"));
  for (std::size_t i = 0; i < queues.size(); ++i) {
    if (queues[i] >= POLLUX_XDP_MAX_QUEUES) {
      return absl::InvalidArgumentError(absl::StrCat("AF_XDP on interface ", ifname, ": queue ", queues[i],
                                                     " is beyond the program's ", POLLUX_XDP_MAX_QUEUES, " queues"));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (queues[j] == queues[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("AF_XDP on interface ", ifname, ": queue ", queues[i], " is named twice"));
      }
    }
  }
  const std::uint32_t nq = static_cast<std::uint32_t>(queues.size());
  if (frames / 2 / nq < 8) {
    return absl::InvalidArgumentError(absl::StrCat("AF_XDP on interface ", ifname, ": ", frames, " frames give ", nq,
                                                   " queues fewer than 8 receive frames each: raise the frame count"));
  }
  const unsigned ifindex = if_nametoindex(ifname.c_str());
  if (ifindex == 0) {
    return step_error(ifname, "looking up the interface (in this network namespace)", errno);
  }
  std::unique_ptr<Xsk> x(new Xsk(std::make_unique<Impl>()));
  Impl& m = *x->impl_;
  x->ifname_ = ifname;
  x->ifindex_ = static_cast<int>(ifindex);
  x->frame_size_ = options.frame_size;
  x->queues_ = queues;
  m.q.reset(new XskQueue[nq]);
  m.nq = nq;
  {
    ifreq ifr{};
    std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname.c_str());
    const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    const int rc = s >= 0 ? ioctl(s, SIOCGIFHWADDR, &ifr) : -1;
    const int e = errno;
    if (s >= 0) ::close(s);
    if (rc != 0) return step_error(ifname, "reading the MAC address (SIOCGIFHWADDR)", e);
    std::memcpy(x->mac_, ifr.ifr_hwaddr.sa_data, 6);
  }

  static std::once_flag quiet_once;
  std::call_once(quiet_once, [] {
    libbpf_set_print(quiet_libbpf);
    libxdp_set_print(quiet_libxdp);
  });
  if (absl::Status s = remove_stale_program(ifname, x->ifindex_, &x->info_); !s.ok()) return s;

  // The program, from the bytes embedded in the library.
  LIBBPF_OPTS(bpf_object_open_opts, open_opts, .object_name = "pollux_xdp");
  m.obj = bpf_object__open_mem(kBpfObject, kBpfObject_size, &open_opts);
  if (const long err = libbpf_get_error(m.obj); err != 0) {
    m.obj = nullptr;
    return step_error(ifname, "opening the embedded XDP object", static_cast<int>(err));
  }
  m.prog = xdp_program__from_bpf_obj(m.obj, "xdp");
  if (const long err = libxdp_get_error(m.prog); err != 0) {
    m.prog = nullptr;
    return step_error(ifname, "creating the XDP program", static_cast<int>(err));
  }
  const bool native_first = options.mode != XskMode::kGeneric;
  int err = xdp_program__attach(m.prog, x->ifindex_, native_first ? XDP_MODE_NATIVE : XDP_MODE_SKB, 0);
  m.attach_mode = native_first ? XDP_MODE_NATIVE : XDP_MODE_SKB;
  std::string attach_step = native_first ? "attaching the XDP program (native)" : "attaching the XDP program (generic)";
  if (err != 0 && options.mode == XskMode::kAuto) {
    attach_step = absl::StrCat("attaching the XDP program (generic, after native failed with ", errno_text(-err), ")");
    err = xdp_program__attach(m.prog, x->ifindex_, XDP_MODE_SKB, 0);
    m.attach_mode = XDP_MODE_SKB;
  }
  if (err != 0) {
    return step_error(ifname, attach_step, err,
                      err == -EBUSY ? " (another XDP program is attached and libxdp's dispatcher is unavailable)" : "");
  }
  m.attached = true;
  x->info_.native = m.attach_mode == XDP_MODE_NATIVE;
  x->info_.prog_id = xdp_program__id(m.prog);
  m.dests_fd = bpf_object__find_map_fd_by_name(m.obj, POLLUX_XDP_DESTS_MAP);
  m.xsks_fd = bpf_object__find_map_fd_by_name(m.obj, POLLUX_XDP_XSKS_MAP);
  m.owner_fd = bpf_object__find_map_fd_by_name(m.obj, POLLUX_XDP_OWNER_MAP);
  if (m.dests_fd < 0 || m.xsks_fd < 0 || m.owner_fd < 0) {
    return step_error(ifname, "finding the program's maps", ENOENT);
  }
  {
    pollux_xdp_owner owner{};
    owner.pid = static_cast<std::uint32_t>(getpid());
    owner.start_time = process_start_time(owner.pid);
    std::uint32_t key = 0;
    if (bpf_map_update_elem(m.owner_fd, &key, &owner, BPF_ANY) != 0) {
      return step_error(ifname, "recording the owner process", errno);
    }
  }

  // The UMEM: the first half of the frames receive, the second half transmit.
  const std::uint32_t half = frames / 2;
  m.area_size = static_cast<std::size_t>(frames) * options.frame_size;
  // 2 MiB pages where the host has them reserved (vm.nr_hugepages): fewer TLB misses on the
  // frames; 4 KiB pages otherwise.
  m.area = MAP_FAILED;
  if (m.area_size % (2u << 20) == 0) {
    m.area = mmap(nullptr, m.area_size, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE | MAP_HUGETLB, -1, 0);
    x->info_.huge_pages = m.area != MAP_FAILED;
  }
  if (m.area == MAP_FAILED) {
    m.area = mmap(nullptr, m.area_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  }
  if (m.area == MAP_FAILED) {
    m.area = nullptr;
    return step_error(ifname, absl::StrCat("mapping the UMEM (", m.area_size, " bytes)"), errno);
  }
  x->umem_area_ = static_cast<std::uint8_t*>(m.area);
  xsk_umem_config umem_config{};
  umem_config.fill_size = half;
  umem_config.comp_size = half;
  umem_config.frame_size = options.frame_size;
  // The kernel puts a received frame XDP_PACKET_HEADROOM (256) + this many bytes into its chunk:
  // 6 puts an IPv4/UDP payload without IP options (42 bytes of headers in) on an 8-byte boundary,
  // so a protocol's frames in it can be read in place (kRxPayloadAlign).
  umem_config.frame_headroom = kRxHeadroom;
  umem_config.flags = 0;
  err = xsk_umem__create(&m.umem, m.area, m.area_size, &m.q[0].fill, &m.q[0].comp, &umem_config);
  if (err != 0) {
    m.umem = nullptr;
    return step_error(ifname, absl::StrCat("registering the UMEM (", frames, " frames)"), err,
                      err == -ENOBUFS ? " (RLIMIT_MEMLOCK too low without CAP_IPC_LOCK)" : "");
  }

  // The sockets: zero-copy first in auto mode, copy when the driver cannot (decided on the first
  // queue; the others bind as it did).
  xsk_socket_config config{};
  config.rx_size = half;
  config.tx_size = half;
  config.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
  config.xdp_flags = m.attach_mode == XDP_MODE_NATIVE ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE;
  const bool try_zero_copy = options.mode == XskMode::kAuto || options.mode == XskMode::kZeroCopy;
  config.bind_flags = XDP_USE_NEED_WAKEUP | (try_zero_copy ? XDP_ZEROCOPY : XDP_COPY);
  for (std::uint32_t i = 0; i < nq; ++i) {
    err = create_socket(ifname, queues[i], m.umem, &m.q[i], i == 0, &config);
    if (i == 0 && err == -EOPNOTSUPP && options.mode == XskMode::kAuto) {
      config.bind_flags = XDP_USE_NEED_WAKEUP | XDP_COPY;
      err = create_socket(ifname, queues[i], m.umem, &m.q[i], true, &config);
    }
    if (err != 0) {
      const bool zc = (config.bind_flags & XDP_ZEROCOPY) != 0;
      return step_error(
          ifname,
          absl::StrCat("binding the AF_XDP socket to queue ", queues[i], zc ? " in zero-copy mode" : " in copy mode"),
          err,
          err == -EOPNOTSUPP && zc ? " (the driver has no zero-copy AF_XDP; use copy or auto)"
          : err == -EBUSY          ? " (another AF_XDP socket is bound to this queue)"
          : err == -EINVAL         ? " (the interface has no such queue: ethtool -l)"
                                   : "");
    }
    const int sfd = xsk_socket__fd(m.q[i].socket);
    if (options.busy_poll_us > 0) {
      const int one = 1;
      const int us = static_cast<int>(options.busy_poll_us);
      const int budget = static_cast<int>(options.busy_poll_budget > 0 ? options.busy_poll_budget : 64);
      const bool ok = setsockopt(sfd, SOL_SOCKET, SO_PREFER_BUSY_POLL, &one, sizeof one) == 0 &&
                      setsockopt(sfd, SOL_SOCKET, SO_BUSY_POLL, &us, sizeof us) == 0 &&
                      setsockopt(sfd, SOL_SOCKET, SO_BUSY_POLL_BUDGET, &budget, sizeof budget) == 0;
      if (i == 0) x->info_.busy_poll = ok;
      if (!ok && i == 0) {
        absl::StrAppend(&x->info_.notes, "busy polling refused: ", errno_text(errno),
                        " (SO_BUSY_POLL above net.core.busy_read needs CAP_NET_ADMIN)");
      }
    }
    if (i == 0) {
      xdp_options xdp_opts{};
      socklen_t opts_len = sizeof(xdp_opts);
      if (getsockopt(sfd, SOL_XDP, XDP_OPTIONS, &xdp_opts, &opts_len) == 0) {
        x->info_.zero_copy = (xdp_opts.flags & XDP_OPTIONS_ZEROCOPY) != 0;
      }
    }
    err = xsk_socket__update_xskmap(m.q[i].socket, m.xsks_fd);
    if (err != 0) {
      return step_error(ifname, absl::StrCat("adding the socket to the XSK map (queue ", queues[i], ")"), err);
    }
  }
  if (nq > 1) {
    // One fd for the owner's poll set: level-triggered, readable while any RX ring holds a frame.
    m.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (m.epoll_fd < 0) return step_error(ifname, "creating the sockets' epoll set", errno);
    for (std::uint32_t i = 0; i < nq; ++i) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u32 = i;
      if (epoll_ctl(m.epoll_fd, EPOLL_CTL_ADD, xsk_socket__fd(m.q[i].socket), &ev) != 0) {
        return step_error(ifname, "adding a socket to the sockets' epoll set", errno);
      }
    }
  }

  // The receive frames shared out among the queues' fill rings; every transmit frame free.
  const std::uint32_t per_queue = half / nq;
  for (std::uint32_t i = 0; i < nq; ++i) {
    std::uint32_t idx = 0;
    if (xsk_ring_prod__reserve(&m.q[i].fill, per_queue, &idx) != per_queue) {
      return step_error(ifname, absl::StrCat("filling the fill ring of queue ", queues[i]), ENOSPC);
    }
    for (std::uint32_t k = 0; k < per_queue; ++k) {
      *xsk_ring_prod__fill_addr(&m.q[i].fill, idx + k) =
          static_cast<std::uint64_t>(i * per_queue + k) * options.frame_size;
    }
    xsk_ring_prod__submit(&m.q[i].fill, per_queue);
  }
  m.tx_free.resize(half);
  for (std::uint32_t i = 0; i < half; ++i) {
    m.tx_free[i] = static_cast<std::uint64_t>(half + i) * options.frame_size;
  }
  x->tx_free_ = m.tx_free.data();
  x->tx_free_count_ = half;
  x->tx_frames_ = half;
  return x;
}

void Xsk::close() {
  if (!impl_) return;
  Impl& m = *impl_;
  if (m.epoll_fd >= 0) ::close(m.epoll_fd);
  // The shared sockets first: the UMEM goes with the last one.
  for (std::uint32_t i = m.nq; i-- > 0;) {
    if (m.q[i].socket != nullptr) xsk_socket__delete(m.q[i].socket);
  }
  if (m.umem != nullptr) xsk_umem__delete(m.umem);
  if (m.area != nullptr) munmap(m.area, m.area_size);
  if (m.attached) xdp_program__detach(m.prog, ifindex_, m.attach_mode, 0);
  if (m.prog != nullptr) xdp_program__close(m.prog);
  if (m.obj != nullptr) bpf_object__close(m.obj);
  impl_.reset();
}

absl::Status Xsk::add_destination(std::uint32_t addr, std::uint16_t port) {
  const pollux_xdp_dest key{addr, port, 0};
  const std::uint32_t one = 1;
  if (bpf_map_update_elem(impl_->dests_fd, &key, &one, BPF_ANY) != 0) {
    return step_error(ifname_, "adding a UDP destination to the filter map", errno);
  }
  return absl::OkStatus();
}

absl::Status Xsk::remove_destination(std::uint32_t addr, std::uint16_t port) {
  const pollux_xdp_dest key{addr, port, 0};
  if (bpf_map_delete_elem(impl_->dests_fd, &key) != 0) {
    return step_error(ifname_, "removing a UDP destination from the filter map", errno);
  }
  return absl::OkStatus();
}

std::uint32_t Xsk::rx_peek(RxFrame* out, std::uint32_t max) {
  Impl& m = *impl_;
  std::uint32_t idx = 0, n = 0, qi = rx_next_;
  // The queues take turns: the first one with frames from where the last peek left off.
  for (std::uint32_t k = 0; k < m.nq; ++k, qi = qi + 1 == m.nq ? 0 : qi + 1) {
    n = xsk_ring_cons__peek(&m.q[qi].rx, max, &idx);
    if (n > 0) break;
  }
  if (n == 0) {
    rx_peeked_ = 0;
    return 0;
  }
  const xsk_ring_cons& rx = m.q[qi].rx;
  for (std::uint32_t i = 0; i < n; ++i) {
    const xdp_desc* d = xsk_ring_cons__rx_desc(&rx, idx + i);
    out[i] = RxFrame{static_cast<const std::uint8_t*>(xsk_umem__get_data(m.area, d->addr)), d->len};
  }
  rx_queue_ = qi;
  rx_next_ = qi + 1 == m.nq ? 0 : qi + 1;
  rx_peek_index_ = idx;
  rx_peeked_ = n;
  stats_.rx_frames += n;
  return n;
}

void Xsk::rx_release(std::uint32_t consumed) {
  Impl& m = *impl_;
  if (rx_peeked_ == 0) return;
  XskQueue& q = m.q[rx_queue_];
  if (consumed > rx_peeked_) consumed = rx_peeked_;
  if (consumed < rx_peeked_) {
    xsk_ring_cons__cancel(&q.rx, rx_peeked_ - consumed);  // peeked again next time, first
    stats_.rx_frames -= rx_peeked_ - consumed;
    rx_next_ = rx_queue_;
  }
  const std::uint32_t n = consumed;
  rx_peeked_ = 0;
  if (n == 0) return;
  // The queue's fill ring holds every receive frame of the queue, so the frames just received
  // always fit.
  std::uint32_t fill_idx = 0;
  const std::uint32_t reserved = xsk_ring_prod__reserve(&q.fill, n, &fill_idx);
  const std::uint64_t mask = ~static_cast<std::uint64_t>(frame_size_ - 1);
  for (std::uint32_t i = 0; i < reserved; ++i) {
    const std::uint64_t addr = xsk_ring_cons__rx_desc(&q.rx, rx_peek_index_ + i)->addr;
    *xsk_ring_prod__fill_addr(&q.fill, fill_idx + i) = addr & mask;
  }
  xsk_ring_prod__submit(&q.fill, reserved);
  xsk_ring_cons__release(&q.rx, n);
}

bool Xsk::rx_available() const {
  for (std::uint32_t i = 0; i < impl_->nq; ++i) {
    if (xsk_cons_nb_avail(&impl_->q[i].rx, 1) > 0) return true;
  }
  return false;
}

bool Xsk::rx_kick(bool always) {
  Impl& m = *impl_;
  bool kicked = false;
  for (std::uint32_t i = 0; i < m.nq; ++i) {
    if (!always && !xsk_ring_prod__needs_wakeup(&m.q[i].fill)) continue;
    ++stats_.rx_wakeups;
    (void)recvfrom(xsk_socket__fd(m.q[i].socket), nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
    kicked = true;
  }
  return kicked;
}

bool Xsk::rx_wait(int timeout_ms) {
  (void)rx_kick(false);
  pollfd p{fd(), POLLIN, 0};
  return poll(&p, 1, timeout_ms) > 0 && (p.revents & POLLIN) != 0;
}

std::uint32_t Xsk::send_udp4(const Udp4Addressing& addressing, std::uint8_t ttl, const TxPayload* payloads,
                             std::uint32_t n) {
  // What the kernel transmits per sendto() in copy mode (TX_BATCH_SIZE in net/xdp/xsk.c).
  constexpr std::uint32_t kKernelTxBatch = 32;
  XskQueue& q = impl_->q[0];
  if (n > tx_free_count_) n = tx_free_count_;
  // Stop before the first payload that does not fit in a frame.
  for (std::uint32_t i = 0; i < n; ++i) {
    if (payloads[i].len > frame_size_ - kUdp4HeadersSize) {
      n = i;
      break;
    }
  }
  std::uint32_t total = 0;
  while (total < n) {
    std::uint32_t idx = 0;
    const std::uint32_t want = n - total < kKernelTxBatch ? n - total : kKernelTxBatch;
    const std::uint32_t built = xsk_ring_prod__reserve(&q.tx, want, &idx);
    if (built == 0) break;
    for (std::uint32_t i = 0; i < built; ++i) {
      const std::uint64_t addr = tx_free_[--tx_free_count_];
      const TxPayload& p = payloads[total + i];
      const std::size_t len = build_udp4_frame(umem_area_ + addr, frame_size_, addressing, ttl, p.data, p.len);
      xdp_desc* d = xsk_ring_prod__tx_desc(&q.tx, idx + i);
      d->addr = addr;
      d->len = static_cast<std::uint32_t>(len);
      d->options = 0;
    }
    xsk_ring_prod__submit(&q.tx, built);
    stats_.tx_frames += built;
    total += built;
    // The kernel asks for a kick through need_wakeup: always in copy mode (it transmits inside
    // sendto), only when its driver sleeps in zero-copy mode. EAGAIN: it stopped at its batch
    // limit with frames left in the ring (an earlier chunk's, when a kick was refused for
    // buffer space), so once more; EBUSY/ENOBUFS: the device is busy, the next send kicks.
    for (int attempt = 0; attempt < 4 && xsk_ring_prod__needs_wakeup(&q.tx); ++attempt) {
      ++stats_.tx_kicks;
      if (sendto(xsk_socket__fd(q.socket), nullptr, 0, MSG_DONTWAIT, nullptr, 0) >= 0) break;
      if (errno != EAGAIN) {
        if (errno != EBUSY && errno != ENOBUFS) ++stats_.tx_kick_errors;
        break;
      }
      ++stats_.tx_kick_retries;
    }
  }
  return total;
}

std::uint32_t Xsk::reap_completions() {
  xsk_ring_cons& comp = impl_->q[0].comp;
  std::uint32_t idx = 0;
  const std::uint32_t n = xsk_ring_cons__peek(&comp, tx_frames_, &idx);
  for (std::uint32_t i = 0; i < n; ++i) {
    tx_free_[tx_free_count_++] = *xsk_ring_cons__comp_addr(&comp, idx + i);
  }
  if (n) xsk_ring_cons__release(&comp, n);
  stats_.tx_completions += n;
  return n;
}

}  // namespace pollux::transport::udp::xdp
