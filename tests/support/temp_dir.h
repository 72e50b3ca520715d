// A directory of its own for a test, made under /tmp and removed with everything in it when the
// object goes (a mount on it must be gone first).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace pollux::testing {

class TempDir {
 public:
  explicit TempDir(const char* prefix = "pollux-test") {
    std::string tmpl = std::string("/tmp/") + prefix + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // "" when mkdtemp failed.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace pollux::testing
