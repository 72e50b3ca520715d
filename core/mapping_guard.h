// Survives the truncation of a shared file mapping (a shm segment, a counters file) by another
// process. Touching a page of a MAP_SHARED mapping that lies beyond the file's end raises
// SIGBUS; without a handler the whole process dies (and every other process using the file).
//
// A mapping registered here is "guarded": the first SIGBUS on an address inside it replaces the
// whole range with private zero-filled anonymous memory (mmap MAP_FIXED from the signal
// handler), optionally stores a poison value into one word of it, counts the fault and returns,
// so the faulting load or store is retried and succeeds. The data path is untouched - no
// syscall, no check per message; the owner notices on its control path (faults() or its own
// fstat) and ends the stream cleanly.
//
// The handler is installed once, when the first mapping is guarded (sigaction, SA_SIGINFO). A
// SIGBUS that is not in a guarded mapping is passed to the handler that was installed before
// (SA_SIGINFO or plain), or, when that was SIG_DFL/SIG_IGN, re-raised with the default action so
// the process dies of SIGBUS as it would have without Pollux. An application that installs its
// own SIGBUS handler after creating a Context must chain to the previous one (the one sigaction
// returns) for faults it does not own, or truncated segments will kill it again.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pollux::core {

inline constexpr int kMaxGuardedMappings = 1024;

// Registers [base, base + len) (page aligned). `poison`, if not null, must lie inside the range:
// after a replacement `poison_value` is stored there (the shm log uses it to make the writer's
// tail look far ahead, so every view into the lost log is reported as overwritten). Returns an
// id for the other calls, or -1 when the table is full (the mapping then is not guarded).
int guard_mapping(void* base, std::size_t len, std::atomic<std::uint64_t>* poison = nullptr,
                  std::uint64_t poison_value = 0) noexcept;
// Before munmap(): faults in the range are no longer ours.
void unguard_mapping(int id) noexcept;
// Replaces the mapping with zero-filled private memory now (control path, e.g. once a truncation
// was seen by fstat), as the handler would. Idempotent. False if id is invalid or mmap failed.
bool neutralize_mapping(int id) noexcept;
// SIGBUS faults absorbed in this mapping (0 while the file is intact).
std::uint64_t mapping_faults(int id) noexcept;
// True once the range was replaced (by a fault or neutralize_mapping()).
bool mapping_neutralized(int id) noexcept;
// Total SIGBUS faults absorbed in guarded mappings by this process.
std::uint64_t guarded_faults_total() noexcept;

}  // namespace pollux::core
