#!/usr/bin/env python3
"""bench/cuda_suite.py --deadline against the real service: a case answered before it (a
zero size, refused at once) is reported; one still compiling at it (nvcc for sm_90a: about
5 s on a 2-core host, against a deadline of 1 s) is named and left; the run ends soon after,
with no warm pass, and its exit status says it is incomplete. Skipped (77) where there is no
nvcc to keep the service busy.

    tests/bench/cuda_suite_deadline_test.py path/to/kforge"""
import os
import shutil
import subprocess
import sys
import time

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
kforge = sys.argv[1]
if not shutil.which("nvcc") and not os.path.exists("/usr/local/cuda/bin/nvcc"):
    print("skipped: no nvcc")
    sys.exit(77)

failed = 0


def check(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    failed += not ok


t0 = time.monotonic()
run = subprocess.run([sys.executable, os.path.join(root, "bench", "cuda_suite.py"), "--kforge", kforge, "--arch", "sm_90a",
                      "--shapes", "0x256x256,256x256x256", "--dtypes", "float16", "--layouts", "nn", "--epilogue", "none",
                      "--deadline", "1", "--warm"], capture_output=True, text=True, timeout=300)
wall = time.monotonic() - t0
out = run.stdout
print(out[-3000:], run.stderr[-2000:], sep="\n")
check(run.returncode == 1, f"exit status 1 for an incomplete run: {run.returncode}")
check("# deadline: 1 of 2 cases not answered within 1 s: float16 NN 256x256x256\n" in out, "the unanswered case is named")
check("float16 NN 0x256x256: HTTP 400" in out and "/inputs/0/sizes/0" in out, "the answered case is reported, its field named")
check("warm " not in out, "no warm pass over an incomplete run")
# The service is stopped at the deadline: the run ends once it has (a hung request thread or
# a service left running would hold it to the requests' hour).
check(wall < 120, f"the run ends after the deadline and the service's stop: {wall:.1f} s")
sys.exit(1 if failed else 0)
