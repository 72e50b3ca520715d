#!/usr/bin/env python3
"""summary.md of a bench/run-all.sh results folder (docs/BENCHMARKS.md explains its figures).

    run-all-summary.py DIR                 the summary of DIR, as Markdown, to stdout
    run-all-summary.py --rdma-json FILE    tests/rdma/bench-pingpong.sh's table (FILE) as JSON lines

Reads the JSON-lines files of the benchmark programs (a header object with "program" and
"machine", then objects with "case" or "ratio"), bench/rate's sweep.json / rtt.json, and
pollux-latency's one JSON object per file. Figures it cannot read are listed, not guessed.
"""
import json
import os
import statistics
import sys

# (step, what it measures, its floor), in run order.
PROGRAMS = [
    ("ring", "SPSC descriptor rings between two pinned threads: throughput; round trip through two rings",
     "bare cache-line ping-pong between the same two threads"),
    ("shm", "shared memory between two processes: round trip (RTT) through the public API; one-way throughput",
     "bare cache-line ping-pong between the two processes"),
    ("udp", "UDP over 127.0.0.1: RTT through the API, the endpoints and the poller source; multicast throughput",
     "bare UDP sockets, same run: busy (spin on recv), block (blocking recv), epoll (sleep in epoll_wait)"),
    ("shm-wakeup", "shm interrupt mode: RTT/2 when every message wakes a sleeper; cost of offer()",
     "bare futex ping-pong (inline) / futex chain (dedicated topology)"),
    ("udp-wakeup", "UDP interrupt-mode poller: offer -> frame in the subscriber ring, one message every 200 us",
     "bare epoll wakeups on an eventfd / a UDP socket"),
    ("feed", "pollux-feed end to end (publisher process -> subscriber rebuilding books, shm)",
     "none (the application's figure; the shm floor is pollux-bench-shm's)"),
    ("itch", "ITCH 5.0 framing, decoding and books on one core", "none (CPU-bound)"),
    ("rdma", "Pollux RC ping-pong in the Soft-RoCE VM, RTT/2 medians (emulated: read the ratios, not the times)",
     "perftest ib_send_lat, same VM boot, interleaved"),
]


def read_lines(path):
    """JSON lines of `path`: (objects, error)."""
    objs = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    objs.append(json.loads(line))
    except (OSError, ValueError) as e:
        return objs, f"{os.path.basename(path)}: {e}"
    return objs, None


def us(ns):
    return "" if ns is None else f"{ns / 1e3:.3f}"


def rate(v):
    if v is None:
        return ""
    return f"{v / 1e6:.2f} M/s" if v >= 1e5 else f"{v:.0f}/s"


def ratio(v):
    return "" if v is None else f"**{v:.2f}x**"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def headline(step, cases):
    """Rows of the headline table: every case with a floor (median ratio over its runs), every
    throughput case (median over its runs)."""
    rows, by_case = [], {}
    for o in cases:
        by_case.setdefault(o["case"], []).append(o)
    for name, runs in by_case.items():
        if any(r.get("floor") for r in runs):
            # Runs whose floor was measured (a run without one, e.g. ib_send_lat's n/a, says nothing).
            runs = [r for r in runs if r.get("ratio_p50") is not None] or runs
            rows.append([step, name, us(median(r.get("p50_ns") for r in runs)), runs[0]["floor"],
                         us(median(r.get("floor_p50_ns") for r in runs)),
                         ratio(median(r.get("ratio_p50") for r in runs)), "", len(runs)])
        elif runs[0].get("msgs_per_s") is not None and runs[0].get("p50_ns") is None:
            rows.append([step, name, "", "", "", "", rate(median(r.get("msgs_per_s") for r in runs)), len(runs)])
    return rows


def program_section(step, desc, floor, objs):
    cases = [o for o in objs if "case" in o]
    ratios = [o for o in objs if "ratio" in o]
    lines = [f"### {step}: {desc}", "", f"Floor: {floor}."]
    hdr = objs[0] if objs and "program" in objs[0] else {}
    if hdr.get("argv"):
        lines.append(f"Command: `{hdr['argv']}`")
    lines.append("")
    rows = []
    for o in cases:
        rows.append([o["case"], o.get("run", ""), o.get("count", ""), us(o.get("p50_ns")), us(o.get("p99_ns")),
                     us(o.get("p99_9_ns")), us(o.get("max_ns")), rate(o.get("msgs_per_s")), o.get("floor", ""),
                     us(o.get("floor_p50_ns")), ratio(o.get("ratio_p50"))])
    if rows:
        lines.append(table(["case", "run", "n", "p50 us", "p99 us", "p99.9 us", "max us", "throughput", "floor",
                            "floor p50 us", "p50 / floor"], rows))
    for o in ratios:
        parts = [f"{k} {v:.2f}x" for k, v in o.items() if k != "ratio" and isinstance(v, (int, float))]
        lines.append(f"- ratio {o['ratio']}: " + ", ".join(parts))
    extra = [o for o in cases if o.get("p50_ns_per_offer") is not None]
    for o in extra:
        lines.append(f"- {o['case']}: p50 {o['p50_ns_per_offer']:.2f} ns per offer, p99 {o.get('p99_ns_per_offer', 0):.2f}")
    return "\n".join(lines) + "\n"


