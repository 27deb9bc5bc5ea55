#!/usr/bin/env python3
"""Summarises the raw output of bench/cuda_suite.py runs as the tables of docs/BENCHMARKS.md.

Reads every case line that cuda_suite.py printed (`<dtype> <LAYOUT> [<epilogue> ]<shape>: kforge ...
cuBLAS ... torch ... verified=...`) from the given files (or the *.txt in the given folders) and
prints, in Markdown:
  - per epilogue and per dtype: the cases, the geometric mean of kforge/vendor (the vendor's
    median over kforge's), the lowest, how many are below 0.8x and 0.95x, torch/kforge, how many
    verified, and whether every vendor time was interleaved with as many runs as the kernel's;
  - each file's wall time, its cases' cold walls (from the request to the answer, with the file's
    other cases in flight) and its warm answers, as cuda_suite.py's lines say them;
  - the lowest cases, and the per-shape tables of kforge/vendor and torch/kforge (a column per
    dtype and layout, a table per epilogue), shapes in the order the files list them.

Usage: bench/suite_report.py bench/results/h100_suite [more folders or files] [--lowest 10]
Exits 1 when it finds no case line, so a run that printed only errors is not summarised as empty.
"""
import argparse
import glob
import math
import os
import re
import sys

CASE = re.compile(
    r"^\s*(?P<name>.+?): kforge (?P<k>[0-9.]+) ms \(min [0-9.]+, p90 [0-9.]+, (?P<kr>\d+) runs.*?\)\s+"
    r"(?P<vname>.+?) (?P<v>[0-9.]+) ms \((?P<vr>\d+) runs, (?P<order>\w[\w ]*)\)\s+"
    r"torch (?P<t>[0-9.]+) ms\s+kforge/cuBLAS [0-9.]+x\s+verified=(?P<ver>\w+)(?:\s+wall (?P<wall>[0-9.]+)s)?")
WARM = re.compile(r"^# warm: (\d+) requests, median ([0-9.]+) ms, max ([0-9.]+) ms")
TIMED = re.compile(r"^# (\d+) of (\d+) cases timed in (\d+) s")
DTYPES = {"float16": "fp16", "bfloat16": "bf16"}


def parse(path):
    """The case rows and the warm/wall lines of one cuda_suite.py output."""
    cases, info = [], {}
    with open(path) as f:
        for line in f:
            if m := CASE.match(line):
                words = m["name"].split()
                cases.append({"file": os.path.basename(path), "name": m["name"], "dtype": words[0], "layout": words[1],
                              "epilogue": " ".join(words[2:-1]) or "none", "shape": words[-1],
                              "kforge": float(m["k"]), "vendor": float(m["v"]), "vendor_name": m["vname"], "torch": float(m["t"]),
                              "kforge_runs": int(m["kr"]), "vendor_runs": int(m["vr"]), "order": m["order"],
                              "verified": m["ver"] == "True", "wall": float(m["wall"]) if m["wall"] else None})
            elif m := WARM.match(line):
                info["warm"] = (int(m[1]), float(m[2]), float(m[3]))
            elif m := TIMED.match(line):
                info["timed"] = (int(m[1]), int(m[2]), int(m[3]))
    return cases, info


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def ratio(c):
    return c["vendor"] / c["kforge"]


def summary_row(label, sel):
    low = min(sel, key=ratio)
    rs = [ratio(c) for c in sel]
    same = all(c["order"] == "interleaved" and c["kforge_runs"] == c["vendor_runs"] for c in sel)
    return (f"| {label} | {len(sel)} | **{geomean(rs):.3f}×** | {ratio(low):.3f}× ({low['name']}) | "
            f"{sum(r < 0.8 for r in rs)} | {sum(r < 0.95 for r in rs)} | "
            f"{geomean([c['torch'] / c['kforge'] for c in sel]):.3f} | {sum(c['verified'] for c in sel)} | "
            f"{'yes' if same else 'no'} |")


def ordered(cases, key):
    """The values of key in the cases, sorted, the plain one first (epilogue none, float16)."""
    first = {"epilogue": "none", "dtype": "float16"}.get(key)
    return sorted(dict.fromkeys(c[key] for c in cases), key=lambda v: (v != first, v))


def shape_tables(cases):
    shapes = list(dict.fromkeys(c["shape"] for c in cases))
    for epi in ordered(cases, "epilogue"):
        mine = {(c["dtype"], c["layout"], c["shape"]): c for c in cases if c["epilogue"] == epi}
        cols = [(d, lay) for d in ordered(cases, "dtype") for lay in ordered(cases, "layout")
                if any((d, lay, s) in mine for s in shapes)]
        for title, value in (("kforge/vendor (the vendor's median over kforge's)", ratio),
                             ("torch/kforge (torch's median over kforge's)", lambda c: c["torch"] / c["kforge"])):
            print(f"\n{epi}, {title}:\n")
            print("| shape | " + " | ".join(f"{DTYPES.get(d, d)} {lay}" for d, lay in cols) + " |")
            print("|---|" + "---|" * len(cols))
            for s in shapes:
                cells = [f"{value(mine[(d, lay, s)]):.2f}" if (d, lay, s) in mine else "—" for d, lay in cols]
                if any(cell != "—" for cell in cells):
                    print(f"| {s.replace('x', '×')} | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", help="cuda_suite.py outputs, or folders of them (*.txt)")
    ap.add_argument("--lowest", type=int, default=10, help="how many of the lowest cases to list")
    args = ap.parse_args()
    files = []
    for p in args.paths:
        if not os.path.exists(p):
            sys.exit(f"suite_report: {p}: no such file or folder")
        files += sorted(glob.glob(os.path.join(p, "*.txt"))) if os.path.isdir(p) else [p]
    cases, infos = [], {}
    for f in files:
        mine, info = parse(f)
        cases += mine
        if mine:
            info["cold"] = sorted(c["wall"] for c in mine if c["wall"] is not None)
            infos[os.path.basename(f)] = info
    if not cases:
        sys.exit(f"suite_report: no case lines in {', '.join(files) or 'the given paths'}")

    print("| cases | n | geomean kforge/vendor | lowest | below 0.8× | below 0.95× | torch/kforge | verified "
          "| vendor interleaved, as many runs |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(summary_row("all", cases))
    for key, label in (("epilogue", "epilogue {}"), ("dtype", "{}")):
        for v in ordered(cases, key):
            print(summary_row(label.format(v), [c for c in cases if c[key] == v]))

    print("\n| file | cases timed | wall | cold answers: median, max | warm answers: n, median, max |")
    print("|---|---|---|---|---|")
    for f, info in infos.items():
        n, total, wall = info.get("timed", (0, 0, 0))
        cold, warm = info["cold"], info.get("warm")
        print(f"| {f} | {n} of {total} | {wall} s | " + (f"{cold[len(cold) // 2]} s, {cold[-1]} s" if cold else "—") +
              " | " + (f"{warm[0]}, {warm[1]} ms, {warm[2]} ms" if warm else "—") + " |")

    print(f"\nlowest {args.lowest}:\n")
    for c in sorted(cases, key=ratio)[:args.lowest]:
        print(f"- {c['name']}: {ratio(c):.3f}× (kforge {c['kforge']:.4f} ms, {c['vendor_name']} "
              f"{c['vendor']:.4f} ms, {c['kforge_runs']} runs)")
    shape_tables(cases)


if __name__ == "__main__":
    main()
