#!/usr/bin/env python3
"""A Python subscriber on shm with Subscriber.poll_batch, 32-byte messages, next to the C++
subscriber's cost measured in the same run.

    PYTHONPATH=build/python /usr/bin/python3 bench/python/poll_batch_bench.py [--runs 3] [--count N]

Per run:
  cpp     pollux-bench-shm --cases tput: C++ publisher process -> C++ subscriber process, inline
          mode, back-pressure, 32-byte messages; msg/s at the subscriber and ns per message.
  live    pollux-test-peer pub (C++, inline, back-pressure) -> this process's Python subscriber
          calling poll_batch(BATCH) in a loop; the consumer counts messages (len(batch)) and
          checks the batch's last sequence. Both processes run at once (2 vCPUs: one each).
  drain   the same publisher writes DRAIN messages into a log large enough to hold them all,
          and exits; then the Python subscriber drains them: the Python side's cost alone.
  iter    as drain, but the consumer touches every message in Python (`for v in batch`): what
          a per-message Python loop costs on top.
Messages are checked complete (the last sequence equals the count, nothing lost).
"""

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import pollux

ROOT = Path(__file__).resolve().parents[2]


def config(name, log_size):
    return (
        f'[runtime]\nname = "{name}"\nthreading = "inline"\nidle = "yield"\ncounters = false\n'
        f'[shm]\nlog_size = "{log_size}"\nflow_control = "backpressure"\n'
    )


def cpp_tput(bench_shm, count):
    out = subprocess.run([bench_shm, "--cases", "tput", "--count", str(max(1, count // 100)), "--runs", "1"],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    m = re.search(r"throughput\s+([\d.]+) million msgs/s \((\d+) messages, inline, backpressure, offer\)", out)
    if not m:
        raise RuntimeError(f"no throughput line in pollux-bench-shm's output:\n{out}")
    return float(m.group(1)) * 1e6


def start_publisher(peer, cfg, count):
    return subprocess.Popen([peer, "pub", "--config", cfg, "--topic", "bench", "--count", str(count), "--size", "32",
                             "--timeout", "60"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def drain(sub, count, batch, per_message, step=None, got=0):
    """Polls until `count` messages came (`got` of them already); returns seconds from the
    first message polled here to the last."""
    last, t0, start = 0, None, got
    deadline = time.monotonic() + 120
    while got < count:
        b = sub.poll_batch(batch)
        n = len(b)
        if n == 0:
            if step is not None:
                step()
            if time.monotonic() > deadline:
                raise RuntimeError(f"stalled at {got} of {count} messages")
            time.sleep(0)  # 2 vCPUs: give the publisher the core
            continue
        if t0 is None:
            t0 = time.perf_counter()
        if per_message:
            for _ in b:
                got += 1
        else:
            got += n
        last = b.sequences[n - 1]
    t = time.perf_counter() - t0
    if last != count or sub.messages_lost != 0:
        raise RuntimeError(f"incomplete: last sequence {last} of {count}, lost {sub.messages_lost}")
    return t, got - start


def python_run(peer, count, batch, mode, tag):
    name = f"pybench-{os.getpid()}-{tag}"
    # live: the C++ bench's log size; drain/iter: every message fits (64 bytes a frame).
    # (a power of two, as shm.log_size must be).
    log = "16MiB" if mode == "live" else f"{max(16, 1 << (count * 128 >> 20).bit_length())}MiB"
    cfg = Path(f"/tmp/{name}.toml")
    cfg.write_text(config(name, log))
    try:
        with pollux.Context(cfg) as ctx:
            sub = ctx.subscriber("bench")
            pub = start_publisher(peer, cfg, count)
            if mode == "live":
                secs, n = drain(sub, count, batch, False, step=lambda: pub.poll())
            else:
                # Polls (one message at most at a time) until connected: the subscriber becomes
                # known by polling in inline mode; then the publisher writes everything into the
                # log and exits before the drain starts.
                first = 0
                while not sub.is_connected and pub.poll() is None:
                    first += len(sub.poll_batch(1))
                    time.sleep(0.001)
                while pub.poll() is None:
                    time.sleep(0.01)
                secs, n = drain(sub, count, batch, mode == "iter", got=first)
            out, _ = pub.communicate(timeout=120)
            if pub.returncode != 0:
                raise RuntimeError(f"pollux-test-peer pub failed ({pub.returncode}):\n{out}")
            return n / secs
    finally:
        cfg.unlink(missing_ok=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--count", type=int, default=5_000_000, help="messages of the live and cpp cases")
    ap.add_argument("--drain", type=int, default=1_000_000, help="messages of the drain and iter cases")
    ap.add_argument("--batch", type=int, default=4096, help="poll_batch limit")
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin"), help="folder of pollux-test-peer, pollux-bench-shm")
    ap.add_argument("--json", help="also write one JSON line per run to this file")
    a = ap.parse_args()
    peer, bench_shm = f"{a.bin}/pollux-test-peer", f"{a.bin}/pollux-bench-shm"
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, kernel {platform.release()}, "
          f"Python {platform.python_version()}, pollux {pollux.__version__}")
    print(f"32-byte messages over shm, inline mode, back-pressure; poll_batch({a.batch})")
    rows = []
    for r in range(1, a.runs + 1):
        cpp = cpp_tput(bench_shm, a.count)
        live = python_run(peer, a.count, a.batch, "live", f"{r}l")
        dr = python_run(peer, a.drain, a.batch, "drain", f"{r}d")
        it = python_run(peer, a.drain, a.batch, "iter", f"{r}i")
        row = {"run": r, "cpp_msgs_per_s": cpp, "py_live_msgs_per_s": live, "py_drain_msgs_per_s": dr,
               "py_iter_msgs_per_s": it}
        rows.append(row)
        print(f"run {r}: C++ sub {cpp / 1e6:5.1f} M msg/s ({1e9 / cpp:5.1f} ns/msg) | Python poll_batch live "
              f"{live / 1e6:5.2f} M msg/s ({1e9 / live:5.1f} ns/msg), drain {dr / 1e6:5.2f} M msg/s "
              f"({1e9 / dr:5.1f} ns/msg) | per-message Python loop {it / 1e6:5.2f} M msg/s ({1e9 / it:5.1f} ns/msg)")
        sys.stdout.flush()
    if a.json:
        with open(a.json, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
