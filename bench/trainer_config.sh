#!/usr/bin/env bash
# Prints the benchmark's trainer config (JSON) for run_bench.sh and ddp_tuning.sh:
#   bench/trainer_config.sh INPUTS_DIR OUT_DIR METHOD STEPS MICRO_BATCH SEQ [DISTRIBUTED_JSON] [RECOMPUTE]
#                           [PRECISION]
# RECOMPUTE: true for gradient checkpointing, offload for checkpointing with the saved inputs in host
# memory (model.offloadCheckpoints), default false; pass "{}" as DISTRIBUTED_JSON to set it alone.
# PRECISION: model.precision, default or fp8. LORA_RANK in the environment: the adapters' rank
# (default 16; alpha is twice the rank). LORA_TARGETS: "attention" adapts q, k, v and o only
# (default: all linear layers); hf_baseline.py reads the same variable.
# Same work as hf_baseline.py: text data with the loss on every token, no shuffle, LoRA r16/alpha 32
# on all linear layers, constant learning rate, clipping at 1.0, bf16 autocast. A model folder
# without weights (make_bench_inputs.py writes only the config of shapes too big for the disk) is
# initialised at random by the trainer (model.init).
set -euo pipefail
inputs=$1 out=$2 method=$3 steps=$4 mb=$5 seq=$6 distributed=${7:-"{}"} recompute=${8:-false}
precision=${9:-default}
rank=${LORA_RANK:-16}
targets='["all-linear"]'
[[ ${LORA_TARGETS:-all-linear} == attention ]] && targets='["q_proj", "k_proj", "v_proj", "o_proj"]'
[[ $recompute == true || $recompute == false || $recompute == offload ]] ||
  { echo "RECOMPUTE must be true, false or offload" >&2; exit 2; }
offload=false
if [[ $recompute == offload ]]; then recompute=true offload=true; fi
init=pretrained
compgen -G "$inputs/model/*.safetensors" >/dev/null || init=random
cat <<JSON
{"model": {"path": "$inputs/model", "dtype": "bfloat16", "gradientCheckpointing": $recompute,
           "offloadCheckpoints": $offload, "init": "$init", "precision": "$precision"},
 "data": {"train": "$inputs/data.jsonl", "format": "text", "lossOn": "all", "maxLength": $seq, "shuffle": false},
 "method": {"type": "$method", "lora": {"r": $rank, "alpha": $((2 * rank)), "targetModules": $targets}},
 "training": {"maxSteps": $steps, "microBatchSize": $mb, "gradientAccumulationSteps": 1,
              "learningRate": 1e-4, "lrScheduler": "constant", "maxGradNorm": 1.0, "logEverySteps": 5},
 "distributed": $distributed,
 "output": {"dir": "$out"}, "checkpoint": {"resume": "never"}}
JSON
