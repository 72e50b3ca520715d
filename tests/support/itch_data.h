// The ITCH file the replay tests use: the RITCH sample (../shared/data/itch/, 12,012 messages)
// when it is there, else the project's own BinaryFILE fixture (tests/data). The paths come from
// pollux_itch_data() in tests/CMakeLists.txt.
#pragma once

#include <fstream>
#include <string>

namespace pollux::testing {

inline std::string itch_sample_or_fixture() {
  if (std::ifstream(POLLUX_ITCH_SAMPLE_FILE).good()) return POLLUX_ITCH_SAMPLE_FILE;
  return POLLUX_ITCH_FIXTURE_FILE;
}

}  // namespace pollux::testing
