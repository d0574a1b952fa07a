#!/usr/bin/env bash
# Which micro-batch is fastest on this GPU, and what training.microBatchSize auto picks there:
#   bench/micro_batch_sweep.sh BIN_DIR [--shape llama-3.2-1b] [--method lora] [--seq 2048]
#                              [--micro-batches "1 2 4 8 16 32"] [--steps 6] [--warmup 2]
#                              [--recompute false|true|offload] [--out DIR]
# Runs our trainer once per micro-batch (accumulation 1, the benchmark's work: bench/trainer_config.sh)
# and prints one JSON line each: tokens/s per GPU and peak GiB, or "out of memory". Then asks the
# preflight, with microBatchSize auto, a global batch of the largest size swept and this GPU's
# memory, what it would choose, and prints both side by side.
set -euo pipefail
BIN=$1; shift
SHAPE=llama-3.2-1b METHOD=lora SEQ=2048 SIZES="1 2 4 8 16 32" STEPS=6 WARMUP=2 RECOMPUTE=false
OUT=${OUT:-/tmp/kubetune-mb-sweep}
while [[ $# -gt 0 ]]; do
  case $1 in
    --shape) SHAPE=$2; shift 2 ;; --method) METHOD=$2; shift 2 ;; --seq) SEQ=$2; shift 2 ;;
    --micro-batches) SIZES=$2; shift 2 ;; --steps) STEPS=$2; shift 2 ;; --warmup) WARMUP=$2; shift 2 ;;
    --recompute) RECOMPUTE=$2; shift 2 ;; --out) OUT=$2; shift 2 ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
done
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
INPUTS=$OUT/inputs-$SHAPE-$SEQ
[[ -d $INPUTS/model ]] || python3 "$HERE/make_bench_inputs.py" "$INPUTS" --shape "$SHAPE" --seq "$SEQ" --config-only
GPU_GIB=$(python3 -c 'import torch; print(torch.cuda.get_device_properties(0).total_memory / 2**30)')
GPU_NAME=$(python3 -c 'import torch; print(torch.cuda.get_device_name(0))')
RESULTS=$OUT/sweep-$SHAPE-$METHOD-$SEQ.jsonl
: >"$RESULTS"
for mb in $SIZES; do
  run=$OUT/$SHAPE-$METHOD-$SEQ-mb$mb
  rm -rf "$run"; mkdir -p "$run"
  "$HERE/trainer_config.sh" "$INPUTS" "$run/out" "$METHOD" $((STEPS + WARMUP)) "$mb" "$SEQ" "{}" "$RECOMPUTE" >"$run/config.json"
  # A step that runs out of memory would be re-run at a smaller micro-batch: that size does not fit,
  # and the run is stopped there.
  "$BIN/kubetune-trainer" train --config "$run/config.json" >"$run/log.txt" 2>&1 &
  pid=$!
  while kill -0 $pid 2>/dev/null; do
    if grep -q "ran out of GPU memory" "$run/log.txt"; then kill $pid; break; fi
    sleep 1
  done
  status=0; wait $pid || status=$?
  if grep -q "ran out of GPU memory" "$run/log.txt"; then
    echo "{\"micro_batch\": $mb, \"out_of_memory\": true}" >>"$RESULTS"
    tail -1 "$RESULTS"
    break  # larger ones do not fit either
  elif [[ $status == 0 ]]; then
    python3 - "$run/out/metrics_history.jsonl" "$mb" "$WARMUP" >>"$RESULTS" <<'PY'
import json, sys
path, mb, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
steps = [json.loads(l) for l in open(path) if '"loss"' in l]
timed = [s for s in steps if s["step"] > warmup]
tokens = sum(s["global_tokens"] for s in timed)
seconds = sum(s["step_seconds"] for s in timed)
peak = max(s.get("gpu_memory_peak_bytes", 0) for s in steps)
print(json.dumps({"micro_batch": mb, "tokens_per_s_per_gpu": round(tokens / seconds), "peak_gib": round(peak / 2**30, 2)}))
PY
  else
    tail -20 "$run/log.txt"; exit 1
  fi
  tail -1 "$RESULTS"
done
# What auto chooses for a global batch of the largest size swept (accumulation makes up the rest).
python3 - "$OUT/$SHAPE-$METHOD-$SEQ-mb$(echo $SIZES | awk '{print $1}')/config.json" "$SIZES" >"$OUT/auto.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["training"]["microBatchSize"] = "auto"
cfg["training"]["globalBatchSize"] = max(int(s) for s in sys.argv[2].split())
print(json.dumps(cfg))
PY
"$BIN/kubetune-trainer" preflight --config "$OUT/auto.json" --gpu-memory-gib "$GPU_GIB" >"$OUT/auto-preflight.json" || true
python3 - "$RESULTS" "$OUT/auto-preflight.json" "$GPU_NAME" "$GPU_GIB" "$SHAPE" "$METHOD" "$SEQ" "$RECOMPUTE" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
chosen = json.load(open(sys.argv[2]))["microBatch"]
fits = [r for r in rows if not r.get("out_of_memory")]
fastest = max(fits, key=lambda r: r["tokens_per_s_per_gpu"])
summary = {"gpu": sys.argv[3], "gpu_gib": round(float(sys.argv[4]), 1), "shape": sys.argv[5],
           "method": sys.argv[6], "seq": int(sys.argv[7]), "recompute": sys.argv[8],
           "fastest_that_fits": fastest["micro_batch"], "auto_chooses": chosen["size"],
           "auto_reason": chosen["reason"], "rows": rows}
print(json.dumps(summary))
PY
