#include "feed_handler/source/live_source.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "feed_handler/arbiter/arbiter.h"
#include "feed_handler/role_progress.h"
#include "feed_handler/source/capture.h"
#include "pollux/clock.h"
#include "pollux/datagram.h"

namespace pollux::feed {

namespace {

namespace mold = itch::mold;

constexpr std::size_t kBurst = 32;           // datagrams per recvmmsg
constexpr std::size_t kMaxDatagram = 65536;  // a UDP payload is at most 65507 bytes
constexpr std::int64_t kCountersEveryNs = 1'000'000;

// recvmmsg buffers of one socket, allocated (and touched) once. Each header owns its data
// buffer and its sender address for good (msg_iov, msg_name); headers may change places,
// the buffers travel with them.
struct RxBatch {
  std::vector<std::uint8_t> bytes;
  std::array<mmsghdr, kBurst> msgs{};
  std::array<iovec, kBurst> iov{};
  std::array<sockaddr_in, kBurst> from{};  // each datagram's sender
  // Room for each datagram's receive time (SCM_TIMESTAMPNS), asked for when capturing.
  static constexpr std::size_t kControlBytes = CMSG_SPACE(sizeof(timespec));
  struct alignas(cmsghdr) Control {
    std::uint8_t bytes[kControlBytes];
  };
  std::array<Control, kBurst> control{};
  std::size_t n = 0, pos = 0;  // datagrams read, datagrams handed to the arbiter

  RxBatch() : bytes(kBurst * kMaxDatagram, 0) {
    for (std::size_t i = 0; i < kBurst; ++i) {
      iov[i] = {bytes.data() + i * kMaxDatagram, kMaxDatagram};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_name = &from[i];
      msgs[i].msg_hdr.msg_namelen = sizeof from[i];
      msgs[i].msg_hdr.msg_control = control[i].bytes;
      msgs[i].msg_hdr.msg_controllen = kControlBytes;
    }
  }
  // Before each recvmmsg: the room for a receive time (in-out, as msg_namelen).
  void reset_control() noexcept {
    for (mmsghdr& m : msgs) m.msg_hdr.msg_controllen = kControlBytes;
  }
  // The kernel's receive time of datagram i (ns since the epoch), or -1 when none came.
  std::int64_t rx_time(std::size_t i) const noexcept {
    msghdr& h = const_cast<msghdr&>(msgs[i].msg_hdr);
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS && c->cmsg_len >= CMSG_LEN(sizeof(timespec))) {
        timespec ts;
        std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
        return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
      }
    }
    return -1;
  }
  pcap::Endpoint sender(std::size_t i) const noexcept {
    const auto* a = static_cast<const sockaddr_in*>(msgs[i].msg_hdr.msg_name);
    return {a->sin_addr.s_addr, a->sin_port};
  }
  std::span<const std::uint8_t> datagram(std::size_t i) const noexcept {
    return {static_cast<const std::uint8_t*>(msgs[i].msg_hdr.msg_iov->iov_base), msgs[i].msg_len};
  }
  bool truncated(std::size_t i) const noexcept { return (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0; }

  // Keeps the datagrams of the burst just read that `sender` sent, in their order, and puts
  // the others behind them, out of the batch. Returns how many it put out.
  std::size_t keep_from(in_addr_t sender) noexcept {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < n; ++i) {
      msghdr& h = msgs[i].msg_hdr;
      const auto* a = static_cast<const sockaddr_in*>(h.msg_name);
      const bool ok = h.msg_namelen == sizeof(sockaddr_in) && a->sin_family == AF_INET && a->sin_addr.s_addr == sender;
      h.msg_namelen = sizeof(sockaddr_in);  // in-out for recvmmsg: the room for the next sender
      if (!ok) continue;
      if (i != kept) std::swap(msgs[i], msgs[kept]);
      ++kept;
    }
    const std::size_t out = n - kept;
    n = kept;
    return out;
  }
};

class LiveSource final : public ArbiterSource {
 public:
  explicit LiveSource(const FeedConfig& cfg) : ArbiterSource(cfg, kOutputBytes) {}
  ~LiveSource() override {
    if (capture_) capture_->stop();
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }

  absl::Status open();
  absl::Status advance(std::size_t consumed) override;
  std::vector<std::pair<std::string, std::string>> live_notes() const override;

