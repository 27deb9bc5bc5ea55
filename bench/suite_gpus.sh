#!/usr/bin/env bash
# The 448-case suite of docs/BENCHMARKS.md (issue 15) at one tree on a host with several GPUs:
# its 16 parts (dtype x layout x epilogue) dealt round-robin to the GPUs, one bench/cuda_suite.py
# (its own kforge serve and kforge-runner-cuda) per GPU at a time, each seeing only its GPU
# (CUDA_VISIBLE_DEVICES). A case's kforge and vendor timings are interleaved on that one GPU, so
# the ratios hold whichever GPU ran the part. Each part's output is OUTDIR/E_D_L.txt, which
# `bench/suite_report.py OUTDIR` reads. On one H100 a part takes about 4 minutes (nvcc's compiles
# bound it on 16 cores), so 4 GPUs and 64 cores run the suite in about 16.
# Usage: bench/suite_gpus.sh KFORGE OUTDIR [PART...]     PART: dtype:layout:epilogue, all 16 if none
# Environment: GPUS (default: every GPU nvidia-smi lists), JOBS (compile jobs per part, default
# the cores over the GPUs), DRY_RUN=1 prints each GPU's commands instead of running them.
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
mkdir -p "$2" || exit 2
KFORGE=$(realpath "$1")
OUTDIR=$(realpath "$2")
shift 2
cd "$(dirname "$0")/.." || exit 2
parts=("$@")
if [ ${#parts[@]} -eq 0 ]; then
  for d in float16 bfloat16; do
    for e in none bias_gelu_tanh; do
      for l in nn nt tn tt; do parts+=("$d:$l:$e"); done
    done
  done
fi
GPUS=${GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
[ "$GPUS" -ge 1 ] 2>/dev/null || { echo "suite_gpus: no GPU (nvidia-smi -L lists none; set GPUS)"; exit 2; }
JOBS=${JOBS:-$(( $(nproc) / GPUS > 0 ? $(nproc) / GPUS : 1 ))}

run_part() {  # GPU dtype:layout:epilogue: the part's cuda_suite.py on that GPU (DRY_RUN: print it)
  local g=$1 d l e
  IFS=: read -r d l e <<< "$2"
  [ -n "$e" ] || { echo "suite_gpus: part '$2' is not dtype:layout:epilogue" >&2; return 1; }
  local out="$OUTDIR/${e}_${d}_${l}.txt"
  local cmd=(python3 bench/cuda_suite.py --kforge "$KFORGE" --autotune --warm --groups "square,llm,bmm"
             --dtypes "$d" --layouts "$l" --epilogue "$e" --jobs "$JOBS")
  if [ "${DRY_RUN:-0}" = 1 ]; then
    echo "gpu $g: CUDA_VISIBLE_DEVICES=$g $(printf '%q ' "${cmd[@]}")> $(printf '%q' "$out") 2>&1"
    return 0
  fi
  local start r
  start=$(date +%s)
  CUDA_VISIBLE_DEVICES=$g "${cmd[@]}" > "$out" 2>&1
  r=$?
  echo "gpu $g: $2 rc $r in $(( $(date +%s) - start )) s"
  return $r
}

failed=0
for ((g = 0; g < GPUS; ++g)); do
  (
    rc=0
    for ((i = g; i < ${#parts[@]}; i += GPUS)); do run_part "$g" "${parts[$i]}" || rc=1; done
    exit $rc
  ) &
done
for job in $(jobs -p); do wait "$job" || failed=1; done
[ "${DRY_RUN:-0}" = 1 ] || echo "suite_gpus: ${#parts[@]} parts on $GPUS GPUs into $OUTDIR; bench/suite_report.py $OUTDIR"
exit $failed
