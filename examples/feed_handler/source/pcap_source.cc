#include "feed_handler/source/pcap_source.h"

#include <arpa/inet.h>
#include <pcap/pcap.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "feed_handler/role_progress.h"
#include "feed_handler/source/live_source.h"
#include "feed_handler/source/pcap_format.h"
#include "pollux/clock.h"

namespace pollux::feed {

namespace {

constexpr std::int64_t kRoundNs = 1'000'000;  // the live handler polls at least this often
// A silence longer than this many rounds (100 s of capture time) is crossed in one step.
constexpr std::uint64_t kMaxSilentRounds = 100'000;
// Datagrams handed over per round at most.
constexpr std::size_t kPacketsPerRound = 96;
// At max pace the output of several rounds goes to the publisher at once (as a file replay's
// windows: full batches, few Pollux messages); paced, each round's goes out as it happens.
constexpr std::size_t kHandOutBytes = 1u << 20;
// Room for what is held back plus everything one more round can deliver, so a round never
// finds the output full (as live: a polling round's worth of the largest datagrams).
constexpr std::size_t kOutputBytes = kHandOutBytes + kPacketsPerRound * Arbiter::kMaxDatagram;
constexpr std::int64_t kCountersEveryNs = 1'000'000;

bool regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// One capture file, opened with nanosecond timestamps whatever precision it was written in.
class CaptureFile {
 public:
  static absl::StatusOr<std::unique_ptr<CaptureFile>> open(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrFormat("feed.pcap: cannot open %s: %s", path, std::strerror(errno)));
    }
    // A FIFO would block, a directory reads as an error halfway: only regular files.
    if (!S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("feed.pcap: %s is not a regular file (a capture is read from a file)", path));
    }
    char err[PCAP_ERRBUF_SIZE] = "";
    pcap_t* p = pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, err);
    if (p == nullptr) return absl::InvalidArgumentError(absl::StrFormat("feed.pcap: %s: %s", path, err));
    auto f = std::unique_ptr<CaptureFile>(new CaptureFile(p, path));
    const int dlt = pcap_datalink(p);
    switch (dlt) {
      case DLT_EN10MB:
        f->link_ = pcap::LinkType::kEthernet;
        break;
      case DLT_LINUX_SLL:
        f->link_ = pcap::LinkType::kSll;
        break;
      case DLT_LINUX_SLL2:
        f->link_ = pcap::LinkType::kSll2;
        break;
      case DLT_RAW:
      case DLT_IPV4:
        f->link_ = pcap::LinkType::kRawIpv4;
        break;
      default: {
        const char* name = pcap_datalink_val_to_name(dlt);
        return absl::InvalidArgumentError(absl::StrFormat(
            "feed.pcap: %s: link type %d (%s) is not one pollux-feed reads: Ethernet, Linux cooked (SLL, SLL2) or "
            "raw IPv4",
            path, dlt, name != nullptr ? name : "unknown"));
      }
    }
    return f;
  }
  ~CaptureFile() { pcap_close(p_); }
  CaptureFile(const CaptureFile&) = delete;
  CaptureFile& operator=(const CaptureFile&) = delete;

  // The next record: 1 (hdr, data set; valid until the next call), 0 at the end, -1 on an
  // error (*error names the file and the record).
  int next(const pcap_pkthdr** hdr, const std::uint8_t** data, std::string* error) {
    const int rc = pcap_next_ex(p_, const_cast<pcap_pkthdr**>(hdr), data);
    if (rc == 1) {
      ++record_;
      return 1;
    }
    if (rc == PCAP_ERROR_BREAK) return 0;
    *error = absl::StrFormat("feed.pcap: %s: record %d: %s", path_, record_ + 1, pcap_geterr(p_));
    return -1;
  }
  pcap::LinkType link() const noexcept { return link_; }
  std::uint64_t record() const noexcept { return record_; }  // records read so far (the last one's number)
  const std::string& path() const noexcept { return path_; }

 private:
  CaptureFile(pcap_t* p, std::string path) : p_(p), path_(std::move(path)) {}
  pcap_t* p_;
  std::string path_;
  pcap::LinkType link_ = pcap::LinkType::kEthernet;
  std::uint64_t record_ = 0;
};

