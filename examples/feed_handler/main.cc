// pollux-feed: replays an ITCH 5.0 feed over Pollux to subscribers that rebuild the order
// books. docs/FEED.md is the manual; `pollux-feed --help` the summary.
//
// Roles: `--role all` (the default) publishes from this process and starts the subscribers
// - as processes running this binary with `--role sub` and three hidden arguments (an index,
// a shared mapping for live progress, a pipe for the final report), or as threads - then
// prints the summary. `--role pub` and `--role sub` run one side alone, e.g. on two hosts
// once a network transport is configured.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "feed_handler/book/feed_subscriber.h"
#include "feed_handler/config/feed_config.h"
#include "feed_handler/output/summary.h"
#include "feed_handler/publish/feed_publisher.h"
#include "feed_handler/source/source.h"
#include "itch/report.h"
#include "pollux/cli.h"
#include "pollux/pollux.h"

namespace pollux::feed {
namespace {

constexpr char kUsage[] = R"(usage: pollux-feed [options]

Replays an ITCH 5.0 feed through Pollux to subscribers that rebuild every order book, then
prints a summary (messages by type, rates, publish-to-book latency, top of book). Live mode
(--set feed.source=moldudp64) takes an exchange's MoldUDP64 lines A and B instead: it
arbitrates them, re-requests what both lost, reports what cannot be recovered as gaps, and
ends after the end of session:
  pollux-feed --set feed.source=moldudp64 --set feed.line_a=ADDR:PORT --set feed.line_b=ADDR:PORT
              --set feed.rerequest=HOST:PORT --set feed.interface=IF [--book-out ...]
It prints "pollux-feed: live: ready" on stderr once it listens and its subscribers are there.
--set feed.capture=PATH writes every datagram it reads to a pcap file (kernel receive times;
feed.capture_rotate=SIZE rolls over to PATH.1, PATH.2, ...). A capture - its own or tcpdump's -
replays through the same arbiter and books with the live keys and:
  pollux-feed --set feed.source=pcap --set feed.pcap=PATH --set feed.line_a=... --set feed.line_b=...
              --set feed.rerequest=HOST:PORT [--set feed.replay=original|speed|max]

  --config FILE        TOML configuration (default: the embedded examples/feed_handler/config/feed.toml)
  --itch FILE          replay this ITCH 5.0 BinaryFILE (same as --set feed.source=file
                       --set feed.file=FILE)
  --set KEY=VALUE      override one key, e.g. --set feed.messages=1000000
                       --set feed.replay=rate --set runtime.threading=shared (repeatable)
  --book-out FILE      final book of every symbol as JSON lines (written by subscriber 0)
  --counts-out FILE    message counts by type letter as JSON (written by subscriber 0)
  --summary-json FILE  the summary's figures as JSON
  --role all|pub|sub   all (default): publish and start feed.subscribers subscribers;
                       pub / sub: only that side (start the subscribers first)
  --print-config       print the effective configuration (every key, with help) and exit
  --quiet              no progress lines on stderr
  --version            print "pollux-feed <version>" and exit
  -h, --help           this text

Exit status: 0 done, 1 a run failed, 2 the configuration is invalid, 64 bad command line.

Configuration keys, output formats and the summary: docs/FEED.md.
)";

enum class Role { kAll, kPub, kSub };

struct Args {
  std::string config;  // empty: the embedded default
  std::vector<std::string> overrides;
  std::string book_out, counts_out, summary_json;
  Role role = Role::kAll;
  bool print_config = false;
  bool quiet = false;
  // Hidden: set by --role all for the subscriber processes it starts.
  std::uint32_t sub_index = 0;
  int progress_fd = -1;
  int report_fd = -1;
};

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};  // the signal that set g_stop, for the closing message
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "set from a signal handler");

extern "C" void on_signal(int sig) {
  g_signal.store(sig, std::memory_order_relaxed);
  g_stop.store(true, std::memory_order_relaxed);
}

// SIGINT, SIGTERM and SIGHUP end the replay early: the streams are closed, the subscribers
// finish, every shared-memory file is removed and the summary is printed. sigaction without
// SA_RESTART: a blocking call the signal interrupts fails with EINTR instead of resuming, so
// no wait can swallow the request. SA_RESETHAND on SIGINT: a second Ctrl-C kills outright.
// A subscriber process leaves Ctrl-C to its parent (it gets the terminal's SIGINT too) and
// ends with the streams.
void install_signal_handlers(bool subscriber_child) {
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_signal;
  sa.sa_flags = 0;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  if (subscriber_child) {
    sa.sa_handler = SIG_IGN;
  } else {
    sa.sa_flags = SA_RESETHAND;
  }
  sigaction(SIGINT, &sa, nullptr);
  struct sigaction ign {};
  sigemptyset(&ign.sa_mask);
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, nullptr);
}

