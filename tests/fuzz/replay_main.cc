// Replays inputs through a harness without libFuzzer: the normal (g++) build links every
// harness with this main and ctest runs it over the harness's seed corpus and committed
// regression inputs, so each test run re-checks them (tests/fuzz/README.md).
//
//   fuzz_<harness>_replay PATH...   PATH: a file, or a folder whose regular files are replayed
//                                   in name order (not recursively)
// Exit status 0 when every input ran; a violated invariant or a sanitizer report aborts with
// the path of the input printed just before.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

bool replay(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", p.c_str());
    return false;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::fprintf(stderr, "replay %s (%zu bytes)\n", p.c_str(), bytes.size());
  // A heap copy of exactly the input's size, as libFuzzer passes it, so over-reads are caught.
  std::vector<std::uint8_t> copy(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(copy.empty() ? nullptr : copy.data(), copy.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: %s PATH...   (files, or folders of input files)\n", argv[0]);
    return argc < 2 ? 2 : 0;
  }
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::size_t n = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path p(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      std::vector<std::filesystem::path> files;
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
      std::sort(files.begin(), files.end());
      for (const auto& f : files) {
        if (!replay(f)) return 1;
        ++n;
      }
    } else if (std::filesystem::is_regular_file(p, ec)) {
      if (!replay(p)) return 1;
      ++n;
    } else {
      std::fprintf(stderr, "%s: no such file or folder\n", argv[i]);
      return 1;
    }
  }
  std::fprintf(stderr, "%s: %zu input(s) replayed, no invariant violated\n", argv[0], n);
  return 0;
}
