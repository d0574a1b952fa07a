#!/usr/bin/env bash
# Our trainer against its competitors on the same work, on this machine's GPUs: transformers + PEFT
# (hf), the same with Liger's kernels (liger), and Unsloth (unsloth), each under torch DDP.
#
#   bench/run_bench.sh BIN_DIR [--gpus "1 2 4"] [--methods "lora full"] [--shape llama-3.2-1b]
#                      [--seq 2048] [--micro-batch 4] [--steps 20] [--warmup 5] [--out DIR]
#                      [--impls "hf liger unsloth"] [--recompute "off on unsloth"]
#                      [--competitors DIR] [--profile] [--precisions "default fp8"]
#
# --impls: the competitors to run (default: hf, and liger and unsloth where they import).
# --competitors DIR: put DIR/site (bench/fetch_competitors.sh DIR; unpacked from DIR/site.tar.gz if
#   only that was carried) on liger's and unsloth's PYTHONPATH; default .bench-competitors beside
#   bench/, if it exists.
# --recompute: gradient checkpointing, one or more of off (default), on, unsloth. "unsloth" is
#   Unsloth's own (checkpoints offloaded to CPU memory); for it ours runs its own offload
#   (model.offloadCheckpoints, reported as recompute "offload") and the others run "on", unless "on"
#   is in the list too (then they are not run twice).
# --precisions: ours runs once per model.precision listed (default: default); the competitors run
#   once, in bf16. FP8 rows carry "precision": "fp8" and report.py compares them in a table of
#   their own.
# LORA_RANK in the environment sets our adapters' rank (default 16; rows carry "lora_r"); the
#   competitors keep 16, so compare them only at the default.
# --profile also traces two steps of ours and each competitor and prints where each one's GPU time
# goes (trace_summary.py): the competitors' last two warm-up steps, and for ours a second run of the
# same config, traced after its warm-up, so that the timed run has no profiler in its process.
# (Tracing ours' last warm-up steps in the timed run, as before, put the trace's writing, about
# 0.6 s, into the first timed step: 1B LoRA on an H100 timed 53.5k tokens/s instead of 78k.)
# Prints one JSON line per run and, at the end, report.py's table: tokens/s per GPU, peak GPU memory,
# our ratio to each competitor, scaling efficiency, and the first step's loss.
set -euo pipefail
BIN=$1; shift
GPUS="1 2 4"; METHODS="lora full"; SHAPE=llama-3.2-1b; SEQ=2048; MB=4; STEPS=20; WARMUP=5
PROFILE=0 IMPLS="" RECOMPUTE=off COMPETITORS="" PRECISIONS=default
OUT=${OUT:-/tmp/kubetune-bench}
while [[ $# -gt 0 ]]; do
  case $1 in
    --gpus) GPUS=$2; shift 2 ;; --methods) METHODS=$2; shift 2 ;; --shape) SHAPE=$2; shift 2 ;;
    --seq) SEQ=$2; shift 2 ;; --micro-batch) MB=$2; shift 2 ;; --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;; --out) OUT=$2; shift 2 ;; --profile) PROFILE=1; shift ;;
    --impls) IMPLS=$2; shift 2 ;; --recompute) RECOMPUTE=$2; shift 2 ;; --competitors) COMPETITORS=$2; shift 2 ;;
    --precisions) PRECISIONS=$2; shift 2 ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
done
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for rc in $RECOMPUTE; do
  [[ $rc == off || $rc == on || $rc == unsloth ]] || { echo "--recompute takes off, on, unsloth"; exit 2; }
done
for impl in $IMPLS; do
  [[ $impl == hf || $impl == liger || $impl == unsloth ]] || { echo "--impls takes hf, liger, unsloth"; exit 2; }
done
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RESULTS=$OUT/results.jsonl
: >"$RESULTS"
[[ -d $OUT/inputs/model ]] || python3 "$HERE/make_bench_inputs.py" "$OUT/inputs" --shape "$SHAPE" --seq "$SEQ"

