// The tables of the small UDP setup on 127.0.0.1 that the UDP benchmarks (bench/udp) and the
// UDP wakeup tests share, so a change of what "loopback UDP" means is made once.
#pragma once

#include <string>

namespace pollux::tools {

// The [pool], [transport] and [udp] tables: `slots` pool slots without huge pages; UDP on
// 127.0.0.1, interface lo, a 1 MiB retransmit buffer and 256 receive buffers. More [udp] keys may
// follow it.
inline std::string loopback_udp_tables(int slots) {
  return "[pool]\nslots = " + std::to_string(slots) +
         "\nhugepages = \"off\"\n[transport]\nkind = \"udp\"\n[udp]\naddress = \"127.0.0.1\"\ninterface = \"lo\"\n"
         "retransmit_buffer = \"1MiB\"\nrx_buffers = 256\n";
}

}  // namespace pollux::tools
