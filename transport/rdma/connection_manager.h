// RC connection set-up and tear-down with rdma_cm, on one control thread per transport.
//
// Direction (as Aeron's unicast): subscribers listen (rdma.listen_port on their device's IPv4
// address) and publishers connect to every address in rdma.peers, one QP per (publishing
// endpoint, subscriber) - so each publishing application thread owns its QPs. The private data
// of the connect request carries the stream id, the publisher's session and max frame size, and
// the protocol version; the subscriber validates all of it and rejects with a reason the
// publisher logs. QPs are created by Pollux (not rdma_create_qp) and moved through INIT/RTR/RTS
// with rdma_init_qp_attr, so mlx5dv QPs and plain ones follow the same path.
//
// A failed, rejected or lost connection is retried every rdma.reconnect_ms for as long as the
// publisher exists (the reconnect path); its last error is kept for describe() and logged once
// per distinct error.
#pragma once

#include <rdma/rdma_cma.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "core/counter_set.h"
#include "core/counters.h"
#include "transport/rdma/conn.h"

namespace pollux::transport::rdma {

class RdmaTransport;
class RdmaTxEndpoint;
class RdmaRxEndpoint;

// One publishing endpoint's relationship with one subscriber address.
struct PeerLink {
  RdmaTxEndpoint* ep = nullptr;
  std::string peer;  // "a.b.c.d:port"
  std::uint32_t ip = 0;
  std::uint16_t port = 0;
  Conn* conn = nullptr;  // the attempt in progress or the live connection
  std::int64_t next_try_ns = 0;
  std::string last_error;  // logged when it changes
  std::uint64_t failures = 0;
};

// The connection manager's counters (scope "rdma cm DEVICE").
#define POLLUX_RDMA_CM_COUNTERS(X)                                                        \
  X(c_attempts_, "connect_attempts", "connections asked for (subscribers to publishers)") \
  X(c_established_, "connections_established", "connections established")                 \
  X(c_failures_, "connect_failures", "connection attempts that failed")                   \
  X(c_rejects_sent_, "connects_rejected", "connection requests this side rejected")       \
  X(c_accepted_, "connects_accepted", "connection requests this side accepted")           \
  X(c_disconnects_, "disconnects", "connections that ended")

class ConnectionManager {
 public:
  explicit ConnectionManager(RdmaTransport& t);
  ~ConnectionManager();

  absl::Status start();
  // Disconnects and destroys every QP and id it still knows; joins the thread.
  void stop();

  // Publisher endpoint: start connecting to every peer. Owner thread may use it immediately.
  void add_publisher(RdmaTxEndpoint* ep);
  // No further connections for ep; attempts in progress are dropped. Live connections remain
  // the owner's to retire (it calls this from close_st first).
  void remove_publisher(RdmaTxEndpoint* ep);
  // Subscriber endpoint: starts the listener on first use. AlreadyExists when the stream has a
  // subscriber in this context already (one RC receiving endpoint per stream and context).
  absl::Status add_subscriber(RdmaRxEndpoint* ep);
  void remove_subscriber(RdmaRxEndpoint* ep);
  // A QP its owner no longer uses: disconnect (if still connected) and destroy it here.
  void retire(Conn* c);

  std::string describe() const;

 private:
  struct Event;
  void run() noexcept;
  void wake();
  void handle(const Event& ev);
  void connect(PeerLink& l, std::int64_t now);
  void fail(PeerLink& l, const std::string& why, std::int64_t now);
  void on_connect_request(const Event& ev);
  void on_connect_response(Conn* c, const Event& ev);
  void destroy(Conn* c);
  absl::Status listen_locked();
  // Moves c->qp to `state` with the attributes rdma_cm gives it; min_rnr_timer >= 0 (an RNR timer
  // code, RTR only) replaces the CM's.
  absl::Status to_state(Conn* c, ibv_qp_state state, int min_rnr_timer = -1);

  RdmaTransport& t_;
  mutable std::mutex mu_;
  rdma_event_channel* ch_ = nullptr;
  rdma_cm_id* listen_id_ = nullptr;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<PeerLink>> links_;
  std::map<std::uint32_t, RdmaRxEndpoint*> subs_;  // by stream id
  std::vector<Conn*> passive_;                     // accepted connections (destroyed at stop)
  // Retired QPs and when they may be destroyed: a short grace period, so an owner thread still
  // finishing the batch of announcements it was processing never touches a freed Conn.
  std::vector<std::pair<Conn*, std::int64_t>> graveyard_;
  POLLUX_COUNTER_FIELDS(POLLUX_RDMA_CM_COUNTERS)
};

}  // namespace pollux::transport::rdma
