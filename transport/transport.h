// The transport interface, shaped for verbs from day one (and implemented first by shm). The API
// (api/) sees this header and core/ only: it never names a transport's class.
//
// Control plane (virtual, may allocate, returns absl::Status): a Transport opens endpoints,
// registers the buffer pool once, connects (tx) or joins (rx) a stream, and closes.
// Data plane (per endpoint, resolved once at open): batch calls over spans that return counts -
// post() a burst of frames with one doorbell, reap() completions (which hand buffers back to
// the pool), poll() a burst of received frames, release() them after delivery. These are
// virtual calls on `final` classes, made once per burst, never once per message.
// Direct paths (inline threading, the application thread drives the endpoint): an endpoint whose
// frames live in a buffer of its own (the shm log, UDP's send log and receive buffers) offers
// claim/commit in that buffer and a poll that hands frames over in place (TxDirect, RxDirect):
// plain functions of the final class, taken once at open - no copy into a pool slot, no
// descriptor, no virtual dispatch.
// Progress: each transport gives each poller one core::ProgressSource (poller_source()) that
// progresses every endpoint opened on that poller; those endpoints are passive (they post and
// queue, the source polls the CQ / sockets). An endpoint driven by an application thread
// (inline mode, spec.poller == -1) progresses itself inside poll_st()/reap_st(), and its
// try_arm_st()/disarm_st()/notify_fd()/futex_waits_st() let that thread wait instead of
// spinning (core/progress.h gives the protocol; the defaults refuse to arm).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/buffer_pool.h"
#include "core/config.h"
#include "core/counters.h"
#include "core/frame.h"
#include "core/progress.h"
#include "core/trace.h"

