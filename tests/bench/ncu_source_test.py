#!/usr/bin/env python3
"""bench/ncu_source.py on a real export: the consumer loop of kforge's swapped 128x88 gemm at
961x1536x5376 before 2f9d3c2 (H200; ncu_source_sw88.csv is the loop's stretch of the source
page, its stall columns only), and on a file that is not one."""
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
tool = os.path.join(root, "bench", "ncu_source.py")
fixture = os.path.join(here, "ncu_source_sw88.csv")
sys.path.insert(0, os.path.join(root, "bench"))
import ncu_source  # noqa: E402

failed = 0


def check(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    failed += not ok


kernel, lines = ncu_source.read(fixture)
check(kernel.startswith("<unnamed>::wg::gemm_wgmma("), f"the kernel's name is read: {kernel[:40]}")
runs, loop = ncu_source.blocks(lines)[0]
check(runs == 44352 and len(loop) == 175, f"the most executed block is the loop: {len(loop)} instructions run {runs:.0f} times")
hgmma = [line for line in loop if ncu_source.opcode(line["source"]) == "HGMMA"]
check(len(hgmma) == 8, f"8 of them HGMMA (two K slices of 4): {len(hgmma)}")
check(ncu_source.opcode("@!P0  BRA 0x7f8c557ac910") == "BRA" and ncu_source.opcode("HGMMA.64x88x16.F32 R24") == "HGMMA",
      "an opcode is read without predicate and modifiers")
top = max(lines, key=lambda line: line["samples"])
check(ncu_source.opcode(top["source"]) == "BRA" and max(top["stalls"], key=top["stalls"].get) == "long_sb",
      f"the most stalled instruction is the full barrier's wait, on the long scoreboard: {top['source']}")

out = subprocess.run([sys.executable, tool, fixture, "--top", "3"], capture_output=True, text=True)
check(out.returncode == 0 and "| 44,352 | 175 | 7,761,600 |" in out.stdout, "the report's first block row")
check("no reason given 134" in out.stdout, "samples without a reason column are counted, not dropped")

with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
    f.write('"Kernel Name","k"\n"ID","Duration"\n"1","3.2"\n')
bad = subprocess.run([sys.executable, tool, f.name], capture_output=True, text=True)
os.unlink(f.name)
check(bad.returncode != 0 and "--page source --csv --print-source sass" in bad.stderr,
      "a CSV that is not a source page is refused, naming the export command")

print(f"{failed} failed")
sys.exit(1 if failed else 0)
