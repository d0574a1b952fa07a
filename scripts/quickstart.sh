#!/usr/bin/env bash
# The embedded default: sets up this machine, makes a tiny Llama with random weights, fine-tunes it
# on the shipped upper-casing chat task with two CPU worker processes, and evaluates it before and
# after on held-out examples. No cluster, no GPU, no model downloads. On a fresh 2-core machine the
# first run (torch download, build of the three binaries, training) took 11 minutes; later runs 1.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${KUBETUNE_CACHE:-$HOME/.cache/kubetune}
"$ROOT/scripts/setup.sh"
BIN=$(cat "$CACHE/build/last-build-dir")/bin
cd "$ROOT"

EX=examples/default
RUN=runs/default
rm -rf "$RUN"
"$BIN/kubetune-trainer" init-model --config $EX/model_config.json --tokenizer $EX/tokenizer \
  --out $RUN/base-model --seed 0

echo; echo "== before training (held-out examples)"
"$BIN/kubetune-trainer" eval --model $RUN/base-model --data $EX/validation.jsonl --show 5

echo; echo "== training: the FineTuneJob of $EX/job.yaml as local processes (2 CPU workers)"
sed "s|@ROOT@|$ROOT|g" $EX/job.yaml >$RUN/job.yaml
KUBETUNE_TRAINER="$BIN/kubetune-trainer" "$BIN/kubetune" run $RUN/job.yaml

echo; echo "== after training (held-out examples)"
"$BIN/kubetune-trainer" eval --model $RUN/output --data $EX/validation.jsonl --show 5
echo
echo "model: $RUN/output   metrics history: $RUN/output/metrics_history.jsonl   chart: $RUN/output/training_curves.svg"