void fail(const std::string& msg) { std::fprintf(stderr, "pollux-feed: %s\n", msg.c_str()); }

absl::StatusOr<Args> parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_value = false;
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      value = arg.substr(arg.find('=') + 1);
      arg = arg.substr(0, arg.find('='));
      has_value = true;
    }
    auto take = [&]() -> absl::StatusOr<std::string> {
      if (has_value) return value;
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
      return std::string(argv[++i]);
    };
    auto take_int = [&](int* out) -> absl::Status {
      absl::StatusOr<std::string> v = take();
      if (!v.ok()) return v.status();
      if (!absl::SimpleAtoi(*v, out)) return absl::InvalidArgumentError(absl::StrCat(arg, ": not a number: ", *v));
      return absl::OkStatus();
    };
    absl::Status s;
    if (const int rc = cli::handle_standard_flag(arg, "pollux-feed", kUsage); rc >= 0) {
      std::exit(rc);  // --help, --version
    } else if (arg == "--config" || arg == "--itch" || arg == "--set" || arg == "--book-out" || arg == "--counts-out" ||
               arg == "--summary-json" || arg == "--role") {
      absl::StatusOr<std::string> v = take();
      if (!v.ok()) return v.status();
      if (arg == "--config") a.config = *v;
      if (arg == "--itch") {
        a.overrides.push_back("feed.source=\"file\"");
        a.overrides.push_back("feed.file=" + toml_string(*v));
      }
      if (arg == "--set") a.overrides.push_back(*v);
      if (arg == "--book-out") a.book_out = *v;
      if (arg == "--counts-out") a.counts_out = *v;
      if (arg == "--summary-json") a.summary_json = *v;
      if (arg == "--role") {
        if (*v == "all")
          a.role = Role::kAll;
        else if (*v == "pub")
          a.role = Role::kPub;
        else if (*v == "sub")
          a.role = Role::kSub;
        else
          return absl::InvalidArgumentError(absl::StrCat("--role: expected all|pub|sub, got \"", *v, "\""));
      }
    } else if (arg == "--print-config") {
      a.print_config = true;
    } else if (arg == "--quiet") {
      a.quiet = true;
    } else if (arg == "--sub-index") {
      int v = 0;
      s = take_int(&v);
      a.sub_index = static_cast<std::uint32_t>(v);
    } else if (arg == "--progress-fd") {
      s = take_int(&a.progress_fd);
    } else if (arg == "--report-fd") {
      s = take_int(&a.report_fd);
    } else {
      return absl::InvalidArgumentError(cli::unknown_flag_message(argv[i], cli::flags_in(kUsage)));
    }
    if (!s.ok()) return s;
  }
  return a;
}

// ---- progress ---------------------------------------------------------------------------------

// Prints one progress line every feed.progress_ms while the replay runs, from totals that the
// roles publish in RoleProgress blocks (the subscribers' may live in other processes).
class ProgressPrinter {
 public:
  ProgressPrinter(const RoleProgress* pub, std::uint64_t total, const RoleProgress* subs, std::uint32_t nsubs)
      : pub_(pub), total_(total), subs_(subs), nsubs_(nsubs), last_(1 + nsubs, 0) {
    start_ = std::chrono::steady_clock::now();
    prev_ = start_;
  }