// Which datagrams of a capture are the feed's, from the live keys: what the live handler's
// sockets would have been given (each line's socket is bound to its group and port; the
// re-request socket is connected to the server).
struct Classifier {
  pcap::Endpoint a, b;
  std::optional<std::uint32_t> sender[2];  // feed.source_a/source_b
  bool reply_port_set = false;
  std::uint16_t reply_port = 0;             // network order
  std::optional<std::uint32_t> reply_addr;  // feed.rerequest's address when it is an IPv4 literal

  enum Kind { kA, kB, kReply, kOther, kWrongSource, kOtherGroup };
  Kind kind_of(const pcap::Datagram& d) const noexcept {
    int line = -1;
    if (d.dst.port == a.port && d.dst.addr == a.addr) {
      line = 0;
    } else if (d.dst.port == b.port && d.dst.addr == b.addr) {
      line = 1;
    } else if (d.dst.port == a.port || d.dst.port == b.port) {
      return kOtherGroup;  // another group on a line's port: another feed, not this one's
    }
    if (line >= 0) {
      if (sender[line].has_value() && d.src.addr != *sender[line]) return kWrongSource;
      return line == 0 ? kA : kB;
    }
    if (reply_port_set && d.src.port == reply_port && (!reply_addr.has_value() || d.src.addr == *reply_addr)) {
      return kReply;
    }
    return kOther;
  }
};

class PcapSource final : public ArbiterSource {
 public:
  explicit PcapSource(const FeedConfig& cfg) : ArbiterSource(cfg, kOutputBytes) {}

  absl::Status open();
  absl::Status advance(std::size_t consumed) override;
  bool listens() const noexcept override { return false; }
  std::vector<std::pair<std::string, std::string>> live_notes() const override { return notes_; }

 private:
  static constexpr std::array<const char*, 6> kNames = {"pcap_files", "pcap_records",   "pcap_skipped",
                                                        "pcap_cut",   "pcap_fragments", "pcap_malformed"};
  struct Counts {
    std::uint64_t files = 0, records = 0, skipped = 0, cut = 0, fragments = 0, malformed = 0;
    std::uint64_t a = 0, b = 0, replies = 0;  // for the description
    std::uint64_t other_group = 0;            // to a line's port, another group (in skipped)
  };
  std::span<const char* const> extra_names() const noexcept override { return kNames; }
  void extra_values(std::uint64_t* out) const noexcept override {
    out[0] = counts_.files;
    out[1] = counts_.records;
    out[2] = counts_.skipped;
    out[3] = counts_.cut;
    out[4] = counts_.fragments;
    out[5] = counts_.malformed;
  }

  // Reads the next record of the set into *line/*d/*ts if it is a datagram of the feed,
  // counting the others; true when one was found, false at the end of the last file or on an
  // error (status_). *d points into libpcap's buffer until the next call.
  bool next_datagram(Line* line, pcap::Datagram* d, std::int64_t* ts);
  // Takes one record apart and counts it in `c`; the feed's datagrams come back in *line/*d.
  static bool classify(const Classifier& k, pcap::LinkType link, const pcap_pkthdr& h, const std::uint8_t* data,
                       Counts* c, Line* line, pcap::Datagram* d, Arbiter* arb);
  // A polling round at capture time `v`: every line read empty, the arbiter's timers.
  void poll_round(std::int64_t v) noexcept;
  // Waits (running the publisher's duties) until the wall clock reaches `due`; false if stopped.
  bool wait_until(std::int64_t due);
  bool stopped() const noexcept { return stop_ != nullptr && stop_->load(std::memory_order_relaxed); }

  Classifier k_;
  std::vector<std::string> files_;
  std::unique_ptr<CaptureFile> file_;
  std::size_t file_index_ = 0;
  Counts counts_;
  absl::Status status_;
  std::vector<std::pair<std::string, std::string>> notes_;

  // The next datagram, read and not handed over yet.
  bool have_next_ = false;
  bool eof_ = false;
  bool draining_ = false;  // output is being handed out
  Line next_line_ = Line::kA;
  pcap::Datagram next_{};
  std::int64_t next_ts_ = 0;

