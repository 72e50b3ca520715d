// What a run leaves in a shm directory: the names of its files, less the clock calibration.
// `pollux-clock` is the host-wide TSC calibration every Pollux process shares through
// runtime.shm_dir (core/clock.h), kept on purpose so later processes agree on the conversion;
// it belongs to no stream or process, so a test of what a run leaves behind ignores it.
#pragma once

#include <dirent.h>

#include <string>
#include <vector>

namespace pollux::testing {

// In directory order; none when dir cannot be opened.
inline std::vector<std::string> shm_dir_files(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != ".." && n != "pollux-clock") names.push_back(n);
    }
    closedir(d);
  }
  return names;
}

}  // namespace pollux::testing