namespace pollux::transport {

// A formatted frame (FrameHeader + optional trace + payload) in a pool slot.
struct TxDesc {
  std::uint32_t slot;
  std::uint32_t length;  // frame_length
  std::uint16_t flags;   // copy of FrameHeader::flags (kFlagTraced: stamp stages without touching the slot)
  std::uint16_t reserved;
  std::uint32_t reserved2;
};
static_assert(sizeof(TxDesc) == 16);

enum class RxKind : std::uint16_t {
  kMessage = 0,      // frame points at a complete frame (zero-copy)
  kGap = 1,          // gap_count messages starting at `sequence` will never arrive
  kEndOfStream = 2,  // the publisher closed, died or lost its medium (EndReason)
  kNewSession = 3,   // a new publisher incarnation (session) started on the stream
};

enum GapReason : std::uint16_t {
  kGapLapped = 0,     // lossy shm: the publisher overwrote data before it was read
  kGapOverrun = 1,    // lossy shm: data was overwritten while being delivered (views were torn)
  kGapLost = 2,       // network loss that could not be repaired
  kGapMalformed = 3,  // a corrupt frame was dropped
};

enum EndReason : std::uint16_t {
  kEndClosed = 0,         // the publisher closed the stream
  kEndPublisherDied = 1,  // the publisher vanished without closing
  kEndTruncated = 2,      // shm: the segment file was truncated under the stream
};

struct RxDesc {
  const core::FrameHeader* frame;  // kMessage
  std::uint64_t token;             // transport's own (shm: log position after the frame)
  std::uint64_t sequence;          // kMessage: the frame's sequence; kGap: first missing one
  std::uint64_t gap_count;         // kGap: number of messages lost (0 = unknown, overrun)
  std::int64_t receive_ns;         // traced frames: when the transport saw it
  std::int64_t ring_ns;            // traced frames: when a poller pushed it to the subscriber ring
  std::uint32_t length;            // kMessage: frame_length
  RxKind kind;
  std::uint16_t reason;  // GapReason, or EndReason
  std::uint32_t session_id;
  std::uint32_t reserved;  // RxFlag bits set by the transport (0 = none)
};
static_assert(sizeof(RxDesc) == 64);

// RxDesc::reserved bits.
enum RxFlag : std::uint32_t {
  // kMessage, traced: the transport wrote the kernel's receive timestamp into its own private
  // copy of the frame's trace block (StageTrace::kernel_rx_ns). Only UDP sets it.
  kRxFlagKernelRx = 1u << 0,
};

// Where a kMessage view starts in its transport's position space (for RxEndpoint::safe_floor()
// checks): a transport sets token to the position just past the frame's aligned length.
inline std::uint64_t view_start(const RxDesc& d) noexcept {
  return d.token - core::align_up(d.length, core::kFrameAlignment);
}

class TxEndpoint;
class RxEndpoint;

// A frame claimed in an endpoint's own send buffer: the caller writes the body after the
// FrameHeader (the header is the endpoint's: commit writes it).
struct TxClaim {
  std::byte* frame = nullptr;
  std::uint64_t position = 0;  // where the frame starts in the endpoint's position space
  std::uint32_t frame_length = 0;
  std::uint32_t aligned = 0;  // frame_length rounded up to core::kFrameAlignment
};

enum class ClaimResult : std::uint8_t {
  kClaimed,
  kLogFull,  // a log shared with the subscribers has no room before the slowest one (flow control)
  kRefused,  // the transport cannot take the frame now (send window, socket buffer)
};

// What an endpoint's direct send path reports to, given once at open (TxEndpoint::bind_direct)
// by the one caller that drives it: the caller's counters, and the caller's general offer,
// which the direct offer hands a message to (a tail call) when it declines it - not connected,
// too large, a claim that needs padding, a clock update in progress - with nothing written or
// counted. So the common case is one call from the caller's offer() and back.
struct TxBinding {
  core::Counter* messages = nullptr;
  core::Counter* bytes = nullptr;
  std::int64_t (*general)(void* caller, const std::byte* payload, std::size_t len) noexcept = nullptr;
  void* caller = nullptr;
};

// An endpoint's direct send path (inline threading). Null members: not offered. Every function
// runs on the thread that drives the endpoint. `now` is the offer's clock reading, 0 when the
// stream does not stamp (the endpoint then reads the clock itself when it needs one).
struct TxDirect {
  // The whole offer of an untraced message of `len` bytes: claim, copy, commit, count, the
  // endpoint's duties that ride on it. Returns the position after the frame, or what the
  // binding's general offer returns for it.
  std::int64_t (*offer)(TxEndpoint* ep, const std::byte* payload, std::size_t len) noexcept = nullptr;
  // Room for a frame of `frame_length` bytes (<= max_frame()).
  ClaimResult (*claim)(TxEndpoint* ep, std::uint32_t frame_length, std::int64_t now, TxClaim* c) noexcept = nullptr;
  // Writes the header (flags, `now` as the publish time) and publishes the frame. `deferred`:
  // part of a batch that ends with flush() (the endpoint may publish its tail once for it).
  // Returns the position after the frame.
  std::int64_t (*commit)(TxEndpoint* ep, const TxClaim& c, std::uint16_t flags, std::int64_t now,
                         bool deferred) noexcept = nullptr;
  void (*flush)(TxEndpoint* ep, std::int64_t now) noexcept = nullptr;
  // Gives a claim back unpublished (readers skip it).
  void (*abort)(TxEndpoint* ep, const TxClaim& c) noexcept = nullptr;
  // claim() also takes traced frames (a trace block after the header); false: traced frames go
  // through pool slots and post_st().
  bool traced = false;
};

// The handler RxDirect::poll hands each frame to: called in place, before the endpoint moves
// on (the frame is valid during the call only). `frame` is a core::FrameHeader of `len` >=
// kFrameHeaderSize bytes (checked by the endpoint), flags 0.
using FrameFn = void (*)(void* ctx, const void* frame, std::uint32_t len);

// What an endpoint's direct receive path reports to, given once at open (RxEndpoint::
// bind_direct) by the one caller that drives it: its counters, and its general poll, which the
// direct poll hands over to (a tail call) where it stops - a gap, a stream event, a traced or
// padding frame, a due timer - with the frames it delivered so far (`handled`).
struct RxBinding {
  core::Counter* messages = nullptr;
  core::Counter* bytes = nullptr;
  core::Counter* position = nullptr;  // set to the next sequence expected when valid()
  std::uint64_t* received = nullptr;  // messages delivered, for the caller's own totals
  int (*general)(void* caller, const void* handlers, int limit, int handled) noexcept = nullptr;
  void* caller = nullptr;
  // Once per poll that delivered `n` frames.
  void count(std::uint32_t n, std::uint64_t payload_bytes, std::uint64_t last_sequence) const noexcept {
    *received += n;
    messages->add(n);
    bytes->add(payload_bytes);
    if (position->valid()) position->set(last_sequence + 1);
  }
};

// An endpoint's direct receive path (inline threading). Null: not offered.
struct RxDirect {
  // Delivers up to `limit` plain frames (in order, consecutive) of the current session to
  // on_frame(ctx, ...), one call each, gives their space back and counts them; returns how many,
  // or what the binding's general poll returns when it stops earlier. `handlers` goes to the
  // general poll untouched.
  int (*poll)(RxEndpoint* ep, FrameFn on_frame, void* ctx, const void* handlers, int limit) noexcept = nullptr;
};

class TxEndpoint {
 public:
  virtual ~TxEndpoint() = default;
  // Posts up to frames.size() frames in order; returns how many were accepted (the rest stay
  // with the caller: back-pressure). One doorbell per call.
  virtual std::uint32_t post_st(std::span<const TxDesc> frames) noexcept = 0;
  // Writes indices of pool slots the transport no longer needs; returns their number.
  virtual std::uint32_t reap_st(std::span<std::uint32_t> freed) noexcept = 0;
  // Timers: heartbeats, liveness, reconnects. Returns work done.
  virtual int housekeeping_st(std::int64_t now_ns) noexcept = 0;
  // Inline mode's interrupt hooks (core/progress.h): false = work pending, or this endpoint
  // cannot wake its thread (the default: never claim a wakeup that will not come).
  virtual bool try_arm_st() noexcept { return false; }
  virtual void disarm_st() noexcept {}
  // Readable when an armed endpoint has work (an epoll fd); -1 when it wakes through futex
  // words (futex_waits_st) or cannot wake at all.
  virtual int notify_fd() const noexcept { return -1; }
  virtual std::uint32_t futex_waits_st(std::span<core::FutexWait> /*out*/) noexcept { return 0; }
  // False until a subscriber can receive (offer() then returns kNotConnected).
  virtual bool connected() const noexcept = 0;
  // Largest frame (header included) this endpoint can send.
  virtual std::uint32_t max_frame() const noexcept = 0;
  virtual void close_st() noexcept = 0;
  virtual std::string describe() const = 0;
  // Inline mode: an offer was refused (not connected, or the log full): what may unblock it
  // runs now - the endpoint's timers, which an application spinning on offer() would otherwise
  // never reach (reaping a dead subscriber, hearing a new one). Returns work done.
  virtual int refused_st(std::int64_t now_ns) noexcept { return housekeeping_st(now_ns); }
  // The direct path (see TxDirect); taken once at open, then bound to its caller.
  const TxDirect& direct() const noexcept { return direct_; }
  void bind_direct(const TxBinding& b) noexcept { binding_ = b; }