 private:
  // Room for a full burst of the largest datagrams on every socket, so the in-order path
  // never has to fall back to the window for lack of output space.
  static constexpr std::size_t kOutputBytes = 3 * kBurst * kMaxDatagram;
  // The capture's counters, then (datapath = "xdp") the AF_XDP receiver's.
  static constexpr std::array<const char*, 9> kExtraNames = {
      "capture_records", "capture_bytes",         "capture_dropped", "capture_files",     "capture_no_kernel_time",
      "xdp_malformed",   "xdp_partial_checksums", "xdp_unmatched",   "xdp_kernel_dropped"};
  static constexpr std::size_t kCaptureCount = 5, kXdpCount = 4;
  std::span<const char* const> extra_names() const noexcept override {
    if (capture_) return std::span<const char* const>(kExtraNames).first(kCaptureCount + (xdp_ ? kXdpCount : 0));
    if (xdp_) return std::span<const char* const>(kExtraNames).subspan(kCaptureCount);
    return {};
  }
  void extra_values(std::uint64_t* out) const noexcept override {
    if (capture_) {
      const CaptureWriter::Stats st = capture_->stats();
      out[0] = st.records;
      out[1] = st.bytes;
      out[2] = st.dropped;
      out[3] = st.files;
      out[4] = st.no_kernel_time;
      out += kCaptureCount;
    }
    if (xdp_) {
      out[0] = xdp_stats_.malformed;
      out[1] = xdp_stats_.partial_checksums;
      out[2] = xdp_stats_.unmatched;
      out[3] = xdp_stats_.kernel_dropped;
    }
  }
  // Joins `group` (feed.line_a/b) for datagrams of `sender` (feed.source_a/b; "" = any);
  // `how` says which join the kernel took, for the description.
  // `*local` gets the group's address and port (where the line's datagrams are sent).
  absl::StatusOr<int> join_line(const std::string& key, const std::string& group, std::optional<in_addr_t> sender,
                                std::string* how, pcap::Endpoint* local);
  // The filter step after each read of a line: datagrams from another sender than the
  // expected one are counted (wrong_source) and never reach the arbiter. Returns how many.
  int drop_wrong_senders(Line line, RxBatch& b) noexcept {
    const auto li = static_cast<std::size_t>(line);
    if (li >= sender_.size() || !sender_[li].has_value() || b.n == 0) return 0;
    const std::size_t dropped = b.keep_from(*sender_[li]);
    for (std::size_t i = 0; i < dropped; ++i) arb_.count_wrong_source();
    return static_cast<int>(dropped);
  }
  // Every datagram just read on `li`, in the order read, to the capture.
  void capture_burst(std::size_t li, const RxBatch& b) noexcept {
    for (std::size_t i = 0; i < b.n; ++i) capture_->record(b.rx_time(i), b.sender(i), local_[li], b.datagram(i));
  }
  void start_capture();
  // datapath = "xdp": lines A and B through one AF_XDP socket (pollux::DatagramReceiver).
  absl::Status open_xdp();
  int poll_xdp(std::int64_t now);
  int poll_line(Line line, std::int64_t now);
  int poll(std::int64_t now);
  void send_requests();

  std::array<int, 3> fds_{-1, -1, -1};  // line A, line B, re-requests
  std::array<RxBatch, 3> rx_;
  std::array<std::optional<in_addr_t>, 2> sender_;  // expected sender of line A and B, if set
  std::array<pcap::Endpoint, 3> local_{};  // where each socket's datagrams are sent (the capture's destination)
  std::unique_ptr<CaptureWriter> capture_;
  std::unique_ptr<DatagramReceiver> xdp_;
  DatagramReceiverStats xdp_stats_;
  std::int64_t counters_at_ = 0;
};