# The competitors' environment: offline (the model is a local folder), Unsloth's compiled modules
# under OUT instead of the current directory, and for liger and unsloth their packages (hf runs on
# the machine's own packages only, as in the earlier results).
[[ -n $COMPETITORS || ! -d $HERE/../.bench-competitors ]] || COMPETITORS=$HERE/../.bench-competitors
competitor_env=(HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 UNSLOTH_DISABLE_STATISTICS=1
                UNSLOTH_COMPILE_LOCATION="$OUT/unsloth_compiled_cache")
site_env=()
if [[ -n $COMPETITORS ]]; then
  if [[ ! -d $COMPETITORS/site && -f $COMPETITORS/site.tar.gz ]]; then tar -C "$COMPETITORS" -xzf "$COMPETITORS/site.tar.gz"; fi
  [[ -d $COMPETITORS/site ]] || { echo "no $COMPETITORS/site: run bench/fetch_competitors.sh $COMPETITORS"; exit 2; }
  site_env=(PYTHONPATH="$(cd "$COMPETITORS/site" && pwd)${PYTHONPATH:+:$PYTHONPATH}")
fi
if [[ -z $IMPLS ]]; then
  IMPLS=hf
  for pair in liger:liger_kernel.transformers unsloth:unsloth; do
    if env "${competitor_env[@]}" "${site_env[@]}" python3 -c "import ${pair#*:}" >"$OUT/import-${pair%%:*}.txt" 2>&1; then
      IMPLS="$IMPLS ${pair%%:*}"
    else
      echo "note: ${pair%%:*} is not run: 'import ${pair#*:}' failed (see $OUT/import-${pair%%:*}.txt;" \
           "bench/fetch_competitors.sh DIR, then --competitors DIR)"
    fi
  done
fi
echo "competitors: $IMPLS; recompute: $RECOMPUTE"
[[ " $RECOMPUTE " != *" unsloth "* || " $IMPLS " == *" unsloth "* ]] ||
  echo "note: --recompute unsloth without the unsloth competitor runs the others with recompute on"

port=29600
# Our trainer under the launcher on the next port: ours CONFIG LOG [VAR=VALUE ...]; stops the bench
# with the log's tail if it fails.
ours() {
  local config=$1 log=$2; shift 2
  port=$((port + 1))
  env "$@" "$BIN/kubetune-trainer" launch --nproc-per-node "$g" --master-port $port -- train --config "$config" \
    >"$log" 2>&1 || { tail -30 "$log"; exit 1; }
}
for method in $METHODS; do
  for rc in $RECOMPUTE; do
    for g in $GPUS; do
      run=$OUT/$method-$rc-$g
      rm -rf "$run"; mkdir -p "$run"
      # Under "unsloth", everyone else checkpoints plainly, unless the "on" pass already ran them.
      others_rc=$rc run_others=1
      if [[ $rc == unsloth ]]; then
        others_rc=on
        if [[ " $RECOMPUTE " == *" on "* ]]; then run_others=0; fi
      fi
      for precision in $PRECISIONS; do
      rm -rf "$run/out"
      if [[ $run_others == 1 || $rc == unsloth ]]; then
        ckpt=false ours_rc=$others_rc
        if [[ $others_rc == on ]]; then ckpt=true; fi
        if [[ $rc == unsloth ]]; then ckpt=offload ours_rc=offload; fi
        "$HERE/trainer_config.sh" "$OUT/inputs" "$run/out" "$method" $((STEPS + WARMUP)) "$MB" "$SEQ" "{}" "$ckpt" "$precision" >"$run/config.json"
        ours "$run/config.json" "$run/log.txt"
        # The preflight's memory estimate of the same config, to compare with the measured peak.
        "$BIN/kubetune-trainer" preflight --config "$run/config.json" --world-size "$g" >"$run/preflight.json" 2>/dev/null || true
        python3 - "$run/out/metrics_history.jsonl" "$method" "$g" "$WARMUP" "$ours_rc" "$run/preflight.json" "$precision" >>"$RESULTS" <<'PY'
import json, os, sys
path, method, gpus, warmup, recompute = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
precision = sys.argv[7]
try:
    estimate = json.load(open(sys.argv[6]))["memory"]["totalGiB"]
except (OSError, ValueError, KeyError):
    estimate = None