  bool started_ = false;
  std::int64_t vnow_ = 0;     // the capture clock (ns since the epoch)
  std::int64_t eof_at_ = 0;   // capture time of the last datagram
  std::int64_t tail_ns_ = 0;  // how long the clock runs on after it for the session to end
  std::uint64_t silent_rounds_ = 0;
  std::int64_t round_wall_ = 0;
  std::int64_t counters_at_ = 0;
  // Pace (original, speed): the wall-clock offset of the last datagram's due time.
  bool paced_ = false;
  double speed_ = 1.0;
  std::int64_t max_gap_ns_ = 0;
  std::int64_t wall0_ = 0, woff_ = 0, vprev_ = 0;
};

bool PcapSource::classify(const Classifier& k, pcap::LinkType link, const pcap_pkthdr& h, const std::uint8_t* data,
                          Counts* c, Line* line, pcap::Datagram* d, Arbiter* arb) {
  ++c->records;
  if (h.caplen < h.len) {  // cut by the snaplen: what is missing cannot be told
    ++c->cut;
    return false;
  }
  switch (pcap::decode_frame(link, {data, h.caplen}, d)) {
    case pcap::FrameKind::kUdp:
      break;
    case pcap::FrameKind::kOther:
      ++c->skipped;
      return false;
    case pcap::FrameKind::kFragment:
      ++c->fragments;
      return false;
    case pcap::FrameKind::kMalformed:
      ++c->malformed;
      return false;
  }
  switch (k.kind_of(*d)) {
    case Classifier::kA:
      *line = Line::kA;
      ++c->a;
      return true;
    case Classifier::kB:
      *line = Line::kB;
      ++c->b;
      return true;
    case Classifier::kReply:
      *line = Line::kReplay;
      ++c->replies;
      return true;
    case Classifier::kWrongSource:
      if (arb != nullptr) arb->count_wrong_source();
      return false;
    case Classifier::kOtherGroup:
      ++c->other_group;
      ++c->skipped;
      return false;
    case Classifier::kOther:
      ++c->skipped;
      return false;
  }
  return false;
}

