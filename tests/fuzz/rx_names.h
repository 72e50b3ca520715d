// The names the harnesses of a receive path use (shm reader, UDP receiver, RDMA UD source,
// receive window): the descriptors they drain into, the reliability and core layers, the input
// reader. A harness brings them in with `using namespace pollux::fuzz::rx_names;`.
#pragma once

#include "core/frame.h"
#include "tests/fuzz/fuzz_util.h"
#include "transport/reliability/wire.h"
#include "transport/transport.h"

namespace pollux::fuzz::rx_names {

namespace core = pollux::core;
namespace rel = pollux::transport::reliability;
using pollux::fuzz::FuzzInput;
using pollux::transport::RxDesc;
using pollux::transport::RxKind;
using u64 = std::uint64_t;

}  // namespace pollux::fuzz::rx_names