absl::StatusOr<int> LiveSource::join_line(const std::string& key, const std::string& group,
                                          std::optional<in_addr_t> sender, std::string* how, pcap::Endpoint* local) {
  absl::StatusOr<sockaddr_in> ga = parse_endpoint(key, group);
  if (!ga.ok()) return ga.status();
  *local = {ga->sin_addr.s_addr, ga->sin_port};
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat(key, ": socket: ", std::strerror(errno)));
  auto fail = [&](const std::string& what) {
    const absl::Status s =
        absl::UnavailableError(absl::StrFormat("%s: %s %s: %s", key, what, group, std::strerror(errno)));
    ::close(fd);
    return s;
  };
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  // SO_RCVBUFFORCE past net.core.rmem_max when privileged; otherwise what the limit allows.
  const int rcv = static_cast<int>(cfg_.rcvbuf);
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof rcv) != 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
  }
  // Memberships of this socket only: by default Linux also hands a multicast socket the
  // datagrams for its port of any group joined by another socket of the namespace (on
  // another interface, say), which this socket never asked for. As the UDP transport does.
  const int zero = 0;
  (void)::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof zero);
  // Bound to the group, so the socket gets that group's datagrams only.
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&*ga), sizeof *ga) != 0) return fail("bind");
  ip_mreqn m{};
  m.imr_multiaddr = ga->sin_addr;
  if (!cfg_.interface.empty()) {
    m.imr_ifindex = static_cast<int>(if_nametoindex(cfg_.interface.c_str()));
    if (m.imr_ifindex == 0) {
      ::close(fd);
      return absl::NotFoundError(absl::StrFormat("feed.interface: no interface \"%s\"", cfg_.interface));
    }
  }
  const std::string on = cfg_.interface.empty() ? "" : absl::StrCat(" on ", cfg_.interface);
  how->clear();
  if (sender.has_value()) {
    // A source-specific membership: the kernel drops other senders' datagrams before the
    // socket (and tells the network, IGMPv3, to send only this sender's). The group_source_req
    // form of IP_ADD_SOURCE_MEMBERSHIP: it takes the interface index, as the join below does.
    group_source_req r{};
    r.gsr_interface = static_cast<std::uint32_t>(m.imr_ifindex);
    sockaddr_in g = *ga;
    g.sin_port = 0;
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = *sender;
    std::memcpy(&r.gsr_group, &g, sizeof g);
    std::memcpy(&r.gsr_source, &src, sizeof src);
    if (::setsockopt(fd, IPPROTO_IP, MCAST_JOIN_SOURCE_GROUP, &r, sizeof r) == 0) {
      *how = "source-specific join";
      return fd;
    }
    if (const int err = errno; err != ENOPROTOOPT && err != EINVAL) {
      char text[INET_ADDRSTRLEN] = "?";
      inet_ntop(AF_INET, &src.sin_addr, text, sizeof text);
      errno = err;  // what fail() reports
      return fail(absl::StrCat("source-specific join (sender ", text, ")", on));
    }
    // This kernel cannot filter by sender: any-source join; the handler checks every
    // datagram's sender itself (drop_wrong_senders), so the guarantee is the same.
    *how = absl::StrFormat(
        "any-source join: the kernel refused a source-specific one (%s); other senders "
        "dropped by the handler",
        std::strerror(errno));
    ip_mreqn leave = m;
    (void)::setsockopt(fd, IPPROTO_IP, IP_DROP_MEMBERSHIP, &leave, sizeof leave);  // whatever half a join left
  }
  if (::setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) != 0) return fail(absl::StrCat("join", on));
  return fd;
}

absl::Status LiveSource::open() {
  name_ = absl::StrFormat("moldudp64 A %s B %s", cfg_.line_a, cfg_.line_b);
  for (std::size_t i = 0; i < 2; ++i) {
    const std::string& sender = i == 0 ? cfg_.source_a : cfg_.source_b;
    if (sender.empty()) continue;
    if (std::string e = check_sender(sender); !e.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: %s", i == 0 ? "feed.source_a" : "feed.source_b", e));
    }
    in_addr addr{};
    inet_pton(AF_INET, sender.c_str(), &addr);
    sender_[i] = addr.s_addr;
  }
  std::string how_a, how_b;
  if (cfg_.datapath == Datapath::kXdp) {
    if (absl::Status s = open_xdp(); !s.ok()) return s;
  } else {
    absl::StatusOr<int> a = join_line("feed.line_a", cfg_.line_a, sender_[0], &how_a, &local_[0]);
    if (!a.ok()) return a.status();
    fds_[0] = *a;
    absl::StatusOr<int> b = join_line("feed.line_b", cfg_.line_b, sender_[1], &how_b, &local_[1]);
    if (!b.ok()) return b.status();
    fds_[1] = *b;
  }
  auto from = [](const std::string& sender, const std::string& how) {
    return sender.empty() ? std::string() : absl::StrFormat(" from %s only (%s)", sender, how);
  };
  description = absl::StrFormat(
      "live MoldUDP64: line A %s%s, line B %s%s%s, re-requests %s, session %s", cfg_.line_a, from(cfg_.source_a, how_a),
      cfg_.line_b, from(cfg_.source_b, how_b), cfg_.interface.empty() ? "" : absl::StrCat(" on ", cfg_.interface),
      cfg_.rerequest.empty() ? "off" : cfg_.rerequest, cfg_.session.empty() ? "first seen" : cfg_.session);
  if (xdp_) absl::StrAppend(&description, ", lines through ", xdp_->describe());
  if (!cfg_.rerequest.empty()) {
    absl::StatusOr<sockaddr_in> server = parse_endpoint("feed.rerequest", cfg_.rerequest);
    if (!server.ok()) return server.status();
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(absl::StrCat("feed.rerequest: socket: ", std::strerror(errno)));
    fds_[2] = fd;
    const int rcv = static_cast<int>(cfg_.rcvbuf);
    if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof rcv) != 0) {
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
    }
    // Connected: replies from anyone but the server are not delivered to this socket.
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&*server), sizeof *server) != 0) {
      return absl::UnavailableError(
          absl::StrFormat("feed.rerequest: connect %s: %s", cfg_.rerequest, std::strerror(errno)));
    }
    sockaddr_in self{};
    socklen_t len = sizeof self;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0)
      local_[2] = {self.sin_addr.s_addr, self.sin_port};
  }
  if (!cfg_.capture.empty()) start_capture();
  return absl::OkStatus();
}