  std::uint32_t stream_id() const noexcept { return stream_id_; }
  std::uint32_t session_id() const noexcept { return session_id_; }
  // Control path: keeps `h` alive until this endpoint is destroyed - after the derived class's
  // destructor, so after its queues are gone (e.g. the core::SlotLease of pool slots it is
  // handed: they may be in flight until then).
  void hold(std::shared_ptr<void> h) { held_.push_back(std::move(h)); }

 protected:
  std::uint32_t stream_id_ = 0;
  std::uint32_t session_id_ = 0;
  TxDirect direct_;    // set by the final class when it opens, if it offers a direct path
  TxBinding binding_;  // bind_direct()

 private:
  std::vector<std::shared_ptr<void>> held_;
};

class RxEndpoint {
 public:
  virtual ~RxEndpoint() = default;
  // Fills up to out.size() events; returns their number.
  virtual std::uint32_t poll_st(std::span<RxDesc> out) noexcept = 0;
  // Hands back delivered kMessage events (in order). With `validate`, a transport whose
  // buffers can be overwritten (lossy shm) checks the views survived delivery and reports any
  // that did not as a kGap/kGapOverrun event on the next poll. The dedicated/shared modes
  // validate on the application thread instead (safe_floor()) and pass false.
  virtual void release_st(std::span<const RxDesc> done, bool validate) noexcept = 0;
  // Thread-safe: a message view whose view_start() is below this may have been overwritten.
  // 0 for transports that own their receive buffers until release.
  virtual std::uint64_t safe_floor() const noexcept { return 0; }
  virtual int housekeeping_st(std::int64_t now_ns) noexcept = 0;
  // Inline mode, before the application's first poll (the context's duty call): what makes
  // the endpoint known to its publishers without delivering anything - attaching, reading and
  // answering the publisher's announcements (what is read stays for the first poll).
  virtual int duty_st(std::int64_t now_ns) noexcept { return housekeeping_st(now_ns); }
  virtual bool try_arm_st() noexcept { return false; }  // as TxEndpoint::try_arm_st()
  virtual void disarm_st() noexcept {}
  virtual int notify_fd() const noexcept { return -1; }  // as TxEndpoint::notify_fd()
  virtual std::uint32_t futex_waits_st(std::span<core::FutexWait> /*out*/) noexcept { return 0; }
  virtual bool connected() const noexcept = 0;
  virtual void close_st() noexcept = 0;
  virtual std::string describe() const = 0;
  // The direct path (see RxDirect); taken once at open, then bound to its caller.
  const RxDirect& direct() const noexcept { return direct_; }
  void bind_direct(const RxBinding& b) noexcept { binding_ = b; }

