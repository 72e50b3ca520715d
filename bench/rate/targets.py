#!/usr/bin/env python3
"""Checks the rate benchmark's targets on pollux-bench-rate --json output (one or more files,
one JSON object per line). Prints, per (transport, mode, rate):
  - adaptive's p50/p99 and CPU next to every static strategy's;
  - whether a static strategy dominates adaptive: better on p99 AND on CPU by more than 10 %
    (adaptive > 1.1 x the other on both), where CPU = the pollers' CPU in dedicated/shared mode
    (both processes) and the subscriber's application thread in inline mode (the app is the
    poller; the publisher's thread is the benchmark's sender, which spins on its schedule at
    >= 10k msg/s whatever the strategy).
    CPU below the measurement's resolution (one 10 ms tick per thread per window: < 2 % of a
    core apart over 1 s) is not counted as better;
    a point that lost messages counts as worse than any point that lost none;
  - at >= 100k msg/s: adaptive p50 and p99 over busy-spin's (target <= 1.1).
Several files (invocations): each run's figures are listed, and the verdict is taken on the
median over the runs of each strategy's p50, p99 and CPU (one run's p99 moves by 2x between
invocations on this machine, more than the differences between strategies at 1k-10k msg/s).

  bench/rate/targets.py sweep1.json [sweep2.json ...]   (each file may hold several --rounds)
"""
import json
import sys
from collections import defaultdict

STATIC = ["busy-spin", "yield", "backoff", "interrupt"]


def load(path):
    """{round: {(transport, mode, rate, strategy): point}} - one entry per --rounds round."""
    pts = defaultdict(dict)
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            o = json.loads(line)
            if o.get("kind") != "rate" or o.get("error"):
                continue
            key = (o.get("round", 1), o["transport"], o["mode"], o["rate_label"], o["strategy"])
            cpu = o["cpu_pct"]
            if o["mode"] == "inline":
                c = cpu["sub"]["app"]
            else:
                c = cpu["pub"]["pollers"] + cpu["sub"]["pollers"]
            window = max(cpu["pub"]["window_s"], 1e-9)
            pts[key[0]][key[1:]] = {
                "p50": o["latency_ns"]["p50"] / 1e3,
                "p99": o["latency_ns"]["p99"] / 1e3,
                "cpu": c,
                "res": 2 * 100.0 / 100.0 / window,  # two ticks of 10 ms, in % of a core
                "lost": o["lost"] + o.get("unsent", 0),
            }
    return pts


def worse(a, b):
    """True when a is worse than b on latency (loss first, then p99)."""
    if (a["lost"] > 0) != (b["lost"] > 0):
        return a["lost"] > 0
    return a["p99"] > 1.1 * b["p99"]


def dominated_by(ad, st):
    cpu_better = ad["cpu"] > 1.1 * st["cpu"] and ad["cpu"] - st["cpu"] > ad["res"]
    return worse(ad, st) and cpu_better


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def summarize(runs, g, strategy):
    pts = [r[g + (strategy,)] for r in runs if g + (strategy,) in r]
    if not pts:
        return None
    return {
        "p50": median([p["p50"] for p in pts]),
        "p99": median([p["p99"] for p in pts]),
        "cpu": median([p["cpu"] for p in pts]),
        "res": max(p["res"] for p in pts),
        "lost": median([p["lost"] for p in pts]),
        "n": len(pts),
        "p99_range": (min(p["p99"] for p in pts), max(p["p99"] for p in pts)),
        "cpu_range": (min(p["cpu"] for p in pts), max(p["cpu"] for p in pts)),
    }


def main(paths):
    runs = [r for p in paths for _, r in sorted(load(p).items())]
    groups = sorted({k[:3] for r in runs for k in r}, key=lambda g: (g[0], g[1], rate_order(g[2])))
    verdicts = defaultdict(list)
    for g in groups:
        print(f"\n{g[0]} {g[1]} {g[2]}")
        for i, r in enumerate(runs):
            row = [f"run {i + 1}:"]
            for s in ["adaptive"] + STATIC:
                if g + (s,) in r:
                    row.append(f"{s} {fmt(r[g + (s,)])}")
            print("  " + " | ".join(row))
        ad = summarize(runs, g, "adaptive")
        if ad is None:
            continue
        row = [f"median of {ad['n']}: adaptive {fmt(ad)}"]
        dom = []
        for s in STATIC:
            st = summarize(runs, g, s)
            if st is None:
                continue
            row.append(f"{s} {fmt(st)}")
            if dominated_by(ad, st):
                dom.append(s)
        print("  " + " | ".join(row))
        verdict = "dominated by " + ",".join(dom) if dom else "not dominated"
        extra = ""
        bs = summarize(runs, g, "busy-spin")
        if bs is not None and 1e5 <= rate_order(g[2]) < 1e12:
            r50 = ad["p50"] / bs["p50"] if bs["p50"] else float("inf")
            r99 = ad["p99"] / bs["p99"] if bs["p99"] else float("inf")
            ok = r50 <= 1.1 and r99 <= 1.1
            extra = f"; vs busy-spin p50 {r50:.2f}x p99 {r99:.2f}x ({'met' if ok else 'missed'})"
            verdicts["100k+ vs busy-spin " + ("met" if ok else "missed")].append(f"{g[0]}/{g[1]}/{g[2]}")
        print(f"    -> {verdict}{extra}")
        verdicts["dominated" if dom else "not dominated"].append(f"{g[0]}/{g[1]}/{g[2]}")
    print("\nsummary (on medians):")
    for k, v in sorted(verdicts.items()):
        print(f"  {k}: {len(v)}" + ("" if k.startswith("not") or k.endswith(" met") else ": " + ", ".join(v)))


def rate_order(label):
    if label == "burst":
        return 1e12
    mult = {"k": 1e3, "K": 1e3, "M": 1e6, "m": 1e6}
    if label[-1] in mult:
        return float(label[:-1]) * mult[label[-1]]
    return float(label)


def fmt(p):
    lost = f" LOST {p['lost']}" if p["lost"] else ""
    return f"{p['p50']:.1f}/{p['p99']:.1f} us {p['cpu']:.0f}%{lost}"


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) >= 2 else 64)
    main(sys.argv[1:])
