#!/usr/bin/env bash
# DPO against its competitors on one GPU (issue 47): ours (training.objective dpo) against TRL's
# DPOTrainer and Unsloth's patched DPOTrainer (bench/dpo_bench.py), each alone on the GPU, the same
# pairs, shape, LoRA/QLoRA, pairs per step, gradient checkpointing and optimizer.
#
#   bench/run_dpo_bench.sh BIN_DIR [--shape llama-3.1-8b] [--methods "lora qlora"] [--prompt 256]
#                          [--answer 768] [--micro-batch 4] [--steps 10] [--warmup 3]
#                          [--impls "ours trl unsloth"] [--competitors DIR] [--out DIR]
#                          [--pairs N] [--objective dpo|kto]
#
# --objective kto: KTO on the same pairs as unpaired examples (each chosen answer desirable, each
# rejected one undesirable, in turn), --micro-batch examples a step, against TRL's KTOTrainer
# (and Unsloth's patch of it); tokens/s counts each example's one sequence.
#
# Pairs of random words, one character per token with the project's tokenizer: a prompt of --prompt
# tokens and two answers of --answer tokens each (+ EOS), so every sequence has the same length.
# tokens/s counts both sequences of a pair. Ours computes the reference log-probabilities once
# before the first step over all --pairs pairs (default: the steps' own), reported as
# reference_seconds; tokens_per_s_with_reference adds the timed steps' share of it (their pairs /
# all pairs) to their time. A larger --pairs measures that pass past its start-up costs. TRL and
# Unsloth run the reference forward in every step (TRL's default).
set -euo pipefail
BIN=$1; shift
SHAPE=llama-3.1-8b METHODS="lora qlora" PROMPT=256 ANSWER=768 MB=4 STEPS=10 WARMUP=3
IMPLS="ours trl unsloth" COMPETITORS="" OUT=${OUT:-/tmp/kubetune-dpo-bench} NPAIRS="" OBJECTIVE=dpo
while [[ $# -gt 0 ]]; do
  case $1 in
    --shape) SHAPE=$2; shift 2 ;; --methods) METHODS=$2; shift 2 ;; --prompt) PROMPT=$2; shift 2 ;;
    --answer) ANSWER=$2; shift 2 ;; --micro-batch) MB=$2; shift 2 ;; --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;; --impls) IMPLS=$2; shift 2 ;;
    --competitors) COMPETITORS=$2; shift 2 ;; --out) OUT=$2; shift 2 ;; --pairs) NPAIRS=$2; shift 2 ;;
    --objective) OBJECTIVE=$2; shift 2 ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
done
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
RESULTS=$OUT/results.jsonl; : >"$RESULTS"
[[ -d $OUT/inputs/model ]] || python3 "$HERE/make_bench_inputs.py" "$OUT/inputs" --shape "$SHAPE" --seq 64 --records 1
PAIRS=$OUT/inputs/pairs.jsonl
NPAIRS=${NPAIRS:-$(( (STEPS + WARMUP) * MB ))}
python3 - "$PAIRS" "$PROMPT" "$ANSWER" "$NPAIRS" <<'PY'
import json, random, sys
path, prompt, answer, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(0)
def text(chars):
    out = ""
    while len(out) < chars:
        out += "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) + " "
    return out[:chars]
with open(path, "w") as f:
    for _ in range(n):
        # The prompt ends with a newline, a token of its own: no merge across the boundary.
        f.write(json.dumps({"prompt": text(prompt - 1) + "\n", "chosen": text(answer),
                            "rejected": text(answer)}) + "\n")
PY
DATA=$PAIRS FORMAT=preference
if [[ $OBJECTIVE == kto ]]; then  # the same pairs as unpaired examples, as dpo_bench.py makes them
  DATA=$OUT/inputs/unpaired.jsonl FORMAT=unpaired_preference
  python3 - "$PAIRS" "$DATA" <<'PY'
import json, sys
with open(sys.argv[2], "w") as f:
    for line in open(sys.argv[1]):
        r = json.loads(line)
        for answer in ("chosen", "rejected"):
            f.write(json.dumps({"prompt": r["prompt"], "completion": r[answer],
                                "label": answer == "chosen"}) + "\n")
PY
fi
MAXLEN=$((PROMPT + ANSWER + 8))
[[ -n $COMPETITORS || ! -d $HERE/../.bench-competitors ]] || COMPETITORS=$HERE/../.bench-competitors
site_env=()
if [[ -n $COMPETITORS ]]; then
  if [[ ! -d $COMPETITORS/site && -f $COMPETITORS/site.tar.gz ]]; then tar -C "$COMPETITORS" -xzf "$COMPETITORS/site.tar.gz"; fi
  # Without it TRL and Unsloth do not import (the GPU machines have neither): their rows fail.
  [[ -d $COMPETITORS/site ]] && site_env=(PYTHONPATH="$(cd "$COMPETITORS/site" && pwd)${PYTHONPATH:+:$PYTHONPATH}")