  std::uint32_t stream_id() const noexcept { return stream_id_; }
  // As TxEndpoint::hold().
  void hold(std::shared_ptr<void> h) { held_.push_back(std::move(h)); }

 protected:
  std::uint32_t stream_id_ = 0;
  RxDirect direct_;    // set by the final class when it opens, if it offers a direct path
  RxBinding binding_;  // bind_direct()

 private:
  std::vector<std::shared_ptr<void>> held_;
};

struct EndpointSpec {
  std::uint32_t stream_id = 0;
  std::string topic;
  const core::StreamConfig* stream = nullptr;  // null when the topic is not configured
  // Index of the poller that will drive the endpoint, -1 when an application thread drives it
  // (inline mode). Endpoints on one poller may share per-thread resources (RDMA: one CQ, one SRQ).
  int poller = -1;
  // Tx endpoints of traced streams: where to record the local send completion of each traced
  // frame (RDMA send CQE, UDP kernel TX timestamp), from the thread that drives the endpoint.
  // Null: record nothing. Owned by the publisher; outlives the endpoint.
  core::SendCompletionLog* send_log = nullptr;
};

// What a transport gets from the context.
struct TransportEnv {
  const core::Config* config = nullptr;
  core::BufferPool* pool = nullptr;
  core::CountersFile* counters = nullptr;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;
  // Registers the whole pool once (RDMA: ibv_reg_mr per protection domain). No-op for shm.
  virtual absl::Status register_memory(core::BufferPool& pool) = 0;
  virtual absl::StatusOr<std::unique_ptr<TxEndpoint>> open_tx(const EndpointSpec& spec) = 0;
  virtual absl::StatusOr<std::unique_ptr<RxEndpoint>> open_rx(const EndpointSpec& spec) = 0;
  // The progress source of poller `poller` (>= 0): one per poller, created on the first call
  // (control path, before the poller's first endpoint opens), owned by the transport until
  // close(). It progresses every endpoint opened with spec.poller == poller, and implements
  // that poller's half of interrupt mode for this transport. Called from the poller thread
  // only after the poller added it (Poller::add_source).
  virtual absl::StatusOr<core::ProgressSource*> poller_source(int poller) = 0;
  virtual void close() = 0;
  // True when all publishers of a stream in one process must share one tx endpoint (shm: a
  // stream has a single writer); false when each publisher gets its own (a QP, a socket).
  virtual bool shared_tx_endpoint() const noexcept { return false; }
  // describe()'s "transport:" line: the transport and what of its configuration decides how it
  // behaves (e.g. the socket buffers the kernel really grants).
  virtual std::string describe() const = 0;
  // Where one stream's messages go ("shm", "udp 239.255.0.1:40456", "rdma rc").
  virtual std::string stream_route(std::uint32_t stream_id) const = 0;
};

// The transport named by config.transport (transport/factory.cc).
absl::StatusOr<std::unique_ptr<Transport>> make_transport(const TransportEnv& env);

// The device whose NUMA node should host the pollers and the pool: runtime.device, else the
// device the transport will open (rdma: rdma.device, "auto" resolved), else "".
std::string placement_device(const core::Config& config);

// The flow control of shared-memory streams (shm.flow_control): "lossy" or "backpressure".
std::string_view flow_control_name(const core::Config& config);

// Whether the context needs the buffer pool: frames are built in pool slots in every mode but
// inline threading on shm (whose frames are written straight into the stream's log).
bool needs_pool(const core::Config& config);

// Whether a subscription's position (the sequence it expects next) lives in the stream
// counters. On shm it is the subscriber's slot in the segment, where pollux-stat reads it.
bool position_in_stream_counters(const core::Config& config);

// UDP datagrams received as they are, outside Pollux's streams, through an AF_XDP socket (the
// public pollux::DatagramReceiver, pollux/datagram.h): a multicast group's or a unicast port's
// frames go to the socket instead of the kernel's stack. Control path: add(); data path: peek()
// a batch, hand it out, release() it (one virtual call each per batch).
struct RawDatagram {
  const std::uint8_t* data;  // the payload, valid until release()
  std::uint32_t len;
  std::uint32_t line;      // what add() returned for its destination
  std::uint32_t src_addr;  // network byte order
  std::uint16_t src_port;  // network byte order
};

struct DatagramSourceOptions {
  std::string ifname;
  std::string xdp_mode = "auto";  // "auto", "copy", "zerocopy", "generic"
  int queue = -1;                 // -1: every RX queue of the interface
  std::uint32_t frames = 4096;    // UMEM frames (4096 bytes each)
};

struct DatagramSourceStats {
  std::uint64_t frames = 0;             // taken off the RX ring
  std::uint64_t malformed = 0;          // not IPv4/UDP, lengths wrong, or a wrong checksum (dropped)
  std::uint64_t partial_checksums = 0;  // UDP checksum left to a virtual link's device (taken)
  std::uint64_t unmatched = 0;          // for no destination added (dropped)
  std::uint64_t kernel_dropped = 0;     // the kernel's XDP_STATISTICS drops
};

class DatagramSource {
 public:
  virtual ~DatagramSource() = default;
  // Joins `addr` (multicast: through a kernel socket, which sends IGMP and never reads; `source`
  // != 0: a source-specific join) and sends its datagrams to `port` to the socket. Network byte
  // order. Returns the line id datagrams to it carry.
  virtual absl::StatusOr<std::uint32_t> add(std::uint32_t addr, std::uint16_t port, std::uint32_t source) = 0;
  virtual std::uint32_t peek(RawDatagram* out, std::uint32_t max) noexcept = 0;
  virtual void release() noexcept = 0;
  virtual int fd() const noexcept = 0;
  // Frames wait in the ring (no syscall).
  virtual bool pending() const noexcept = 0;
  // Reads the kernel's drop statistics (a syscall).
  virtual DatagramSourceStats stats() noexcept = 0;
  virtual std::string describe() const = 0;
};

// An AF_XDP datagram source on `options.ifname` (the UDP transport's library); errors name the
// cause and the fix (capabilities, locked memory, queues, a build without AF_XDP).
absl::StatusOr<std::unique_ptr<DatagramSource>> make_xdp_datagram_source(const DatagramSourceOptions& options);

}  // namespace pollux::transport
