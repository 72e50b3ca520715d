// memory: the locked-memory limit (checks_rdma.cc: only RDMA pins memory), hugepages for the
// buffer pool, transparent hugepages.
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/buffer_pool.h"
#include "tools/doctor/checks.h"

namespace pollux::doctor {
namespace {

using V = Verdict;

// "/proc/meminfo" keys -> values (the number only; kB where the file says so).
std::map<std::string, long long> meminfo(const HostFs& fs) {
  std::map<std::string, long long> out;
  for (absl::string_view l : absl::StrSplit(fs.text("/proc/meminfo").value_or(""), '\n')) {
    const std::size_t colon = l.find(':');
    if (colon == std::string_view::npos) continue;
    absl::string_view rest = absl::StripAsciiWhitespace(l.substr(colon + 1));
    rest = rest.substr(0, rest.find(' '));
    long long v = 0;
    if (absl::SimpleAtoi(rest, &v)) out[std::string(l.substr(0, colon))] = v;
  }
  return out;
}

// "always [madvise] never" -> "madvise".
std::string bracketed(const std::string& s) {
  const std::size_t a = s.find('['), b = s.find(']');
  return a != std::string::npos && b != std::string::npos && b > a ? s.substr(a + 1, b - a - 1) : s;
}

std::string mib(std::size_t bytes) { return absl::StrFormat("%.0f MiB", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

core::PoolOptions pool_options(const core::Config& cfg) {
  core::PoolOptions o;
  o.slot_size = cfg.pool.slot_size;
  o.slots = cfg.pool.slots;
  o.hugepages = cfg.pool.hugepages;
  o.numa_node = cfg.pool.numa_node;
  return o;
}

void check_memory(const Host& h, Report& r) {
  check_memlock(h, r);

  const core::PoolOptions po = pool_options(h.cfg);
  const std::string thp = bracketed(h.fs.line("/sys/kernel/mm/transparent_hugepage/enabled").value_or(""));
  const std::string thp_defrag = bracketed(h.fs.line("/sys/kernel/mm/transparent_hugepage/defrag").value_or(""));

  // Hugepages: the pool maps MAP_HUGETLB pages of the default size when pool.hugepages allows.
  std::map<std::string, long long> mi = meminfo(h.fs);
  const long long total = mi["HugePages_Total"], free_pages = mi["HugePages_Free"], size_kb = mi["Hugepagesize"];
  const std::size_t bytes = core::BufferPool::mapping_bytes(po, true);
  const long long need = size_kb > 0 ? static_cast<long long>((bytes + size_kb * 1024 - 1) / (size_kb * 1024)) : 0;
  const std::string value = absl::StrFormat(
      "%lld of %lld free (%lld kB pages); one pool (pool.slots %u x pool.slot_size %u) needs %lld (%s), "
      "pool.hugepages = %s",
      free_pages, total, size_kb, po.slots, po.slot_size, need, mib(bytes),
      po.hugepages == core::HugePages::kOn    ? "on"
      : po.hugepages == core::HugePages::kOff ? "off"
                                              : "auto");
  const std::string reserve = absl::StrFormat(
      "reserve pages: sysctl -w vm.nr_hugepages=%lld (one pool per process: add %lld per Pollux process; persist in "
      "/etc/sysctl.d/ or with hugepages=N on the kernel command line)",
      total - free_pages + need, need);
  if (size_kb <= 0) {
    r.add("memory", "hugepages", V::kInfo, "no hugetlb pages in this kernel (/proc/meminfo has no Hugepagesize)");
  } else if (po.hugepages == core::HugePages::kOff) {
    r.add("memory", "hugepages", V::kInfo, value);
  } else if (free_pages >= need) {
    r.add("memory", "hugepages", V::kOk, value);
  } else if (po.hugepages == core::HugePages::kOn) {
    r.add("memory", "hugepages", V::kFail, value,
          absl::StrCat("pool.hugepages = \"on\": a context will not start; ", reserve));
  } else {
    r.add("memory", "hugepages", V::kWarn, value,
          absl::StrCat("the pool falls back to 4 KiB pages (transparent hugepages if THP allows: see memory thp), "
                       "with more TLB misses; ",
                       reserve));
  }

  if (thp.empty()) {
    r.add("memory", "thp", V::kInfo, "no transparent hugepages in this kernel");
  } else if (thp == "never") {
    r.add("memory", "thp", free_pages >= need ? V::kInfo : V::kWarn,
          absl::StrFormat("enabled [%s], defrag [%s]", thp, thp_defrag),
          "a pool without hugetlb pages gets 4 KiB pages: echo madvise > /sys/kernel/mm/transparent_hugepage/enabled "
          "(Pollux asks for hugepages with MADV_HUGEPAGE; other programs are unaffected)");
  } else {
    r.add("memory", "thp", V::kOk,
          absl::StrFormat("enabled [%s], defrag [%s]: a pool on 4 KiB pages is madvised "
                          "MADV_HUGEPAGE",
                          thp, thp_defrag));
  }
}

}  // namespace pollux::doctor
