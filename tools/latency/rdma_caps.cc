#include "tools/latency/rdma_caps.h"

#include "absl/strings/str_format.h"

#if defined(POLLUX_HAVE_RDMA)
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>

#include "transport/rdma/device.h"
#endif

namespace pollux::latency {

std::string rdma_completion_timestamp_note(const core::Config& cfg) {
#if !defined(POLLUX_HAVE_RDMA)
  (void)cfg;
  return "not measured by this version (built without the RDMA transport: no device to ask about completion "
         "timestamps)";
#else
  absl::StatusOr<std::string> name = transport::rdma::resolve_device_name(cfg.rdma, cfg.runtime.device);
  if (!name.ok()) {
    return absl::StrFormat("not measured by this version (no RDMA device to ask about completion timestamps: %s)",
                           std::string(name.status().message()));
  }
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    return absl::StrFormat("not measured by this version (ibv_get_device_list: %s)", std::strerror(errno));
  }
  std::string note = absl::StrFormat("not measured by this version (device %s not found by ibv_get_device_list)", *name);
  for (int i = 0; i < n; ++i) {
    if (*name != ibv_get_device_name(list[i])) continue;
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) {
      note = absl::StrFormat("not measured by this version (ibv_open_device(%s): %s)", *name, std::strerror(errno));
      break;
    }
    ibv_device_attr_ex attr{};
    const int rc = ibv_query_device_ex(ctx, nullptr, &attr);
    if (rc != 0) {
      note = absl::StrFormat("not measured by this version (ibv_query_device_ex(%s): %s)", *name, std::strerror(rc));
    } else if (attr.completion_timestamp_mask == 0) {
      note = absl::StrFormat("device %s does not offer completion timestamps (completion_timestamp_mask = 0): host "
                             "and NIC time cannot be split on it",
                             *name);
    } else {
      note = absl::StrFormat("not measured by this version: device %s offers completion timestamps (mask 0x%x, "
                             "hca_core_clock %d kHz) but the transport does not create its CQs with "
                             "IBV_WC_EX_WITH_COMPLETION_TIMESTAMP yet",
                             *name, attr.completion_timestamp_mask, attr.hca_core_clock);
    }
    ibv_close_device(ctx);
    break;
  }
  ibv_free_device_list(list);
  return note;
#endif
}

}  // namespace pollux::latency
