// One queue pair and what both threads that touch it need to know. A Conn is created by the
// control plane (the connection manager thread for RC, open_tx/open_rx for UD), handed to the
// endpoint's owning thread through its CompletionGroup, and handed back for destruction when it
// dies or the endpoint closes. Fields are grouped by the thread that writes them.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/rdma/sequence.h"

namespace pollux::transport::rdma {

class CompletionGroup;
struct PeerLink;
namespace mlx5 {
class DvSendQueue;
struct DvQpResources;
}  // namespace mlx5

struct Conn {
  enum class Kind : std::uint8_t { kTx, kRx };
  enum class State : std::uint8_t { kPending, kLive, kDraining, kRetired };

  // --- fixed at creation (control plane) ---
  Kind kind = Kind::kTx;
  bool ud = false;
  ibv_qp* qp = nullptr;
  std::uint32_t qp_num = 0;
  rdma_cm_id* id = nullptr;  // RC only
  ibv_ah* ah = nullptr;      // UD publisher: the multicast address handle
  std::uint32_t max_inline = 0;
  std::uint32_t sq_depth = 0;
  bool has_rq = false;    // RC/UD receiver without an SRQ: buffers posted to this QP
  void* owner = nullptr;  // RdmaTxEndpoint* or RdmaRxEndpoint*
  CompletionGroup* group = nullptr;
  std::string peer;                             // "10.0.0.2:7471" (RC), the group address (UD)
  std::uint32_t remote_session = 0;             // RC receiver: the publisher's session from its request
  std::unique_ptr<mlx5::DvSendQueue> dv;        // mlx5dv fast path, when chosen
  std::unique_ptr<mlx5::DvQpResources> dv_res;  // its thread domain / parent domain
  std::uint32_t cqes_reserved = 0;              // returned to the group when the QP is destroyed

  Conn();
  ~Conn();  // out of line: DvSendQueue is incomplete here

  // --- connection manager thread ---
  PeerLink* link = nullptr;  // RC publisher: the (endpoint, peer) this attempt serves
  bool established = false;
  bool announced = false;  // handed to the owner through the group
  bool retired = false;    // handed back by the owner: never announce it again

  // Set by the connection manager when rdma_cm reports the peer gone (DISCONNECTED, device
  // removal). Release pairs with the owner's acquire in its event sync: whatever the manager
  // wrote before (e.g. its log line) is visible when the owner sees the flag.
  std::atomic<bool> disconnected{false};

  // --- owner thread (the endpoint's poller, or the application thread in inline mode) ---
  State state = State::kPending;
  std::uint32_t index = 0;        // position in the owner's connection array
  std::uint64_t posted = 0;       // publisher: endpoint frame index after the last frame posted here
  std::uint64_t completed = 0;    // publisher: every frame below this has completed on this QP
  std::uint32_t unsignalled = 0;  // publisher: sends posted since the last signalled one
  std::uint32_t rq_posted = 0;    // receiver without SRQ: buffers posted to this QP
  bool end_posted = false;        // publisher: its end-of-stream frame is posted (close)
  bool end_acked = false;         // publisher: ... and acknowledged: the subscriber has everything
  bool eos_seen = false;          // receiver: the publisher closed cleanly (end-of-stream frame)
  bool end_queued = false;        // receiver: its end marker is queued (the peer is gone)
  bool ended = false;             // receiver: end of stream delivered
  ibv_wc_status error = IBV_WC_SUCCESS;
};

// wr_id tags: the low 62 bits carry a pool slot (receives) or an endpoint frame index (sends).
inline constexpr std::uint64_t kWrRecv = 1ull << 63;
inline constexpr std::uint64_t kWrControl = 1ull << 62;
inline constexpr std::uint64_t kWrValueMask = kWrControl - 1;
// The publisher's end-of-stream frame (one per connection, posted last, by close).
inline constexpr std::uint64_t kWrEnd = kWrControl | kWrValueMask;

}  // namespace pollux::transport::rdma
