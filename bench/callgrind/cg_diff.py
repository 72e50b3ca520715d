"""Per-message instruction counts from two callgrind_annotate outputs (shm-inline.sh, udp-inline.sh).

Each function's self Ir at count B minus at count A, divided by B - A: set-up and tear-down
cancel. Clones of one function ("[clone .part.0]", ".cold") and template/argument lists are
folded under one short name.
"""
import json
import re
import time


def short(name):
    name = re.sub(r"\s+\[/[^\]]*\]$", "", name)          # the object file
    name = re.sub(r"^[^:]*:(?!:)", "", name, count=1)     # the source file
    name = re.sub(r"\s*\[clone [^\]]*\]", "", name)        # clones are summed
    name = re.sub(r"'\d+$", "", name)
    prev = None
    while prev != name:                                    # argument and template lists
        prev = name
        name = re.sub(r"\([^()]*\)", "\x01", name)
        name = re.sub(r"<[^<>]*>", "\x02", name)
    name = name.replace("\x01", "()").replace("\x02", "<>").replace(" const", "")
    return name.replace("{lambda()#", "{lambda#")


def load(path):
    """(program total Ir, {short function name: self Ir}) of one callgrind_annotate output."""
    total, fns = 0, {}
    for line in open(path):
        m = re.match(r"^\s*([\d,]+)\s+(?:\([ \d.%]+\)\s+)?(.*)$", line)
        if not m:
            continue
        ir, rest = int(m.group(1).replace(",", "")), m.group(2)
        if rest.startswith("PROGRAM TOTALS"):
            total = ir
        elif ":" in rest:
            k = short(rest)
            fns[k] = fns.get(k, 0) + ir
    return total, fns


def per_message(path_a, path_b, a, b, top):
    """([(ir_per_msg, function)] largest first, at most `top`, each >= 0.5; total per message)."""
    ta, fa = load(path_a)
    tb, fb = load(path_b)
    d = b - a
    rows = sorted(((fb.get(k, 0) - fa.get(k, 0)) / d, k) for k in set(fa) | set(fb))
    rows = [r for r in reversed(rows) if r[0] >= 0.5][:top]
    return rows, (tb - ta) / d


def print_rows(heading, rows, total, total_note):
    """The per-message table: `heading`, a row per function, then the TOTAL row."""
    print(heading)
    for v, k in rows:
        print(f"  {v:8.1f}  {k}")
    print(f"  {total:8.1f}  TOTAL ({total_note})")


def open_json(path, program, machine, argv):
    """The JSON-lines file at `path`, its first line (program, machine, argv, date) written."""
    f = open(path, "w")
    f.write(json.dumps({"program": program, "machine": machine, "argv": argv,
                        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
    return f