absl::Status PcapSource::open() {
  name_ = cfg_.pcap;
  absl::StatusOr<sockaddr_in> a = parse_endpoint("feed.line_a", cfg_.line_a);
  if (!a.ok()) return a.status();
  absl::StatusOr<sockaddr_in> b = parse_endpoint("feed.line_b", cfg_.line_b);
  if (!b.ok()) return b.status();
  k_.a = {a->sin_addr.s_addr, a->sin_port};
  k_.b = {b->sin_addr.s_addr, b->sin_port};
  for (int i = 0; i < 2; ++i) {
    const std::string& s = i == 0 ? cfg_.source_a : cfg_.source_b;
    in_addr addr{};
    if (!s.empty() && inet_pton(AF_INET, s.c_str(), &addr) == 1) k_.sender[i] = addr.s_addr;
  }
  if (!cfg_.rerequest.empty()) {
    std::uint32_t port = 0;
    const std::size_t colon = cfg_.rerequest.rfind(':');
    if (colon == std::string::npos || !absl::SimpleAtoi(cfg_.rerequest.substr(colon + 1), &port) || port == 0 ||
        port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrFormat("feed.rerequest: expected HOST:PORT, got \"%s\"", cfg_.rerequest));
    }
    k_.reply_port_set = true;
    k_.reply_port = htons(static_cast<std::uint16_t>(port));
    in_addr server{};
    if (inet_pton(AF_INET, cfg_.rerequest.substr(0, colon).c_str(), &server) == 1) k_.reply_addr = server.s_addr;
  }

  // The set: PATH, then PATH.1, PATH.2, ... as long as they exist (feed.capture_rotate's names).
  files_.push_back(pcap::rotated_name(cfg_.pcap, 0));
  for (std::uint64_t i = 1; regular_file(pcap::rotated_name(cfg_.pcap, i)); ++i)
    files_.push_back(pcap::rotated_name(cfg_.pcap, i));

  // The whole set once: every error before anything is published, and the totals.
  Counts all;
  std::string first_cut;
  for (const std::string& path : files_) {
    absl::StatusOr<std::unique_ptr<CaptureFile>> f = CaptureFile::open(path);
    if (!f.ok()) return f.status();
    ++all.files;
    for (;;) {
      const pcap_pkthdr* h = nullptr;
      const std::uint8_t* data = nullptr;
      std::string error;
      const int rc = (*f)->next(&h, &data, &error);
      if (rc < 0) {
        // Cut inside its last record (a writer killed mid-write): with pcap_truncated = stop
        // the replay ends before it, as it ends at the end of the set.
        const bool cut_tail = &path == &files_.back() && error.find("truncated") != std::string::npos;
        if (!(cut_tail && cfg_.pcap_truncated_stop)) {
          return absl::DataLossError(absl::StrCat(
              error,
              cut_tail
                  ? " (the end of the capture is cut: --set feed.pcap_truncated=stop replays the records before it)"
                  : ""));
        }
        notes_.emplace_back("pcap_warning",
                            absl::StrFormat("%s: the replay stops before it (feed.pcap_truncated = stop)", error));
        break;
      }
      if (rc == 0) break;
      Line line;
      pcap::Datagram d;
      const std::uint64_t cut = all.cut;
      (void)classify(k_, (*f)->link(), *h, data, &all, &line, &d, nullptr);
      if (all.cut != cut && first_cut.empty()) {
        first_cut = absl::StrFormat("%s record %d (%d of %d bytes)", path, (*f)->record(), h->caplen, h->len);
      }
    }
  }
  // Nothing of the lines: the ports are not the capture's (or it holds other traffic only).
  // An error, not an empty replay that looks like success.
  if (all.a + all.b == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "feed.pcap: %s: none of its %d records is a datagram to line A (feed.line_a %s) or line B (feed.line_b %s)%s: "
        "are the lines those of the capture? (tshark -r %s -T fields -e ip.dst -e udp.dstport | sort | uniq -c "
        "lists where its datagrams go)",
        cfg_.pcap, all.records, cfg_.line_a, cfg_.line_b,
        all.other_group != 0 ? absl::StrFormat("; %d go to the lines' ports but other groups", all.other_group) : "",
        cfg_.pcap));
  }
  if (all.cut != 0) {
    notes_.emplace_back(
        "pcap_warning",
        absl::StrFormat("%d packet(s) cut by the capture's snaplen were counted, not parsed; the first: %s", all.cut,
                        first_cut));
  }
  description = absl::StrFormat(
      "capture %s (%d file%s, %d records: line A %d, line B %d, replies %d, other %d), lines A %s B %s, replies from "
      "port %s",
      cfg_.pcap, all.files, all.files == 1 ? "" : "s", all.records, all.a, all.b, all.replies,
      all.records - all.a - all.b - all.replies, cfg_.line_a, cfg_.line_b,
      k_.reply_port_set ? absl::StrCat(ntohs(k_.reply_port)) : std::string("(none: feed.rerequest unset)"));

  absl::StatusOr<std::unique_ptr<CaptureFile>> f = CaptureFile::open(files_[0]);
  if (!f.ok()) return f.status();
  file_ = std::move(*f);
  counts_.files = 1;

  paced_ = cfg_.replay == ReplayMode::kOriginal || cfg_.replay == ReplayMode::kSpeed;
  speed_ = cfg_.replay == ReplayMode::kSpeed ? cfg_.speed : 1.0;
  max_gap_ns_ = std::int64_t{cfg_.max_gap_ms} * 1'000'000;
  // After the last datagram the clock runs on for what the live handler would still have
  // waited: the staleness of a silent line, a range's retries, the end's linger.
  tail_ns_ = std::int64_t{cfg_.stale_heartbeats} * cfg_.heartbeat_ms * 1'000'000 +
             std::int64_t{cfg_.rerequest_timeout_max_ms} * (cfg_.rerequest_retries + 2) * 1'000'000 +
             std::int64_t{cfg_.end_linger_ms} * 1'000'000 + 1'000'000'000;
  return absl::OkStatus();
}

bool PcapSource::next_datagram(Line* line, pcap::Datagram* d, std::int64_t* ts) {
  for (;;) {
    const pcap_pkthdr* h = nullptr;
    const std::uint8_t* data = nullptr;
    std::string error;
    const int rc = file_->next(&h, &data, &error);
    if (rc < 0) {
      // The cut end the first pass accepted (feed.pcap_truncated = stop): the end of the set.
      if (cfg_.pcap_truncated_stop && file_index_ + 1 == files_.size() &&
          error.find("truncated") != std::string::npos) {
        return false;
      }
      status_ = absl::DataLossError(error);
      return false;
    }
    if (rc == 0) {
      if (file_index_ + 1 >= files_.size()) return false;
      absl::StatusOr<std::unique_ptr<CaptureFile>> f = CaptureFile::open(files_[++file_index_]);
      if (!f.ok()) {
        status_ = f.status();
        return false;
      }
      file_ = std::move(*f);
      ++counts_.files;
      continue;
    }
    if (classify(k_, file_->link(), *h, data, &counts_, line, d, &arb_)) {
      // Nanosecond precision asked at open: tv_usec holds nanoseconds.
      *ts = std::int64_t{h->ts.tv_sec} * 1'000'000'000 + h->ts.tv_usec;
      return true;
    }
  }
}