absl::Status LiveSource::open_xdp() {
  DatagramReceiverOptions o;
  o.interface = cfg_.interface;
  o.xdp_mode = cfg_.xdp_mode;
  absl::StatusOr<std::unique_ptr<DatagramReceiver>> rx = DatagramReceiver::open(o);
  if (!rx.ok()) return absl::Status(rx.status().code(), absl::StrCat("feed.datapath: ", rx.status().message()));
  xdp_ = std::move(*rx);
  for (std::size_t i = 0; i < 2; ++i) {
    const char* key = i == 0 ? "feed.line_a" : "feed.line_b";
    absl::StatusOr<sockaddr_in> ga = parse_endpoint(key, i == 0 ? cfg_.line_a : cfg_.line_b);
    if (!ga.ok()) return ga.status();
    local_[i] = {ga->sin_addr.s_addr, ga->sin_port};
    char host[INET_ADDRSTRLEN] = "";
    inet_ntop(AF_INET, &ga->sin_addr, host, sizeof host);
    const std::string& sender = i == 0 ? cfg_.source_a : cfg_.source_b;
    // The receiver's line ids are the order of add(): 0 is line A, 1 line B.
    absl::StatusOr<std::uint32_t> id = xdp_->add(absl::StrFormat("%s:%u", host, ntohs(ga->sin_port)), sender);
    if (!id.ok()) return absl::Status(id.status().code(), absl::StrCat(key, ": ", id.status().message()));
  }
  return absl::OkStatus();
}

int LiveSource::poll_xdp(std::int64_t now) {
  const auto n = xdp_->poll(
      [&](const Datagram& d) {
        const std::size_t li = d.line;
        const Line line = li == 0 ? Line::kA : Line::kB;
        // As from a socket: the capture keeps every datagram, other senders' included.
        if (capture_) capture_->record(d.kernel_time ? d.rx_ns : -1, {d.src_addr, d.src_port}, local_[li], d.bytes);
        if (sender_[li].has_value() && d.src_addr != *sender_[li]) {
          arb_.count_wrong_source();
          return;
        }
        (void)arb_.on_packet(line, d.bytes, now, false);
      },
      static_cast<std::uint32_t>(kBurst));
  if (n < kBurst) {  // the ring was read empty: both lines are drained
    arb_.line_drained(Line::kA, now);
    arb_.line_drained(Line::kB, now);
  }
  return static_cast<int>(n);
}

void LiveSource::start_capture() {
  // The kernel stamps each datagram when it arrives (software receive time, CLOCK_REALTIME):
  // the capture's times are the wire's, not the moment the handler read the socket.
  const int on = 1;
  for (int fd : fds_) {
    if (fd >= 0) (void)::setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
  }
  capture_ =
      std::make_unique<CaptureWriter>(CaptureWriter::Options{cfg_.capture, cfg_.capture_rotate, cfg_.capture_buffer});
  absl::StrAppend(&description, ", capture to ", cfg_.capture,
                  cfg_.capture_rotate != 0 ? absl::StrCat(" (a new file every ", cfg_.capture_rotate, " bytes)") : "",
                  xdp_ ? " (lines A and B stamped with the handler's clock: AF_XDP frames carry no kernel time)" : "");
}

