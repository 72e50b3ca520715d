// Process identity for files shared between processes (stream segments, counters files, CPU
// claims): a pid plus the process's start time, so a reused pid is not taken for the process
// that wrote it, plus a hash of the boot id, so a file written before a reboot is not either.
#pragma once

#include <cstdint>
#include <string>

namespace pollux::core {

// Start time of `pid` in clock ticks after boot (/proc/<pid>/stat field 22); 0 when unknown
// (no /proc, hidepid, no such process).
std::uint64_t process_start_time(int pid) noexcept;
// This process's (cached per pid: a forked child has its own).
std::uint64_t self_start_time() noexcept;
// FNV-1a of /proc/sys/kernel/random/boot_id; 0 when unknown.
std::uint64_t boot_id_hash() noexcept;

// The process `pid` runs: it exists, is not a zombie (a killed process whose parent has not
// reaped it yet still answers kill(pid, 0), and holds no resources any more) and, when `start`
// is not 0, has that start time. Unknown start times (hidepid) trust the pid.
bool process_alive(int pid, std::uint64_t start = 0) noexcept;
// process_alive, and the file was written during this boot (boot 0: unknown, not checked).
bool process_alive_since_boot(int pid, std::uint64_t start, std::uint64_t boot) noexcept;

// The command name of `pid` (/proc/<pid>/comm, without the newline), "" when unknown.
std::string process_name(int pid);

// Wall-clock time (CLOCK_REALTIME) in ns since the epoch.
std::int64_t wall_clock_ns() noexcept;
// "2026-12-01T14:03:07.123Z" (UTC, milliseconds) for a wall_clock_ns() value.
std::string format_wall_clock(std::int64_t ns);

}  // namespace pollux::core
