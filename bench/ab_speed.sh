#!/usr/bin/env bash
# Did a change keep the speed? Two packed builds (bench/package_trainer.sh) of our trainer, A and
# B, on the same work in one call on the same GPU, alternated (A B A B) so that a drifting clock or
# a warming GPU does not favour one: tokens/s per GPU over the timed steps, peak GiB and the first
# step's loss of each run, one JSON line each (with the preflight's estimate of the peak).
#   bench/ab_speed.sh A_DIR B_DIR [--shape llama-3.2-1b] [--methods "lora full"] [--micro-batch 4]
#                     [--seq 2048] [--steps 20] [--warmup 5] [--rounds 2] [--out DIR]
#                     [--distributed-a JSON] [--distributed-b JSON] [--recompute true|false|offload]
#                     [--precision default|fp8] [--gpus N] [--end-after-last-step]
# A_DIR and B_DIR may be the same build with different `distributed` sections, e.g.
#   bench/ab_speed.sh .bench-pkg .bench-pkg --distributed-b '{"sharding": "full"}'
# --gpus N runs `launch --nproc-per-node N` (tokens/s are then per GPU). --end-after-last-step ends
# a run once its last step is in metrics_history.jsonl (waiting 20 s for it to exit by itself):
# for a known hang after the steps (multi-GPU sharding full, issue "scale out"); the row says
# whether the run exited by itself ("exit": its status, or "ended").
set -euo pipefail
A=$1 B=$2; shift 2
SHAPE=llama-3.2-1b METHODS="lora full" MB=4 SEQ=2048 STEPS=20 WARMUP=5 ROUNDS=2
OUT=/tmp/kubetune-ab DIST_A="{}" DIST_B="{}" RECOMPUTE=false PRECISION=default GPUS=1 END_AFTER_LAST=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --shape) SHAPE=$2; shift 2 ;; --methods) METHODS=$2; shift 2 ;; --micro-batch) MB=$2; shift 2 ;;
    --seq) SEQ=$2; shift 2 ;; --steps) STEPS=$2; shift 2 ;; --warmup) WARMUP=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;; --out) OUT=$2; shift 2 ;;
    --distributed-a) DIST_A=$2; shift 2 ;; --distributed-b) DIST_B=$2; shift 2 ;;
    --recompute) RECOMPUTE=$2; shift 2 ;; --precision) PRECISION=$2; shift 2 ;;
    --gpus) GPUS=$2; shift 2 ;; --end-after-last-step) END_AFTER_LAST=1; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
done
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export NCCL_NVLS_ENABLE=0
# One run of a packed build: `train` alone, or `launch` with one process per GPU. Prints its exit
# status, or "ended" where --end-after-last-step ended it.
run_trainer() {  # DIR CONFIG LOG HISTORY
  local cmd=(train --config "$2")
  [[ $GPUS -gt 1 ]] && cmd=(launch --nproc-per-node "$GPUS" --master-port $((29500 + RANDOM % 400)) -- "${cmd[@]}")
  (. "$1/env.sh"; exec "$1/kubetune-trainer" "${cmd[@]}") >"$3" 2>&1 &
  local pid=$! last=$((STEPS + WARMUP)) waited=0
  while kill -0 $pid 2>/dev/null; do
    if [[ $END_AFTER_LAST == 1 ]] && grep -q "\"step\": *$last[,}]" "$4" 2>/dev/null; then
      waited=$((waited + 1))
      if [[ $waited -gt 20 ]]; then pkill -TERM -P $pid 2>/dev/null; kill $pid 2>/dev/null; sleep 2
        pkill -KILL -f "$2" 2>/dev/null; wait $pid 2>/dev/null; echo ended; return; fi
    fi
    sleep 1
  done
  wait $pid && echo 0 || echo $?
}
mkdir -p "$OUT"
INPUTS=$OUT/inputs-$SHAPE-$SEQ
[[ -d $INPUTS/model ]] || python3 "$HERE/make_bench_inputs.py" "$INPUTS" --shape "$SHAPE" --seq "$SEQ" --config-only >/dev/null
for method in $METHODS; do
  for round in $(seq "$ROUNDS"); do
    for side in A B; do
      dir=$A dist=$DIST_A; [[ $side == B ]] && dir=$B dist=$DIST_B
      run=$OUT/$method-$side-$round
      rm -rf "$run"; mkdir -p "$run"
      "$HERE/trainer_config.sh" "$INPUTS" "$run/out" "$method" $((STEPS + WARMUP)) "$MB" "$SEQ" "$dist" "$RECOMPUTE" "$PRECISION" \
        >"$run/config.json"
      status=$(run_trainer "$dir" "$run/config.json" "$run/log.txt" "$run/out/metrics_history.jsonl")
      [[ $status == 0 || $status == ended ]] || { tail -20 "$run/log.txt"; exit 1; }
      python3 - "$run/out/metrics_history.jsonl" "$side" "$method" "$WARMUP" "$run/log.txt" "$PRECISION" "$GPUS" "$status" "$dist" <<'PY'
import json, re, sys
path, side, method, warmup, precision = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[6]
gpus, status, distributed = int(sys.argv[7]), sys.argv[8], json.loads(sys.argv[9])
estimate = re.search(r"estimated peak GPU memory=([0-9.]+) GiB", open(sys.argv[5]).read())
steps = [json.loads(l) for l in open(path) if '"loss"' in l]
timed = [s for s in steps if s["step"] > warmup]
tps = sum(s["global_tokens"] for s in timed) / sum(s["step_seconds"] for s in timed) / gpus
peak = max(s.get("gpu_memory_peak_bytes", 0) for s in steps) / 2**30
print(json.dumps({"side": side, "method": method, "precision": precision, "gpus": gpus,
                  "distributed": distributed, "exit": status, "tokens_per_s": round(tps), "peak_gib": round(peak, 2),
                  "estimated_gib": float(estimate.group(1)) if estimate else None,
                  "first_loss": steps[0]["loss"]}))
PY
      rm -rf "$run/out/checkpoints" "$run/out"/*.safetensors  # a full model's are GBs a run
    done
  done
done