  void print() {
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - prev_).count();
    prev_ = now;
    std::string line = absl::StrFormat("[%6.1fs]", std::chrono::duration<double>(now - start_).count());
    auto rate = [&](std::uint64_t cur, std::uint64_t* last) {
      const double r = dt > 0 ? static_cast<double>(cur - *last) / dt : 0;
      *last = cur;
      if (r >= 1e6) return absl::StrFormat("%.2fM/s", r / 1e6);
      return r >= 1e4 ? absl::StrFormat("%.0fk/s", r / 1e3) : absl::StrFormat("%.0f/s", r);
    };
    if (pub_ != nullptr) {
      const std::uint64_t m = pub_->messages.load(std::memory_order_relaxed);
      absl::StrAppendFormat(&line, " pub %s", commas(m));
      if (total_ != 0)
        absl::StrAppendFormat(&line, "/%s (%.0f%%)", commas(total_),
                              100.0 * static_cast<double>(m) / static_cast<double>(total_));
      absl::StrAppendFormat(&line, " %s", rate(m, &last_[0]));
    }
    for (std::uint32_t i = 0; i < nsubs_; ++i) {
      const RoleProgress& s = subs_[i];
      const std::uint64_t m = s.messages.load(std::memory_order_relaxed);
      absl::StrAppendFormat(&line, " | sub%d %s %s gaps %s", i, commas(m), rate(m, &last_[1 + i]),
                            commas(s.gaps.load(std::memory_order_relaxed)));
      const std::uint64_t lost = s.lost.load(std::memory_order_relaxed);
      if (lost != 0) absl::StrAppendFormat(&line, " lost %s", commas(lost));
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }

 private:
  const RoleProgress* pub_;
  std::uint64_t total_;
  const RoleProgress* subs_;
  std::uint32_t nsubs_;
  std::vector<std::uint64_t> last_;
  std::chrono::steady_clock::time_point start_, prev_;
};

// Runs `check` every 20 ms and the printer every `interval_ms` on a helper thread.
class Monitor {
 public:
  template <class Check>
  Monitor(ProgressPrinter* printer, std::uint32_t interval_ms, Check check)
      : thread_([this, printer, interval_ms, check] {
          auto next = std::chrono::steady_clock::now() + std::chrono::milliseconds(interval_ms);
          while (!done_.load(std::memory_order_acquire)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            check();
            if (printer != nullptr && interval_ms != 0 && std::chrono::steady_clock::now() >= next) {
              printer->print();
              next += std::chrono::milliseconds(interval_ms);
            }
          }
        }) {}
  ~Monitor() { stop(); }
  void stop() {
    done_.store(true, std::memory_order_release);
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// ---- subscriber processes ------------------------------------------------------------------

struct ChildProc {
  pid_t pid = -1;
  int report_fd = -1;  // read end
  std::string report;
  bool exited = false;
  int status = 0;
};

// A shared anonymous mapping of RoleProgress blocks that survives exec (memfd).
struct SharedProgress {
  int fd = -1;
  RoleProgress* blocks = nullptr;
  std::size_t size = 0;
};

absl::StatusOr<SharedProgress> create_shared_progress(std::uint32_t n) {
  SharedProgress sp;
  sp.fd = memfd_create("pollux-feed-progress", MFD_CLOEXEC);
  if (sp.fd < 0) return absl::InternalError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  sp.size = sizeof(RoleProgress) * n;
  if (ftruncate(sp.fd, static_cast<off_t>(sp.size)) != 0) {
    return absl::InternalError(absl::StrCat("ftruncate: ", std::strerror(errno)));
  }
  void* p = mmap(nullptr, sp.size, PROT_READ | PROT_WRITE, MAP_SHARED, sp.fd, 0);
  if (p == MAP_FAILED) return absl::InternalError(absl::StrCat("mmap: ", std::strerror(errno)));
  sp.blocks = static_cast<RoleProgress*>(p);
  for (std::uint32_t i = 0; i < n; ++i) new (&sp.blocks[i]) RoleProgress();
  return sp;
}

absl::StatusOr<RoleProgress*> map_child_progress(int fd, std::uint32_t index) {
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < sizeof(RoleProgress) * (index + 1)) {
    return absl::InvalidArgumentError("--progress-fd: not a progress mapping of this run");
  }
  void* p = mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return absl::InternalError(absl::StrCat("mmap progress: ", std::strerror(errno)));
  close(fd);
  return static_cast<RoleProgress*>(p) + index;
}

absl::StatusOr<ChildProc> spawn_subscriber(int argc, char** argv, std::uint32_t index, int progress_fd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  // Everything the child needs is built before fork(): after it, only async-signal-safe calls
  // (the parent may already run poller threads).
  std::vector<std::string> args(argv, argv + argc);
  for (const std::string& extra :
       {std::string("--role"), std::string("sub"), std::string("--sub-index"), absl::StrCat(index),
        std::string("--progress-fd"), absl::StrCat(progress_fd), std::string("--report-fd"), absl::StrCat(fds[1])}) {
    args.push_back(extra);
  }
  std::vector<char*> av;
  for (std::string& s : args) av.push_back(s.data());
  av.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // The subscriber must not outlive a killed parent (it would wait for its publisher).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    fcntl(progress_fd, F_SETFD, 0);
    fcntl(fds[1], F_SETFD, 0);
    execv("/proc/self/exe", av.data());
    _exit(127);
  }
  close(fds[1]);
  ChildProc c;
  c.pid = pid;
  c.report_fd = fds[0];
  return c;
}

