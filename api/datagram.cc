#include "pollux/datagram.h"

#include <arpa/inet.h>
#include <time.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "transport/transport.h"

namespace pollux {

namespace detail {
class DatagramReceiverImpl {
 public:
  std::unique_ptr<transport::DatagramSource> source;
  transport::RawDatagram raw[DatagramReceiver::kMaxBatch];
};
}  // namespace detail

DatagramReceiver::DatagramReceiver(std::unique_ptr<detail::DatagramReceiverImpl> impl) : impl_(std::move(impl)) {}
DatagramReceiver::~DatagramReceiver() = default;

absl::StatusOr<std::unique_ptr<DatagramReceiver>> DatagramReceiver::open(const DatagramReceiverOptions& options) {
  transport::DatagramSourceOptions o;
  o.ifname = options.interface;
  o.xdp_mode = options.xdp_mode;
  o.queue = options.queue;
  o.frames = options.frames;
  if (o.frames < 16 || (o.frames & (o.frames - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("AF_XDP frames: %u is not a power of two >= 16", o.frames));
  }
  auto source = transport::make_xdp_datagram_source(o);
  if (!source.ok()) return source.status();
  auto impl = std::make_unique<detail::DatagramReceiverImpl>();
  impl->source = std::move(*source);
  return std::unique_ptr<DatagramReceiver>(new DatagramReceiver(std::move(impl)));
}

absl::StatusOr<std::uint32_t> DatagramReceiver::add(std::string_view address_port, std::string_view source) {
  const std::size_t colon = address_port.rfind(':');
  std::uint32_t port = 0;
  in_addr addr{};
  if (colon == std::string_view::npos || !absl::SimpleAtoi(std::string(address_port.substr(colon + 1)), &port) ||
      port == 0 || port > 65535 || inet_pton(AF_INET, std::string(address_port.substr(0, colon)).c_str(), &addr) != 1) {
    return absl::InvalidArgumentError(absl::StrFormat("expected IPV4:PORT, got \"%s\"", address_port));
  }
  in_addr src{};
  if (!source.empty() && inet_pton(AF_INET, std::string(source).c_str(), &src) != 1) {
    return absl::InvalidArgumentError(absl::StrFormat("source: expected an IPv4 address, got \"%s\"", source));
  }
  return impl_->source->add(addr.s_addr, htons(static_cast<std::uint16_t>(port)), src.s_addr);
}

std::uint32_t DatagramReceiver::peek(std::uint32_t max) noexcept {
  const std::uint32_t n = impl_->source->peek(impl_->raw, max < kMaxBatch ? max : kMaxBatch);
  if (n == 0) return 0;
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  const std::int64_t now = std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
  for (std::uint32_t i = 0; i < n; ++i) {
    const transport::RawDatagram& r = impl_->raw[i];
    batch_[i] = Datagram{{r.data, r.len}, r.line, r.src_addr, r.src_port, now, false};
  }
  return n;
}

void DatagramReceiver::release() noexcept { impl_->source->release(); }
int DatagramReceiver::fd() const noexcept { return impl_->source->fd(); }
bool DatagramReceiver::pending() const noexcept { return impl_->source->pending(); }
std::string DatagramReceiver::describe() const { return impl_->source->describe(); }

DatagramReceiverStats DatagramReceiver::stats() noexcept {
  const transport::DatagramSourceStats s = impl_->source->stats();
  return DatagramReceiverStats{s.frames, s.malformed, s.partial_checksums, s.unmatched, s.kernel_dropped};
}

}  // namespace pollux
