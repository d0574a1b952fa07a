#!/usr/bin/env bash
# Our trainer against transformers + PEFT + torch DDP on the same work, on this machine's GPUs.
#
#   bench/run_bench.sh BIN_DIR [--gpus "1 2 4"] [--methods "lora full"] [--shape llama-3.2-1b]
#                      [--seq 2048] [--micro-batch 4] [--steps 20] [--warmup 5] [--out DIR]
#                      [--profile]
#
# --profile also traces the last two warm-up steps of both (so the timed steps stay clean) and
# prints where each one's GPU time goes (trace_summary.py).
# Prints one JSON line per run and, at the end, a table: tokens/s per GPU, peak GPU memory and
# scaling efficiency (tokens/s per GPU at N GPUs / at 1 GPU) for both, and our/HF ratios.
set -euo pipefail
BIN=$1; shift
GPUS="1 2 4"; METHODS="lora full"; SHAPE=llama-3.2-1b; SEQ=2048; MB=4; STEPS=20; WARMUP=5
PROFILE=0
OUT=${OUT:-/tmp/kubetune-bench}
while [[ $# -gt 0 ]]; do
  case $1 in
    --gpus) GPUS=$2; shift 2 ;; --methods) METHODS=$2; shift 2 ;; --shape) SHAPE=$2; shift 2 ;;
    --seq) SEQ=$2; shift 2 ;; --micro-batch) MB=$2; shift 2 ;; --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;; --out) OUT=$2; shift 2 ;; --profile) PROFILE=1; shift ;; *) echo "unknown option $1"; exit 2 ;;
  esac
done
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT"
RESULTS=$OUT/results.jsonl
: >"$RESULTS"
[[ -d $OUT/inputs/model ]] || python3 "$HERE/make_bench_inputs.py" "$OUT/inputs" --shape "$SHAPE" --seq "$SEQ"

port=29600
for method in $METHODS; do
  for g in $GPUS; do
    port=$((port + 1))
    run=$OUT/ours-$method-$g
    rm -rf "$run"; mkdir -p "$run"
    "$HERE/trainer_config.sh" "$OUT/inputs" "$run/out" "$method" $((STEPS + WARMUP)) "$MB" "$SEQ" >"$run/config.json"
    profile_env=() hf_profile=()
    if [[ $PROFILE == 1 ]]; then
      profile_env=(KUBETUNE_PROFILE=$((WARMUP - 1)):2) hf_profile=(--profile "$run/hf-trace.json")
    fi
    env "${profile_env[@]}" "$BIN/kubetune-trainer" launch --nproc-per-node "$g" --master-port $port -- train --config "$run/config.json" >"$run/log.txt" 2>&1 ||
      { tail -30 "$run/log.txt"; exit 1; }
    python3 - "$run/out/metrics_history.jsonl" "$method" "$g" "$WARMUP" >>"$RESULTS" <<'PY'
import json, sys
path, method, gpus, warmup = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
steps = [json.loads(l) for l in open(path) if '"loss"' in l]
timed = [s for s in steps if s["step"] > warmup]
tokens = sum(s["global_tokens"] for s in timed)
seconds = sum(s["step_seconds"] for s in timed)
peak = max(s.get("gpu_memory_peak_bytes", 0) for s in steps)
print(json.dumps({"impl": "ours", "method": method, "gpus": gpus,
                  "tokens_per_s_per_gpu": tokens / seconds / gpus, "peak_gib": peak / 2**30,
                  "first_loss": steps[0]["loss"], "first_grad_norm": steps[0]["grad_norm"]}))
PY
    tail -1 "$RESULTS"
    torchrun --nproc-per-node "$g" --master-port $((port + 100)) "$HERE/hf_baseline.py" --model "$OUT/inputs/model" \
      --data "$OUT/inputs/data.jsonl" --method "$method" --seq "$SEQ" --micro-batch "$MB" \
      --steps "$STEPS" --warmup-steps "$WARMUP" "${hf_profile[@]}" 2>"$run/hf-stderr.txt" | grep '^{' >>"$RESULTS" ||
      { tail -30 "$run/hf-stderr.txt"; exit 1; }
    tail -1 "$RESULTS"
    if [[ $PROFILE == 1 ]]; then
      python3 "$HERE/trace_summary.py" "$run/out/trace_rank0.json" --steps 2
      python3 "$HERE/trace_summary.py" "$run/hf-trace.json" --steps 2
    fi
  done
done
python3 "$HERE/report.py" "$RESULTS"