steps = [json.loads(l) for l in open(path) if '"loss"' in l]
timed = [s for s in steps if s["step"] > warmup]
tokens = sum(s["global_tokens"] for s in timed)
seconds = sum(s["step_seconds"] for s in timed)
peak = max(s.get("gpu_memory_peak_bytes", 0) for s in steps)
print(json.dumps({"impl": "ours", "method": method, "gpus": gpus, "recompute": recompute,
                  "tokens_per_s_per_gpu": tokens / seconds / gpus, "peak_gib": peak / 2**30,
                  "first_loss": steps[0]["loss"], "first_grad_norm": steps[0]["grad_norm"],
                  "preflight_estimate_gib": estimate, "precision": precision,
                  "lora_r": int(os.environ.get("LORA_RANK", "16"))}))
PY
        tail -1 "$RESULTS"
        if [[ $PROFILE == 1 ]]; then
          rm -rf "$run/trace"
          "$HERE/trainer_config.sh" "$OUT/inputs" "$run/trace" "$method" $((WARMUP + 2)) "$MB" "$SEQ" "{}" "$ckpt" "$precision" >"$run/trace-config.json"
          ours "$run/trace-config.json" "$run/trace-log.txt" KUBETUNE_PROFILE=$((WARMUP + 1)):2
          python3 "$HERE/trace_summary.py" "$run/trace/trace_rank0.json" --steps 2
        fi
      fi
      done
      if ! compgen -G "$OUT/inputs/model/*.safetensors" >/dev/null; then
        echo "note: $SHAPE has no weights on disk (ours draws them): the competitors are not run"
        continue
      fi
      for impl in $IMPLS; do
        impl_rc=$rc
        if [[ $impl != unsloth ]]; then
          [[ $run_others == 1 ]] || continue
          impl_rc=$others_rc
        fi
        port=$((port + 1))
        prof=() impl_env=("${competitor_env[@]}")
        if [[ $PROFILE == 1 ]]; then prof=(--profile "$run/$impl-trace.json"); fi
        # bitsandbytes, which plain HF needs for QLoRA, comes with the competitors' packages.
        if [[ $impl != hf || $method == qlora ]]; then impl_env+=("${site_env[@]}"); fi
        if env "${impl_env[@]}" torchrun --nproc-per-node "$g" --master-port $((port + 100)) "$HERE/hf_baseline.py" \
             --impl "$impl" --recompute "$impl_rc" --model "$OUT/inputs/model" --data "$OUT/inputs/data.jsonl" \
             --method "$method" --seq "$SEQ" --micro-batch "$MB" --steps "$STEPS" --warmup-steps "$WARMUP" "${prof[@]}" \
             >"$run/$impl-stdout.txt" 2>"$run/$impl-stderr.txt" && grep -q '^{"impl"' "$run/$impl-stdout.txt"; then
          grep '^{"impl"' "$run/$impl-stdout.txt" >>"$RESULTS"
          tail -1 "$RESULTS"
          if [[ $PROFILE == 1 ]]; then python3 "$HERE/trace_summary.py" "$run/$impl-trace.json" --steps 2; fi
        else  # a competitor that fails (e.g. refuses DDP) is reported, and the rest goes on
          tail -n 15 "$run/$impl-stdout.txt" "$run/$impl-stderr.txt" || true
          echo "note: $impl failed for $method, $g GPU(s), recompute $impl_rc (logs in $run)"
          echo "{\"impl\": \"$impl\", \"method\": \"$method\", \"gpus\": $g, \"recompute\": \"$impl_rc\", \"failed\": true}" >>"$RESULTS"
        fi
      done
    done
  done
done
# Each row names the work it measured, so result files of several shapes can be put together.
python3 - "$RESULTS" "$SHAPE" "$SEQ" "$MB" <<'PY'
import json, sys
path, shape, seq, mb = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(l) for l in open(path) if l.strip()]
with open(path, "w") as f:
    for r in rows:
        f.write(json.dumps({"shape": shape, "seq": seq, "micro_batch": mb, **r}) + "\n")
PY
python3 "$HERE/report.py" "$RESULTS"