// True once the child has exited (collected without reaping it, so waitpid later still works).
bool child_exited(const ChildProc& c) {
  siginfo_t info{};
  return waitid(P_PID, static_cast<id_t>(c.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == c.pid;
}

// Reads every child's report until EOF (or `deadline`), then reaps the children.
void collect_children(std::vector<ChildProc>& children, std::chrono::steady_clock::time_point deadline) {
  for (ChildProc& c : children) {
    char buf[8192];
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        kill(c.pid, SIGKILL);
        break;
      }
      pollfd p{c.report_fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(std::min<long>(left.count(), 100))) <= 0) continue;
      const ssize_t n = read(c.report_fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      c.report.append(buf, static_cast<std::size_t>(n));
    }
    close(c.report_fd);
    int st = 0;
    waitpid(c.pid, &st, 0);
    c.exited = true;
    c.status = st;
  }
}

// ---- roles -----------------------------------------------------------------------------------

absl::Status write_outputs(const Args& a, const itch::BookSet& books) {
  if (!a.book_out.empty()) {
    if (absl::Status s = itch::write_books_jsonl(books, a.book_out); !s.ok()) return s;
  }
  if (!a.counts_out.empty()) {
    if (absl::Status s = itch::write_counts_json(books.counts(), a.counts_out); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status write_summary_json(const Args& a, const ReplayResult* pub, const std::vector<SubscriberReport>& subs,
                                const LoadedConfig& cfg, const LiveCounterValues& live = {},
                                const LiveNoteValues& notes = {}) {
  if (a.summary_json.empty()) return absl::OkStatus();
  std::ofstream f(a.summary_json, std::ios::trunc);
  f << format_summary_json(pub, subs, cfg.feed, cfg.pollux, live, notes);
  f.flush();
  if (!f) return absl::UnavailableError(absl::StrCat("cannot write ", a.summary_json, ": ", std::strerror(errno)));
  return absl::OkStatus();
}

// Live mode: every subscriber is connected and both lines are joined - the moment a script
// may start the exchange. Printed even with --quiet (scripts wait for it).
void announce_live(const Source& src) {
  if (!src.listens()) return;
  std::fprintf(stderr, "pollux-feed: live: ready, listening (%s)\n", src.description.c_str());
  std::fflush(stderr);
}

absl::StatusOr<std::unique_ptr<Context>> make_context(const LoadedConfig& cfg) {
  return Context::from_string(cfg.pollux_toml, cfg.pollux_source);
}

// One subscriber, in this process: runs it and reports (book and counts files for index 0).
SubscriberReport run_subscriber_here(Context& ctx, const LoadedConfig& cfg, const Args& a, std::uint32_t index,
                                     RoleProgress* progress) {
  SubscriberReport rep;
  rep.index = index;
  rep.pid = getpid();
  absl::StatusOr<std::unique_ptr<FeedSubscriber>> sub = FeedSubscriber::open(ctx, cfg.feed, cfg.pollux.idle);
  if (!sub.ok()) {
    rep.error = std::string(sub.status().message());
    progress->state.store(RoleProgress::kFailed, std::memory_order_release);
    return rep;
  }
  const absl::Status s = (*sub)->run(progress, g_stop);
  rep = make_report(index, getpid(), (*sub)->result(), cfg.feed, index == 0);
  if (!s.ok()) rep.error = std::string(s.message());
  if (s.ok() && index == 0) {
    if (absl::Status w = write_outputs(a, *(*sub)->result().books); !w.ok()) rep.error = std::string(w.message());
  }
  return rep;
}

int run_sub(const Args& a, const LoadedConfig& cfg) {
  const bool child = a.report_fd >= 0;
  RoleProgress local;
  RoleProgress* progress = &local;
  if (child && a.progress_fd >= 0) {
    absl::StatusOr<RoleProgress*> p = map_child_progress(a.progress_fd, a.sub_index);
    if (!p.ok()) {
      fail(std::string(p.status().message()));
      return 2;
    }
    progress = *p;
  }
  absl::StatusOr<std::unique_ptr<Context>> ctx = make_context(cfg);
  SubscriberReport rep;
  if (!ctx.ok()) {
    rep.index = a.sub_index;
    rep.pid = getpid();
    rep.error = std::string(ctx.status().message());
    progress->state.store(RoleProgress::kFailed, std::memory_order_release);
  } else {
    std::optional<ProgressPrinter> printer;
    std::optional<Monitor> monitor;
    if (!child && !a.quiet) {
      std::fprintf(stderr, "pollux-feed: subscribing to %d stream(s) \"%s.*\" (%s, threading %s)\n", cfg.feed.streams,
                   cfg.feed.topic.c_str(), cfg.pollux.transport.c_str(), cfg.pollux.threading.c_str());
      printer.emplace(nullptr, 0, progress, 1);
      monitor.emplace(&*printer, cfg.feed.progress_ms, [] {});
    }
    rep = run_subscriber_here(**ctx, cfg, a, a.sub_index, progress);
    if (monitor) monitor->stop();
  }
  if (child) {
    const std::string text = serialize(rep);
    for (std::size_t off = 0; off < text.size();) {
      const ssize_t n = write(a.report_fd, text.data() + off, text.size() - off);
      if (n < 0 && errno == EINTR) continue;  // a SIGTERM while the pipe is full
      if (n <= 0) break;
      off += static_cast<std::size_t>(n);
    }
    close(a.report_fd);
    return rep.error.empty() ? 0 : 1;
  }
  std::printf("== pollux-feed summary (subscriber) ==\n%s",
              format_subscriber(rep, cfg.feed.replay == ReplayMode::kMax).c_str());
  if (absl::Status s = write_summary_json(a, nullptr, {rep}, cfg); !s.ok()) fail(std::string(s.message()));
  return rep.error.empty() ? 0 : 1;
}

// The publishing side, opened in this order: the source first (a bad file fails before anything
// is started), then the context, then the publisher (its streams exist before any subscriber
// looks for them).
struct PublisherSide {
  std::unique_ptr<Source> src;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<FeedPublisher> pub;
};

absl::StatusOr<PublisherSide> open_publisher_side(const LoadedConfig& cfg) {
  PublisherSide side;
  absl::StatusOr<std::unique_ptr<Source>> src = open_source(cfg.feed);
  if (!src.ok()) return src.status();
  side.src = *std::move(src);
  absl::StatusOr<std::unique_ptr<Context>> ctx = make_context(cfg);
  if (!ctx.ok()) return ctx.status();
  side.ctx = *std::move(ctx);
  side.src->attach_counters(*side.ctx);
  absl::StatusOr<std::unique_ptr<FeedPublisher>> pub = FeedPublisher::open(*side.ctx, cfg.feed, cfg.pollux.idle);
  if (!pub.ok()) return pub.status();
  side.pub = *std::move(pub);
  return side;
}

int run_pub(const Args& a, const LoadedConfig& cfg, PublisherSide& side) {
  std::unique_ptr<Source>& src = side.src;
  std::unique_ptr<FeedPublisher>& pub = side.pub;
  if (!a.quiet) {
    std::fprintf(stderr, "pollux-feed: %s ready; waiting for subscribers on %d stream(s) \"%s.*\"\n",
                 src->live() ? src->name().c_str() : absl::StrCat(commas(src->messages), " messages").c_str(),
                 cfg.feed.streams, cfg.feed.topic.c_str());
  }
  if (absl::Status s = pub->wait_connected(g_stop); !s.ok()) {
    fail(std::string(s.message()));
    return 1;
  }
  announce_live(*src);
  RoleProgress progress;
  ProgressPrinter printer(&progress, src->messages, nullptr, 0);
  std::optional<Monitor> monitor;
  if (!a.quiet) monitor.emplace(&printer, cfg.feed.progress_ms, [] {});
  absl::StatusOr<ReplayResult> r = pub->replay(*src, &progress, g_stop);
  pub->close();
  if (monitor) monitor->stop();
  if (!r.ok()) {
    fail(std::string(r.status().message()));
    return 1;
  }
  const LiveCounterValues live = src->live_counters();
  const LiveNoteValues notes = src->live_notes();
  std::printf("== pollux-feed summary (publisher) ==\n%s",
              format_publisher(*r, src->description, src->prepare_seconds, cfg.feed, cfg.pollux, live, notes).c_str());
  if (absl::Status s = write_summary_json(a, &*r, {}, cfg, live, notes); !s.ok()) fail(std::string(s.message()));
  return r->stopped ? 1 : 0;
}

int run_all(int argc, char** argv, const Args& a, const LoadedConfig& cfg, PublisherSide& side) {
  const FeedConfig& fc = cfg.feed;
  const std::uint32_t nsubs = fc.subscribers;
  const bool processes = fc.subscriber_mode == SubscriberMode::kProcess;
  std::unique_ptr<Source>& src = side.src;
  std::unique_ptr<Context>& ctx = side.ctx;
  std::unique_ptr<FeedPublisher>& pub = side.pub;

  std::vector<RoleProgress> thread_progress(processes ? 0 : nsubs);
  SharedProgress shared;
  RoleProgress* sub_progress = thread_progress.data();
  std::vector<ChildProc> children;
  std::vector<std::thread> threads;
  std::vector<SubscriberReport> reports(nsubs);
  if (processes) {
    absl::StatusOr<SharedProgress> sp = create_shared_progress(nsubs);
    if (!sp.ok()) {
      fail(std::string(sp.status().message()));
      return 1;
    }
    shared = *sp;
    sub_progress = shared.blocks;
    for (std::uint32_t i = 0; i < nsubs; ++i) {
      absl::StatusOr<ChildProc> c = spawn_subscriber(argc, argv, i, shared.fd);
      if (!c.ok()) {
        fail(std::string(c.status().message()));
        g_stop.store(true);
        break;
      }
      children.push_back(*c);
    }
  } else {
    for (std::uint32_t i = 0; i < nsubs; ++i) {
      threads.emplace_back([&, i] { reports[i] = run_subscriber_here(*ctx, cfg, a, i, &sub_progress[i]); });
    }
  }

  // Stops the replay if a subscriber fails or its process exits before the end.
  std::atomic<bool> sub_failed{false};
  std::atomic<bool> replay_over{false};
  auto check = [&] {
    if (replay_over.load(std::memory_order_acquire)) return;
    for (std::uint32_t i = 0; i < nsubs; ++i) {
      const bool failed = sub_progress[i].state.load(std::memory_order_acquire) == RoleProgress::kFailed ||
                          (processes && i < children.size() && child_exited(children[i]));
      if (failed && !sub_failed.exchange(true)) g_stop.store(true);
    }
  };

  RoleProgress pub_progress;
  ProgressPrinter printer(&pub_progress, src->messages, sub_progress, nsubs);
  std::optional<Monitor> monitor;
  monitor.emplace(a.quiet ? nullptr : &printer, fc.progress_ms, check);

  absl::Status status;
  if (!a.quiet) {
    std::fprintf(stderr, "pollux-feed: %s (%s) -> %d stream(s) -> %d subscriber %s over %s (threading %s)\n",
                 src->live() ? "live feed" : absl::StrCat(commas(src->messages), " messages").c_str(),
                 src->description.c_str(), fc.streams, nsubs, processes ? "process(es)" : "thread(s)",
                 cfg.pollux.transport.c_str(), cfg.pollux.threading.c_str());
  }
  // Every subscriber connected on every stream before the first message: nothing is missed.
  if (status.ok()) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(fc.connect_timeout_ms);
    for (;;) {
      std::uint32_t ready = 0;
      for (std::uint32_t i = 0; i < nsubs; ++i) {
        ready += sub_progress[i].state.load(std::memory_order_acquire) != RoleProgress::kStarting;
      }
      if (ready == nsubs) break;
      if (g_stop.load()) {
        status = absl::CancelledError("a subscriber failed or the run was interrupted before the replay started");
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        status = absl::DeadlineExceededError(
            absl::StrFormat("%d of %d subscriber(s) not ready after %d ms (feed.connect_timeout_ms)", nsubs - ready,
                            nsubs, fc.connect_timeout_ms));
        break;
      }
      // Inline mode: heartbeats and subscriber status need the publishing thread.
      if (pub->service() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (status.ok() && !sub_failed.load()) status = pub->wait_connected(g_stop);
  if (status.ok() && !sub_failed.load()) announce_live(*src);

  std::optional<ReplayResult> replay;
  if (status.ok() && !sub_failed.load()) {
    absl::StatusOr<ReplayResult> r = pub->replay(*src, &pub_progress, g_stop);
    if (r.ok()) {
      replay = std::move(*r);
    } else {
      status = r.status();
    }
  }
  replay_over.store(true, std::memory_order_release);
  // End of stream for every subscriber (after they have read everything that was sent).
  pub->close();
  if (!status.ok()) g_stop.store(true);

  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(fc.connect_timeout_ms) + std::chrono::seconds(10);
  if (processes) {
    collect_children(children, deadline);
    for (std::uint32_t i = 0; i < nsubs; ++i) {
      reports[i].index = i;
      if (i >= children.size()) {
        reports[i].error = "not started";
        continue;
      }
      reports[i].pid = children[i].pid;
      absl::StatusOr<SubscriberReport> rep = parse_report(children[i].report);
      if (rep.ok()) {
        reports[i] = std::move(*rep);
      } else {
        const int st = children[i].status;
        reports[i].error = WIFSIGNALED(st) ? absl::StrFormat("process killed by signal %d", WTERMSIG(st))
                                           : absl::StrFormat("process exited with status %d without a report",
                                                             WIFEXITED(st) ? WEXITSTATUS(st) : -1);
      }
    }
  } else {
    for (std::thread& t : threads) t.join();
  }
  monitor->stop();
  if (monitor && !a.quiet && fc.progress_ms != 0 && replay) printer.print();

  int rc = 0;
  const LiveCounterValues live = src->live_counters();
  const LiveNoteValues notes = src->live_notes();
  std::printf("== pollux-feed summary ==\n");
  if (replay) {
    std::printf("%s",
                format_publisher(*replay, src->description, src->prepare_seconds, fc, cfg.pollux, live, notes).c_str());
    if (replay->stopped) rc = 1;
  }
  for (const SubscriberReport& r : reports) {
    std::printf("%s", format_subscriber(r, fc.replay == ReplayMode::kMax).c_str());
    if (!r.error.empty()) rc = 1;
  }
  std::printf("%s", format_agreement(reports).c_str());
  if (replay) std::printf("%s", format_end_to_end(*replay, reports).c_str());
  std::fflush(stdout);
  if (!status.ok()) {
    fail(std::string(status.message()));
    rc = 1;
  }
  if (absl::Status s = write_summary_json(a, replay ? &*replay : nullptr, reports, cfg, live, notes); !s.ok()) {
    fail(std::string(s.message()));
    rc = 1;
  }
  return rc;
}

int run_main(int argc, char** argv) {
  absl::StatusOr<Args> args = parse_args(argc, argv);
  if (!args.ok()) {
    fail(std::string(args.status().message()));
    return cli::kUsageExit;  // a bad command line: 64, as every Pollux program
  }
  const Args& a = *args;
  // First: reading a configuration may block (a FIFO), and a signal must end that too.
  install_signal_handlers(a.report_fd >= 0);
  absl::StatusOr<LoadedConfig> cfg = a.config.empty() ? load_config(embedded_config(), kEmbeddedConfigName, a.overrides)
                                                      : load_config_file(a.config, a.overrides);
  if (!cfg.ok()) {
    fail(std::string(cfg.status().message()));
    return 2;
  }
  if (a.print_config) {
    std::printf("# pollux-feed effective configuration (source: %s)\n\n%s\n%s", cfg->pollux_source.c_str(),
                cfg->feed.to_toml().c_str(), cfg->pollux.effective_config.c_str());
    return 0;
  }
  int rc = 2;
  if (a.role == Role::kSub) {
    rc = run_sub(a, *cfg);
  } else {
    // The publishing roles (pub, all) open the same side first: the source, the context, the
    // publisher; a failure there is a configuration error (2).
    absl::StatusOr<PublisherSide> side = open_publisher_side(*cfg);
    if (!side.ok()) {
      fail(std::string(side.status().message()));
    } else {
      rc = a.role == Role::kAll ? run_all(argc, argv, a, *cfg, *side) : run_pub(a, *cfg, *side);
    }
  }
  if (const int sig = g_signal.load(std::memory_order_relaxed); sig != 0 && a.report_fd < 0) {
    fail(absl::StrCat("stopped by ", cli::signal_name(sig)));
    if (rc == 0) rc = 1;
  }
  return rc;
}

}  // namespace
}  // namespace pollux::feed

int main(int argc, char** argv) { return pollux::feed::run_main(argc, argv); }
