"""The runner's kernel and vendor statistics for one 4096^3 gemm, old protocol against new."""
import json, os, subprocess, sys, tempfile, urllib.request
P = {"mma": "wgmma", "block_m": 128, "block_n": 256, "block_k": 64, "warps": 12, "stages": 4, "cluster_m": 1}
def probe(kforge, dtype):
    work = tempfile.mkdtemp(prefix="probe-"); os.chmod(work, 0o755)
    proc = subprocess.Popen([kforge, "serve", "--port", "0", "--cache-dir", os.path.join(work, "c")], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    url = proc.stdout.readline().split()[-1]
    try:
        n = 4096
        body = {"backend": "cuda", "arch": "native", "template": "gemm", "params": P,
                "inputs": [{"name": "A", "dtype": dtype, "sizes": [n, n]}, {"name": "B", "dtype": dtype, "sizes": [n, n]}],
                "output": {"name": "C", "dtype": dtype, "sizes": [n, n]},
                "benchmark": {"verify": True, "vendor": True, "budget_ms": 100}}
        r = json.load(urllib.request.urlopen(urllib.request.Request(url + "/kernels", json.dumps(body).encode(),
                                                                    {"Content-Type": "application/json"}), timeout=600))
        b = r["benchmark"]; v = b["vendor"]
        print(f"{dtype} {kforge.split('/')[1]:>6}: kforge median {b['median_ms']:.4f} min {b['min_ms']:.4f} p90 {b['p90_ms']:.4f} ({b['iters']} runs) | "
              f"{v['name']} median {v['median_ms']:.4f} min {v['min_ms']:.4f} p90 {v['p90_ms']:.4f} ({v['iters']} runs, order {v.get('order', 'once, after the first kernel')}) "
              f"| vendor/kforge {b['vs_vendor']:.3f} | verified {b['verify']['passed']} | phases {json.dumps({k: round(x) for k, x in b['phases_ms'].items()})}", flush=True)
    finally:
        proc.terminate(); proc.wait()
for dtype in ("float16", "bfloat16"):
    for k in (".device/old/bin/kforge", ".device/bundle/bin/kforge", ".device/old/bin/kforge", ".device/bundle/bin/kforge"):
        probe(k, dtype)
