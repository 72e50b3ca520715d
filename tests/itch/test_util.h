// Helpers shared by the ITCH tests.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "itch/generator.h"
#include "itch/random.h"

namespace pollux::itch::testing {

// One run of a program of ours through the shell: its exit code and what it printed (stdout
// and stderr together). For the command-line contract tests.
struct Cli {
  int rc;
  std::string out;
};
inline Cli RunProgram(const std::string& bin, const std::string& args) {
  const std::string log = ::testing::TempDir() + "/cli_" + std::to_string(getpid()) + ".txt";
  const int st = std::system((bin + " " + args + " >" + log + " 2>&1").c_str());
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  std::remove(log.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, ss.str()};
}

// Bytes from a hex string; spaces are ignored so messages can be written field by field:
//   Hex("41 0002 0003 0a1b2c3d4e5f ...")
inline std::vector<uint8_t> Hex(std::string_view hex) {
  std::vector<uint8_t> out;
  int hi = -1;
  for (const char c : hex) {
    if (c == ' ') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) throw std::invalid_argument("bad hex");
    const int v = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10;
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<uint8_t>(hi << 4 | v));
      hi = -1;
    }
  }
  if (hi >= 0) throw std::invalid_argument("odd hex length");
  return out;
}

// Prepends a BinaryFILE length prefix (`length`, by default the body size).
inline std::vector<uint8_t> Framed(const std::vector<uint8_t>& body, int length = -1) {
  const uint16_t len = length < 0 ? static_cast<uint16_t>(body.size()) : static_cast<uint16_t>(length);
  // Sized up front: GCC 12 reports a bogus -Warray-bounds for insert() into a tiny vector.
  std::vector<uint8_t> out(body.size() + 2);
  out[0] = static_cast<uint8_t>(len >> 8);
  out[1] = static_cast<uint8_t>(len);
  std::copy(body.begin(), body.end(), out.begin() + 2);
  return out;
}

inline void Append(std::vector<uint8_t>& to, const std::vector<uint8_t>& bytes) {
  const size_t at = to.size();
  to.resize(at + bytes.size());
  std::copy(bytes.begin(), bytes.end(), to.begin() + static_cast<ptrdiff_t>(at));
}

// One random edit of `buf` at `at` (< buf.size()), of kind 0..4: overwrite the byte, flip one of
// its bits, insert a byte before it, erase it, or cut the buffer there. For the tests that feed
// a parser damaged input; `rng` supplies the new byte or bit.
inline void EditBytes(std::vector<uint8_t>& buf, std::size_t at, std::uint64_t kind, Xoshiro256& rng) {
  switch (kind) {
    case 0:
      buf[at] = static_cast<uint8_t>(rng.next());
      break;
    case 1:
      buf[at] ^= static_cast<uint8_t>(1u << rng.below(8));
      break;
    case 2:
      buf.insert(buf.begin() + static_cast<std::ptrdiff_t>(at), static_cast<uint8_t>(rng.next()));
      break;
    case 3:
      buf.erase(buf.begin() + static_cast<std::ptrdiff_t>(at));
      break;
    case 4:
      buf.resize(at);
      break;
  }
}

// Generator options for `symbols` symbols, `messages` messages and `seed` (the rest as default).
inline GeneratorOptions GenOptions(uint32_t symbols, uint64_t messages, uint64_t seed) {
  GeneratorOptions o;
  o.symbols = symbols;
  o.messages = messages;
  o.seed = seed;
  return o;
}

}  // namespace pollux::itch::testing
