#!/usr/bin/env python3
"""Where one kernel's instructions and stalls go, from Nsight Compute's source page (SASS).

On the GPU host, profile the kernel (bench/ncu_gemm.py calls one kforge gemm, or cuBLAS's with
--vendor), then export the report's source page as CSV:

    ncu --set full --import-source no -o /tmp/k -k regex:"gemm|nvjet" --launch-skip 1 --launch-count 1 \\
        python3 bench/ncu_gemm.py --kforge .device/bundle/bin/kforge --shape 961x1536x5376 --params '{...}'
    ncu -i /tmp/k.ncu-rep --page source --csv --print-source sass > k.csv
    bench/ncu_source.py k.csv [--top 12]

It prints, in Markdown:
  - the kernel, the warp-level instructions it executed and the stall samples taken;
  - its blocks by instructions executed: the SASS instructions that ran equally often (a loop's
    body, with the code that runs as often as it), each block's instruction count, how often
    each ran, its share of all executed instructions and of the stall samples, and its most
    frequent opcodes;
  - the instructions with the most stall samples and their main reasons (samples whose reason
    the export has no column for as "no reason given").

A main loop whose block has many more instructions than its wgmmas (HGMMA) spends them between
the data's arrival and the tensor cores: 961x1536x5376's loop had 175 per two K slices, 8 of
them HGMMA, before 2f9d3c2 (docs/BENCHMARKS.md, issue 42).
"""
import argparse
import collections
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source):
    """The opcode of a SASS line without its predicate and modifiers: `@!P0 BRA 0x..` is BRA."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def read(path):
    """(kernel name, [{source, executed, samples, stalls: {reason: samples}}]) of one export."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    kernel = rows[0][1] if rows and len(rows[0]) > 1 and rows[0][0] == "Kernel Name" else "?"
    needed = ("Source", "Instructions Executed", "Warp Stall Sampling (All Samples)")
    header = next((r for r in rows if all(n in r for n in needed)), None)
    if header is None:
        sys.exit(f"{path}: no header with {', '.join(needed)} (a report taken with --set full, exported with "
                 "ncu -i REPORT --page source --csv --print-source sass)")
    at = {name: i for i, name in enumerate(header)}
    reasons = [n for n in header if n.startswith("stall_") and "(Not Issued)" not in n]
    lines = []
    for r in rows[rows.index(header) + 1:]:
        if r and r[0] == "Kernel Name":  # the next kernel's page: one kernel a report, as --launch-count 1 takes
            break
        if len(r) != len(header):
            continue
        lines.append({"source": r[at["Source"]].strip(), "executed": number(r[at["Instructions Executed"]]),
                      "samples": number(r[at["Warp Stall Sampling (All Samples)"]]),
                      "stalls": {n[len("stall_"):]: number(r[at[n]]) for n in reasons}})
    return kernel, lines


def blocks(lines):
    """The instructions grouped by how often each ran, most executed instructions first."""
    by = collections.defaultdict(list)
    for line in lines:
        if line["executed"] > 0:
            by[line["executed"]].append(line)
    return sorted(by.items(), key=lambda kv: -kv[0] * len(kv[1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", help="ncu -i REPORT --page source --csv --print-source sass > CSV")
    ap.add_argument("--top", type=int, default=12, help="blocks and instructions to list")
    args = ap.parse_args()
    kernel, lines = read(args.csv)
    executed = sum(line["executed"] for line in lines)
    samples = sum(line["samples"] for line in lines) or 1.0
    if not executed:
        sys.exit(f"{args.csv}: no instruction was executed")
    print(f"kernel `{kernel}`: {executed:,.0f} instructions executed, {samples:,.0f} stall samples\n")
    print("| runs each | instructions | executed | of all | stall samples | opcodes |")
    print("|---|---|---|---|---|---|")
    for runs, group in blocks(lines)[:args.top]:
        ops = collections.Counter(opcode(line["source"]) for line in group).most_common(6)
        print(f"| {runs:,.0f} | {len(group)} | {runs * len(group):,.0f} | {runs * len(group) / executed:.1%} | "
              f"{sum(line['samples'] for line in group) / samples:.1%} | {', '.join(f'{o} {n}' for o, n in ops)} |")
    print("\n| stall samples | runs | instruction | main reasons |")
    print("|---|---|---|---|")
    for line in sorted(lines, key=lambda line: -line["samples"])[:args.top]:
        main_reasons = sorted(line["stalls"].items(), key=lambda kv: -kv[1])[:2]
        rest = line["samples"] - sum(line["stalls"].values())  # reasons the export has no column for
        why = ", ".join([f"{name} {n:.0f}" for name, n in main_reasons if n > 0] + ([f"no reason given {rest:.0f}"] if rest >= 1 else []))
        print(f"| {line['samples']:.0f} ({line['samples'] / samples:.1%}) | {line['executed']:,.0f} | `{line['source'][:70]}` | {why} |")


if __name__ == "__main__":
    main()