fi
for method in $METHODS; do
  for impl in $IMPLS; do
    run=$OUT/$method-$impl; rm -rf "$run"; mkdir -p "$run"
    if [[ $impl == ours ]]; then
      cat >"$run/config.json" <<JSON
{"model": {"path": "$OUT/inputs/model", "dtype": "bfloat16", "gradientCheckpointing": true},
 "data": {"train": "$DATA", "format": "$FORMAT", "maxLength": $MAXLEN, "shuffle": false},
 "method": {"type": "$method", "lora": {"r": 16, "alpha": 32, "targetModules": ["all-linear"]}},
 "training": {"objective": "$OBJECTIVE", "preference": {"beta": 0.1}, "maxSteps": $((STEPS + WARMUP)),
              "microBatchSize": $MB, "learningRate": 5e-6, "lrScheduler": "constant",
              "maxGradNorm": 1.0, "logEverySteps": 1},
 "output": {"dir": "$run/out"}, "checkpoint": {"resume": "never"}}
JSON
      "$BIN/kubetune-trainer" train --config "$run/config.json" >"$run/log.txt" 2>&1 || { tail -30 "$run/log.txt"; continue; }
      "$BIN/kubetune-trainer" preflight --config "$run/config.json" >"$run/preflight.json" 2>/dev/null || true
      python3 - "$run" "$method" "$WARMUP" "$STEPS" "$MB" "$NPAIRS" "$OBJECTIVE" >>"$RESULTS" <<'PY'
import json, re, sys
run, method, warmup, steps, mb = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
objective = sys.argv[7]
pairs = int(sys.argv[6]) * (2 if objective == "kto" else 1)  # what the reference pass read
rows = [json.loads(l) for l in open(f"{run}/out/metrics_history.jsonl") if '"loss"' in l]
timed = [r for r in rows if r["step"] > warmup]
tokens, seconds = sum(r["global_tokens"] for r in timed), sum(r["step_seconds"] for r in timed)
m = re.search(r"reference_seconds=([0-9.]+)", open(f"{run}/log.txt").read())
reference = float(m.group(1)) if m else None
share = steps * mb / pairs  # the timed steps' share of the pairs the reference pass read
try:
    estimate = json.load(open(f"{run}/preflight.json"))["memory"]["totalGiB"]
except (OSError, ValueError, KeyError):
    estimate = None
print(json.dumps({"impl": "ours", "objective": objective, "method": method, "gpus": 1, "recompute": "on",
                  "pairs_per_step": mb, "tokens_per_s_per_gpu": tokens / seconds,
                  "tokens_per_s_with_reference": tokens / (seconds + share * reference) if reference else None,
                  "reference_seconds": reference, "reference_pairs": pairs,
                  "peak_gib": max(r.get("gpu_memory_peak_bytes", 0) for r in rows) / 2**30,
                  "preflight_estimate_gib": estimate, "first_loss": rows[0]["loss"]}))
PY
    else
      env HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 UNSLOTH_COMPILE_LOCATION="$OUT/unsloth_compiled_cache" "${site_env[@]}" \
        python3 "$HERE/dpo_bench.py" --impl "$impl" --model "$OUT/inputs/model" --pairs "$PAIRS" --method "$method" \
        --micro-batch "$MB" --steps "$STEPS" --warmup-steps "$WARMUP" --max-length "$MAXLEN" --objective "$OBJECTIVE" \
        >"$run/stdout.txt" 2>"$run/stderr.txt" && grep '^{"impl"' "$run/stdout.txt" >>"$RESULTS" ||
        { tail -n 20 "$run/stderr.txt"; echo "{\"impl\": \"$impl\", \"method\": \"$method\", \"failed\": true}" >>"$RESULTS"; }
    fi
    tail -1 "$RESULTS"
  done
done
python3 - "$RESULTS" "$SHAPE" "$PROMPT" "$ANSWER" <<'PY'
import json, sys
path, shape, prompt, answer = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(l) for l in open(path) if l.strip()]
with open(path, "w") as f:
    for r in rows:
        f.write(json.dumps({"shape": shape, "prompt_tokens": prompt, "answer_tokens": answer, **r}) + "\n")
print(f"{'method':6} {'impl':8} {'tokens/s':>9} {'w/ ref':>9} {'peak GiB':>9} {'first loss':>11}  ours/impl")
for r in rows:
    if r.get("failed"):
        print(f"{r['method']:6} {r['impl']:8} failed"); continue
    ours = next((o for o in rows if o["impl"] == "ours" and o["method"] == r["method"] and not o.get("failed")), None)
    ratio = f"{ours['tokens_per_s_per_gpu'] / r['tokens_per_s_per_gpu']:.2f}x" if ours and r is not ours else ""
    wref = r.get("tokens_per_s_with_reference")
    print(f"{r['method']:6} {r['impl']:8} {r['tokens_per_s_per_gpu']:9.0f} {wref or 0:9.0f} {r['peak_gib']:9.2f} "
          f"{r['first_loss'] if r['first_loss'] is not None else float('nan'):11.5f}  {ratio}")
PY
