"""What the pollux Python tests share: configurations, UDP ports, the C++ peer, bounded waits.

Run by ctest (tests/python/CMakeLists.txt) with PYTHONPATH=build/python and POLLUX_TEST_PEER
naming tests/support's pollux-test-peer, the C++ side of the cross-language cases.
"""

import itertools
import os
import socket
import subprocess
import time

import pytest

import pollux

PEER = os.environ.get("POLLUX_TEST_PEER", "")

_names = itertools.count()


def runtime_name(tag):
    """A runtime.name unique to this test process and call: shm files are named after it, and
    both sides of a cross-process shm stream must use the same one."""
    return f"py{tag}-{os.getpid()}-{next(_names)}"


def shm_config(name, threading="inline"):
    return (
        f'[runtime]\nname = "{name}"\nthreading = "{threading}"\nidle = "yield"\ncounters = false\n'
        '[shm]\nflow_control = "backpressure"\nlog_size = "1MiB"\n'
    )


class _PortBlock:
    """A block of UDP ports below the kernel's ephemeral range, held for this process the way
    tests/support/udp_ports.h does: every port binds (no one holds it) and an abstract AF_UNIX
    socket named after the block marks it ours, so two test processes never take the same one.
    The name differs from udp_ports.h's only in its prefix, and the search starts elsewhere."""

    SIZE = 32

    def __init__(self):
        lo, _ = 32768, 60999
        try:
            with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
                lo = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
        first, last = 20000, lo - 1
        blocks = (last - first + 1) // self.SIZE
        for k in range(blocks):
            base = first + ((os.getpid() * 7 + k) % blocks) * self.SIZE
            mark = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                mark.bind(f"\0pollux-test-udp-ports-{base}")
            except OSError:
                mark.close()
                continue
            if self._all_free(base):
                self.base, self._mark, self._next = base, mark, 0
                return
            mark.close()
        raise RuntimeError(f"no free block of {self.SIZE} UDP ports in {first}-{last}")

    def _all_free(self, base):
        held = []
        try:
            for p in range(base, base + self.SIZE):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                held.append(s)
                s.bind(("0.0.0.0", p))
            return True
        except OSError:
            return False
        finally:
            for s in held:
                s.close()

    def take(self):
        if self._next >= self.SIZE:
            raise RuntimeError("the test process used up its UDP port block")
        self._next += 1
        return self.base + self._next - 1


_ports = None


def udp_port():
    global _ports
    if _ports is None:
        _ports = _PortBlock()
    return _ports.take()


def udp_config(name, port, threading="inline"):
    group = f"239.255.{1 + os.getpid() % 200}.{1 + (os.getpid() // 200) % 200}"
    return (
        f'[runtime]\nname = "{name}"\nthreading = "{threading}"\nidle = "yield"\ncounters = false\n'
        f'[transport]\nkind = "udp"\n[udp]\naddress = "{group}"\nport = {port}\ninterface = "lo"\nttl = 1\n'
        "status_interval_ms = 20\nheartbeat_interval_us = 2000\nlinger_ms = 200\n"
    )


def payload(seq, size):
    """tests/support/payload.h's payload of message `seq`: its first 8 bytes are seq
    (little-endian), byte i after that is (seq + i) & 0xff - what pollux-test-peer checks."""
    head = seq.to_bytes(8, "little")
    return head + bytes((seq + i) & 0xFF for i in range(8, size))


def wait_until(cond, what, seconds=60.0, step=None):
    """Calls `step` (or sleeps 1 ms) until cond() holds; fails naming `what` after `seconds`.
    Bounded and never decides by timing: the limit is only a hang guard."""
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {seconds}s waiting for {what}")
        if step is None or not step():
            time.sleep(0.001)


@pytest.fixture
def peer():
    """Starts pollux-test-peer processes; kills what is still running at the end."""
    if not PEER:
        pytest.skip("POLLUX_TEST_PEER is not set (run through ctest)")
    procs = []

    def start(*args):
        p = subprocess.Popen([PEER, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def finish(proc, timeout=120):
    """The peer's exit code and output, printed so a failure shows what it said."""
    out, _ = proc.communicate(timeout=timeout)
    print(f"--- {' '.join(proc.args)} (exit {proc.returncode})\n{out}")
    return proc.returncode, out


def write(tmp_path, text, name="cfg.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


__all__ = ["pollux"]
