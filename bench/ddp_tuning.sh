#!/usr/bin/env bash
# Full fine-tuning (METHOD=lora for LoRA) on N GPUs under a few gradient synchronisation and
# sharding settings, printing the step's phases, tokens/s per GPU, peak memory and the first
# step's loss from metrics_history.jsonl. Run from the repository root on a GPU machine with the
# packed trainer in .bench-pkg (see package_trainer.sh):
#   bash bench/ddp_tuning.sh [GPUS] [NAME:BUCKET_MB:SPARSE_EMBEDDING:SHARDING[:ENV=VALUE...] ...]
# e.g. bash bench/ddp_tuning.sh 4 default:100:true:optimizer allreduce:100:true:none ctas8:100:true:optimizer:NCCL_MAX_CTAS=8
# Environment: SHAPE (llama-3.2-1b; llama-3.1-8b is drawn at random by the trainer, no weights
# written), MB (micro-batch, 4), SEQ (2048), RECOMPUTE (false | true | offload), STEPS (12; the
# first 4 are not timed), METHOD (full), O (work folder, /tmp/kt), COLLECTIVE_TIMEOUT (seconds, 600).
set -e
GPUS=${1:-2}; shift || true
VARIANTS=("$@")
[[ ${#VARIANTS[@]} -gt 0 ]] || VARIANTS=(default:100:true:optimizer allreduce:100:true:none dense-embedding:100:false:optimizer full-sharding:100:true:full)
SHAPE=${SHAPE:-llama-3.2-1b} MB=${MB:-4} SEQ=${SEQ:-2048} RECOMPUTE=${RECOMPUTE:-false} STEPS=${STEPS:-12}
. .bench-pkg/env.sh; export NCCL_NVLS_ENABLE=0
O=${O:-/tmp/kt}; INPUTS=$O/inputs-$SHAPE-$SEQ
only_config=(); [[ $SHAPE == llama-3.2-1b ]] || only_config=(--config-only)
[[ -d $INPUTS/model ]] || python3 bench/make_bench_inputs.py $INPUTS --shape $SHAPE --seq $SEQ --records 256 "${only_config[@]}" >/dev/null 2>&1
run() {  # name bucket_mb sparse sharding [env...]
  name=$1; bucket=$2; sparse=$3; sharding=$4; shift 4
  mkdir -p $O/$name
  bench/trainer_config.sh $INPUTS $O/$name/out "${METHOD:-full}" $STEPS $MB $SEQ \
    "{\"bucketSizeMb\": $bucket, \"sparseEmbeddingGradients\": $sparse, \"sharding\": \"$sharding\", \"timeoutSeconds\": ${COLLECTIVE_TIMEOUT:-600}}" $RECOMPUTE >$O/$name/config.json
  env "$@" .bench-pkg/kubetune-trainer launch --nproc-per-node $GPUS --master-port $((29700 + RANDOM % 100)) -- train --config $O/$name/config.json > $O/$name/log.txt 2>&1 || { tail -5 $O/$name/log.txt; return; }
  python3 - $O/$name/out/metrics_history.jsonl "$name x$GPUS" $((MB * SEQ)) <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
rows = steps[4:]
m = lambda k: sum(r[k] for r in rows) / len(rows) * 1000
peak = max(s.get("gpu_memory_peak_bytes", 0) for s in steps) / 2**30
first = " ".join("%.5f" % s["loss"] for s in steps[:3])
print(f"{sys.argv[2]:22s} step {m('step_seconds'):7.1f} ms  fb {m('forward_backward_seconds'):7.1f}  wait {m('allreduce_wait_seconds'):5.1f}  "
      f"opt {m('optimizer_seconds'):5.1f}  tok/s/GPU {int(sys.argv[3]) / m('step_seconds') * 1000:7.0f}  peak {peak:5.2f} GiB  "
      f"losses {first}")
PY
  rm -rf $O/$name/out/*.safetensors $O/$name/out/checkpoints
}
for v in "${VARIANTS[@]}"; do
  IFS=: read -r -a f <<<"$v"
  run "${f[@]}"
done