def rate_section(d):
    out = []
    if not os.path.isdir(os.path.join(d, "rate")):
        return "", []
    sweep, err1 = read_lines(os.path.join(d, "rate", "sweep.json"))
    rtt, err2 = read_lines(os.path.join(d, "rate", "rtt.json"))
    if not sweep and not rtt:
        return "", [e for e in (err1, err2) if e]
    out += ["### rate: open-loop fixed-rate sweep (coordinated omission corrected), CPU% of the pollers", "",
            "Floor: none (latency from the scheduled send time; compare strategies and rates).", ""]
    rows = []
    for o in sweep:
        lat, cpu = o.get("latency_ns", {}), o.get("cpu_pct", {})
        rows.append([o.get("transport"), o.get("mode"), o.get("strategy"), o.get("rate_label"), us(lat.get("p50")),
                     us(lat.get("p99")), us(lat.get("max")), cpu.get("pub", {}).get("pollers", ""),
                     cpu.get("sub", {}).get("pollers", ""), o.get("lost", ""), o.get("error", "")])
    if rows:
        out.append(table(["transport", "mode", "strategy", "rate", "p50 us", "p99 us", "max us", "pub pollers CPU%",
                          "sub pollers CPU%", "lost", "error"], rows))
        out.append("")
    rows = []
    for o in rtt:
        r, cpu = o.get("rtt_ns", {}), o.get("cpu_pct", {})
        rows.append([o.get("transport"), o.get("mode"), o.get("strategy"), r.get("count", ""), us(r.get("p50")),
                     us(r.get("p99")), cpu.get("ping", {}).get("pollers", ""), cpu.get("pong", {}).get("pollers", ""),
                     o.get("timeouts", ""), o.get("error", "")])
    if rows:
        out += ["RTT mode (one round trip every few ms, dedicated pollers):", ""]
        out.append(table(["transport", "mode", "strategy", "n", "RTT p50 us", "RTT p99 us", "ping pollers CPU%",
                          "pong pollers CPU%", "timeouts", "error"], rows))
    idle, err3 = read_lines(os.path.join(d, "rate", "idle.json")) if os.path.exists(
        os.path.join(d, "rate", "idle.json")) else ([], None)
    rows = []
    for o in idle:
        cpu = o.get("cpu_pct", {})
        rows.append([o.get("transport"), o.get("mode"), o.get("strategy"), o.get("idle_s", ""),
                     cpu.get("pub", {}).get("pollers", ""), cpu.get("sub", {}).get("pollers", ""), o.get("error", "")])
    if rows:
        out += ["", "Idle mode (no traffic; what the pollers burn):", ""]
        out.append(table(["transport", "mode", "strategy", "seconds", "pub pollers CPU%", "sub pollers CPU%", "error"],
                         rows))
    try:
        out += ["", "targets.txt (bench/rate/targets.py):", "", "```", open(os.path.join(d, "rate", "targets.txt")).read().strip(),
                "```"]
    except OSError:
        pass
    return "\n".join(out) + "\n", [e for e in (err1, err2, err3) if e]