void PcapSource::poll_round(std::int64_t v) noexcept {
  vnow_ = v;
  arb_.line_drained(Line::kA, v);
  arb_.line_drained(Line::kB, v);
  arb_.line_drained(Line::kReplay, v);
  arb_.tick(v);
  arb_.clear_requests();  // the capture holds the replies the live handler's requests brought
  const std::int64_t now = now_ns();
  if (now - counters_at_ >= kCountersEveryNs) {
    publish_counters();
    counters_at_ = now;
  }
}

bool PcapSource::wait_until(std::int64_t due) {
  AppIdle spin(idle_kind_);
  for (;;) {
    const std::int64_t now = now_ns();
    if (now >= due) return true;
    if (stopped()) return false;
    if (idle_hook_ != nullptr && idle_hook_(idle_ctx_) != 0) continue;
    if (due - now > 2'000'000) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<std::int64_t>(due - now - 1'000'000, 10'000'000)));
    } else {
      spin.idle(0);
    }
  }
}

absl::Status PcapSource::advance(std::size_t consumed) {
  begin_advance(consumed);
  for (;;) {
    // Once handing out has begun it goes on until the output is empty and starts over (the
    // arbiter reuses its output buffer only then).
    draining_ = draining_ || paced_ || eof_ || arb_.output_bytes_pending() >= kHandOutBytes || arb_.done() || stopped();
    if (draining_) {
      if (take_piece(round_wall_)) return absl::OkStatus();
      draining_ = false;
    }
    if (arb_.done() || stopped()) {
      finish();
      return absl::OkStatus();
    }
    if (!have_next_ && !eof_) {
      have_next_ = next_datagram(&next_line_, &next_, &next_ts_);
      if (!status_.ok()) return status_;
      if (!have_next_) {
        eof_ = true;
        eof_at_ = vnow_;
      }
      continue;
    }
    if (have_next_) {
      if (!started_) {
        started_ = true;
        vnow_ = vprev_ = next_ts_;
        wall0_ = now_ns();
      }
      const std::int64_t t = std::max(next_ts_, vnow_);
      // A quiet stretch of the capture: the rounds the live handler ran through it.
      if (t > vnow_ + kRoundNs && silent_rounds_ < kMaxSilentRounds) {
        ++silent_rounds_;
        poll_round(vnow_ + kRoundNs);
        continue;
      }
      silent_rounds_ = 0;
      if (paced_) {
        woff_ += std::min(static_cast<std::int64_t>(static_cast<double>(t - vprev_) / speed_), max_gap_ns_);
        vprev_ = t;
        if (!wait_until(wall0_ + woff_)) continue;  // stopped: the top of the loop ends
      }
      vnow_ = t;
      round_wall_ = now_ns();
      // This datagram and those of the same moment, then the round.
      std::size_t n = 0;
      do {
        (void)arb_.on_packet(next_line_, next_.payload, vnow_);
        have_next_ = next_datagram(&next_line_, &next_, &next_ts_);
      } while (have_next_ && next_ts_ <= vnow_ && ++n < kPacketsPerRound);
      if (!status_.ok()) return status_;
      if (!have_next_) {
        eof_ = true;
        eof_at_ = vnow_;
      }
      poll_round(vnow_);
      continue;
    }
    // The capture is over: the clock runs on until the session ends, or gives up.
    if (vnow_ - eof_at_ > tail_ns_) {
      notes_.emplace_back("pcap_warning",
                          absl::StrFormat("the capture ends before the session: next sequence %d, %d range(s) open",
                                          arb_.next_sequence(), arb_.open_gaps()));
      finish();
      return absl::OkStatus();
    }
    poll_round(vnow_ + kRoundNs);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Source>> open_pcap_source(const FeedConfig& cfg) { return open_timed<PcapSource>(cfg); }

}  // namespace pollux::feed
