// The Status of a failed system call on a recording's files: the errno's code, and
// "<what>: <strerror> (errno N)".
#pragma once

#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pollux::core::archive {

inline std::string errno_text(int e) { return absl::StrCat(std::strerror(e), " (errno ", e, ")"); }

inline absl::Status io_error(int e, const std::string& what) {
  return absl::Status(absl::ErrnoToStatusCode(e), absl::StrCat(what, ": ", errno_text(e)));
}

}  // namespace pollux::core::archive