def latency_section(d):
    out, errors = [], []
    for name in sorted(os.listdir(d)):
        if not (name.startswith("latency-") and name.endswith(".json")):
            continue
        try:
            with open(os.path.join(d, name)) as f:
                o = json.load(f)
        except (OSError, ValueError) as e:
            errors.append(f"{name}: {e}")
            continue
        e2e, untraced = o.get("end_to_end", {}), o.get("untraced", {})
        out += [f"### pollux-latency ({name}): transport {o.get('transport', '?')}", ""]
        rows = [[s.get("name"), us(s.get("mean_ns")), us(s.get("p50_ns")), us(s.get("p99_ns")),
                 "" if s.get("share_pct") is None else f"{s['share_pct']:.1f}%"] for s in o.get("stages", [])]
        rows.append(["**end to end**", us(e2e.get("mean_ns")), us(e2e.get("p50_ns")), us(e2e.get("p99_ns")), ""])
        out.append(table(["stage", "mean us", "p50 us", "p99 us", "share"], rows))
        u = untraced.get("rtt_half_p50_ns")
        if u:
            out.append(f"\nUntraced RTT/2 p50 {us(u)} us; traced end-to-end p50 / untraced = "
                       f"{ratio(e2e.get('p50_ns', 0) / u if e2e.get('p50_ns') else None)}")
        for key, what in (("perturbation_pct", "tracing perturbs the p50 by"), ("coverage_pct", "the stages cover")):
            if o.get(key) is not None:
                out.append(f"- {what} {o[key]:.1f}%")
        fl = o.get("floor") or {}
        if fl.get("rtt_half_p50_ns") and u:
            out.append(f"- floor ({fl.get('kind', '?')}): RTT/2 p50 {us(fl['rtt_half_p50_ns'])} us; untraced / floor = "
                       f"{ratio(u / fl['rtt_half_p50_ns'])}")
        for ab in o.get("ab", []):
            out.append(f"- A/B {ab.get('key')}: {ab.get('a')} -> {ab.get('b')}: delta {ab.get('delta_ns')} ns "
                       f"over {len(ab.get('pairs', []))} pairs")
        out.append("")
    return "\n".join(out), errors


def summary(d):
    out = ["# Benchmark results", ""]
    try:
        machine = open(os.path.join(d, "machine.txt")).read().split("\n--- ")[0].strip()
        out += ["```", machine, "```", ""]
    except OSError:
        out += ["(no machine.txt)", ""]
    try:
        steps = [l.rstrip("\n").split("\t") for l in open(os.path.join(d, "steps.tsv"))][1:]
        out += ["## Steps", "", table(["step", "status", "seconds", "note"], steps), ""]
    except OSError:
        pass
    heads, sections, errors = [], [], []
    for step, desc, floor in PROGRAMS:
        path = os.path.join(d, f"{step}.json")
        if not os.path.exists(path):
            continue
        objs, err = read_lines(path)
        if err:
            errors.append(err)
        cases = [o for o in objs if "case" in o]
        heads += headline(step, cases)
        if not any(o.get("floor") for o in cases):  # floors given as ratio lines (the wakeup benches)
            heads += [[step, o["ratio"], "", "", "", ratio(o.get("p50")), "", ""] for o in objs if "ratio" in o]
        sections.append(program_section(step, desc, floor, objs))
    rs, errs = rate_section(d)
    errors += errs
    ls, errs = latency_section(d)
    errors += errs
    if heads:
        out += ["## Headline figures", "",
                "Latency cases against the floor measured in the same run (p50: median over the runs), "
                "throughput cases; times in microseconds.", "",
                table(["step", "case", "p50 us", "floor", "floor p50 us", "p50 / floor", "throughput", "runs"], heads),
                ""]
    out += ["## Per program", ""] + sections
    if rs:
        out.append(rs)
    if ls:
        out.append(ls)
    pngs = []
    for root, _, files in os.walk(d):
        pngs += [os.path.relpath(os.path.join(root, f), d) for f in files if f.endswith(".png")]
    if pngs:
        out += ["## Plots", ""] + [f"![{p}]({p})" for p in sorted(pngs)] + [""]
    if errors:
        out += ["## Not read", ""] + [f"- {e}" for e in errors] + [""]
    return "\n".join(out)


def rdma_json(path):
    """bench-pingpong.sh prints 'round ib_send_lat inline ded-yield ... inline/x ...' rows of RTT/2
    medians in us; one object per (round, Pollux column) with ib_send_lat as the floor."""
    lines = open(path).read().splitlines()
    print(json.dumps({"program": "tests/rdma/bench-pingpong.sh", "machine": lines[0] if lines else "",
                      "argv": "", "date_utc": ""}))
    cols = None
    for line in lines:
        f = line.split()
        if f and f[0] == "round":
            cols = f
            continue
        if cols is None or not f or not f[0].isdigit() or len(f) != len(cols):
            continue
        row = dict(zip(cols, f))
        num = lambda v: float(v) * 1e3 if v not in ("n/a", "") else None
        floor = num(row.get("ib_send_lat", "n/a"))
        print(json.dumps({"case": "ib_send_lat", "run": int(f[0]), "p50_ns": floor}))
        for c in cols[2:]:
            if c.endswith("/x"):
                continue
            v = num(row[c])
            print(json.dumps({"case": c, "run": int(f[0]), "p50_ns": v, "floor": "ib_send_lat", "floor_p50_ns": floor,
                              "ratio_p50": v / floor if v is not None and floor else None}))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--rdma-json":
        rdma_json(sys.argv[2])
    elif len(sys.argv) == 2 and not sys.argv[1].startswith("-"):
        print(summary(sys.argv[1]))
    else:
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(64)
