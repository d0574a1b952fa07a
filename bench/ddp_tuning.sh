#!/usr/bin/env bash
# Full fine-tuning (METHOD=lora for LoRA) on N GPUs under a few gradient synchronisation settings, printing the step's phases
# from metrics_history.jsonl. Run from the repository root on a GPU machine with the packed trainer
# in .bench-pkg (see package_trainer.sh):
#   bash bench/ddp_tuning.sh [GPUS] [NAME:BUCKET_MB:SPARSE_EMBEDDING:SHARD_OPTIMIZER[:ENV=VALUE...] ...]
# e.g. bash bench/ddp_tuning.sh 4 default:100:true:true allreduce:100:true:false ctas8:100:true:true:NCCL_MAX_CTAS=8
set -e
GPUS=${1:-2}; shift || true
VARIANTS=("$@")
[[ ${#VARIANTS[@]} -gt 0 ]] || VARIANTS=(default:100:true:optimizer allreduce:100:true:none dense-embedding:100:false:optimizer full-sharding:100:true:full)
. .bench-pkg/env.sh; export NCCL_NVLS_ENABLE=0
O=${O:-/tmp/kt}; [[ -d $O/inputs/model ]] || python3 bench/make_bench_inputs.py $O/inputs --shape llama-3.2-1b --seq 2048 >/dev/null 2>&1
run() {  # name bucket_mb sparse sharding [env...]
  name=$1; bucket=$2; sparse=$3; shard=$4; shift 4
  mkdir -p $O/$name
  bench/trainer_config.sh $O/inputs $O/$name/out "${METHOD:-full}" 12 4 2048 \
    "{\"bucketSizeMb\": $bucket, \"sparseEmbeddingGradients\": $sparse, \"sharding\": \"$shard\"}" >$O/$name/config.json
  env "$@" .bench-pkg/kubetune-trainer launch --nproc-per-node $GPUS --master-port $((29700 + RANDOM % 100)) -- train --config $O/$name/config.json > $O/$name/log.txt 2>&1 || { tail -5 $O/$name/log.txt; return; }
  python3 - $O/$name/out/metrics_history.jsonl "$name x$GPUS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][4:]
m = lambda k: sum(r[k] for r in rows) / len(rows) * 1000
print(f"{sys.argv[2]:22s} step {m('step_seconds'):6.1f} ms  fb {m('forward_backward_seconds'):6.1f}  wait {m('allreduce_wait_seconds'):5.1f}  opt {m('optimizer_seconds'):5.1f}  tok/s/GPU {8192/m('step_seconds')*1000:7.0f}")
PY
}
for v in "${VARIANTS[@]}"; do
  IFS=: read -r -a f <<<"$v"
  run "${f[@]}"
done