std::vector<std::pair<std::string, std::string>> LiveSource::live_notes() const {
  std::vector<std::pair<std::string, std::string>> out;
  if (xdp_) {
    out.emplace_back("datapath",
                     absl::StrFormat("%s: %d frame(s), %d malformed (dropped), %d unmatched (dropped), %d dropped by "
                                     "the kernel, %d with a partial checksum",
                                     xdp_->describe(), xdp_stats_.frames, xdp_stats_.malformed, xdp_stats_.unmatched,
                                     xdp_stats_.kernel_dropped, xdp_stats_.partial_checksums));
  }
  if (!capture_) return out;
  const CaptureWriter::Stats st = capture_->stats();
  out.emplace_back(
      "capture",
      absl::StrFormat(
          "%s: %d record(s), %d bytes in %d file(s), %d dropped (ring full)%s", capture_->path(), st.records, st.bytes,
          st.files, st.dropped,
          st.no_kernel_time != 0 ? absl::StrFormat(", %d without a kernel receive time", st.no_kernel_time) : ""));
  if (!capture_->error().empty()) out.emplace_back("capture_error", capture_->error());
  return out;
}

int LiveSource::poll_line(Line line, std::int64_t now) {
  const int li = static_cast<int>(line);
  RxBatch& b = rx_[static_cast<std::size_t>(li)];
  int work = 0;
  for (;;) {
    // Every datagram goes to the arbiter, which copies what it holds (a packet to confirm, a
    // next session's): a line is always read, whatever it carries.
    while (b.pos < b.n) {
      (void)arb_.on_packet(line, b.datagram(b.pos), now, b.truncated(b.pos));
      ++b.pos;
      ++work;
    }
    if (work >= static_cast<int>(kBurst)) return work;  // one burst per socket per round
    if (capture_) b.reset_control();
    const int n = ::recvmmsg(fds_[static_cast<std::size_t>(li)], b.msgs.data(), kBurst, MSG_DONTWAIT, nullptr);
    b.pos = 0;
    b.n = n > 0 ? static_cast<std::size_t>(n) : 0;
    // The capture keeps what the socket gave, other senders' datagrams included (a replay
    // of it filters them as this does).
    if (capture_) capture_burst(static_cast<std::size_t>(li), b);
    work += drop_wrong_senders(line, b);
    if (n < static_cast<int>(kBurst)) arb_.line_drained(line, now);  // read until empty
    if (n <= 0) return work;
  }
}

void LiveSource::send_requests() {
  for (const RerequestOut& r : arb_.requests()) {
    std::uint8_t buf[mold::kRequestSize];
    const std::span<const std::uint8_t> p = mold::encode_request(buf, r.session, r.sequence, r.count);
    // A failed send is an unanswered request: it times out and is sent again.
    if (!p.empty() && ::send(fds_[2], p.data(), p.size(), MSG_DONTWAIT) < 0) arb_.count_send_error();
  }
  arb_.clear_requests();
}

int LiveSource::poll(std::int64_t now) {
  int work = xdp_ ? poll_xdp(now) : poll_line(Line::kA, now) + poll_line(Line::kB, now);
  if (fds_[2] >= 0) work += poll_line(Line::kReplay, now);
  arb_.tick(now);
  if (!arb_.requests().empty()) {
    if (fds_[2] >= 0) send_requests();
    arb_.clear_requests();
  }
  if (work != 0 || now - counters_at_ >= kCountersEveryNs) {
    // The receiver's counters read the kernel's (a system call): once per counters interval.
    if (xdp_ && now - counters_at_ >= kCountersEveryNs) xdp_stats_ = xdp_->stats();
    publish_counters();
    counters_at_ = now;
  }
  return work;
}

absl::Status LiveSource::advance(std::size_t consumed) {
  begin_advance(consumed);
  AppIdle spin(idle_kind_);
  const bool sleep = spin.may_sleep();
  for (;;) {
    if (take_piece()) return absl::OkStatus();
    if (arb_.done() || (stop_ != nullptr && stop_->load(std::memory_order_relaxed))) {
      // The capture's last records are on disk before the summary counts them.
      if (capture_) capture_->stop();
      if (xdp_) xdp_stats_ = xdp_->stats();
      finish();
      return absl::OkStatus();
    }
    const int work = poll(now_ns());
    if (work != 0 || arb_.output_pending()) {
      spin.reset();
      continue;
    }
    if (idle_hook_ != nullptr && idle_hook_(idle_ctx_) != 0) continue;
    if (sleep) {
      // Timers (re-request timeouts, the wait, staleness) are checked at least every 1 ms.
      std::array<pollfd, 4> p{};
      nfds_t np = 0;
      if (xdp_) p[np++] = pollfd{xdp_->fd(), POLLIN, 0};
      for (int fd : fds_) {
        if (fd >= 0) p[np++] = pollfd{fd, POLLIN, 0};
      }
      ::poll(p.data(), np, 1);
    } else {
      spin.idle(0);
    }
  }
}

}  // namespace

absl::StatusOr<sockaddr_in> parse_endpoint(const std::string& key, const std::string& s) {
  const std::size_t colon = s.rfind(':');
  std::uint32_t port = 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (colon == std::string::npos || !absl::SimpleAtoi(s.substr(colon + 1), &port) || port == 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: expected HOST:PORT, got \"%s\"", key, s));
  }
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const std::string host = s.substr(0, colon);
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) == 1) return a;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0 || res == nullptr) {
    return absl::NotFoundError(absl::StrFormat("%s: cannot resolve \"%s\": %s", key, host, gai_strerror(rc)));
  }
  a.sin_addr = reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return a;
}

ArbiterOptions live_arbiter_options(const FeedConfig& c, std::size_t output_bytes) {
  ArbiterOptions o;
  o.session = c.session;
  o.window = c.window;
  o.rerequest = !c.rerequest.empty();
  o.rerequest_wait_ns = std::int64_t{c.rerequest_wait_us} * 1000;
  o.rerequest_timeout_ns = std::int64_t{c.rerequest_timeout_ms} * 1'000'000;
  o.rerequest_timeout_max_ns = std::int64_t{c.rerequest_timeout_max_ms} * 1'000'000;
  o.rerequest_retries = c.rerequest_retries;
  o.max_outstanding = c.rerequest_max_outstanding;
  o.heartbeat_ns = std::int64_t{c.heartbeat_ms} * 1'000'000;
  o.stale_heartbeats = c.stale_heartbeats;
  o.end_linger_ns = std::int64_t{c.end_linger_ms} * 1'000'000;
  o.output_bytes = output_bytes;
  return o;
}

ArbiterSource::ArbiterSource(const FeedConfig& cfg, std::size_t output_bytes)
    : cfg_(cfg), arb_(live_arbiter_options(cfg, output_bytes)) {}

void ArbiterSource::attach_counters(Context& ctx) {
  for (std::size_t i = 0; i < kLiveCounterCount; ++i) cells_[i] = ctx.counter("feed live", kLiveCounters[i].name);
  const std::span<const char* const> extra = extra_names();
  for (std::size_t i = 0; i < extra.size() && i < kMaxExtra; ++i) extra_cells_[i] = ctx.counter("feed live", extra[i]);
  attached_ = true;
  publish_counters();
}

std::vector<std::pair<std::string, std::uint64_t>> ArbiterSource::live_counters() const {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (std::size_t i = 0; i < kLiveCounterCount; ++i) out.emplace_back(kLiveCounters[i].name, arb_.counters()[i]);
  const std::span<const char* const> extra = extra_names();
  std::array<std::uint64_t, kMaxExtra> v{};
  extra_values(v.data());
  for (std::size_t i = 0; i < extra.size() && i < kMaxExtra; ++i) out.emplace_back(extra[i], v[i]);
  return out;
}

void ArbiterSource::publish_counters() noexcept {
  if (!attached_) return;
  for (std::size_t i = 0; i < kLiveCounterCount; ++i) cells_[i].set(arb_.counters()[i]);
  const std::size_t n = std::min(extra_names().size(), kMaxExtra);
  if (n == 0) return;
  std::array<std::uint64_t, kMaxExtra> v{};
  extra_values(v.data());
  for (std::size_t i = 0; i < n; ++i) extra_cells_[i].set(v[i]);
}

bool ArbiterSource::take_piece(std::int64_t rx_ns) noexcept {
  Arbiter::Piece piece;
  if (arb_.next(&piece)) {
    window_ = piece.bytes;
    notice_ = piece.notice;
    rx_ns_ = rx_ns != 0 ? rx_ns : piece.rx_ns;
    return true;
  }
  arb_.reset_output();
  return false;
}

absl::StatusOr<std::unique_ptr<Source>> open_live_source(const FeedConfig& cfg) { return open_timed<LiveSource>(cfg); }

}  // namespace pollux::feed
