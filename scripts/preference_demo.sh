#!/usr/bin/env bash
# Preference tuning on the embedded default: a tiny Llama with random weights trains with ORPO (the
# chosen answers' loss and the odds ratio of chosen over rejected, in one stage) on shipped pairs of
# the quickstart's upper-casing task (examples/preference). Before and after, on held-out pairs:
# how often the model finds the chosen answer likelier than the rejected one, and its own answers.
# No cluster, no GPU; about 30 s of training on two CPU workers once set up.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${KUBETUNE_CACHE:-$HOME/.cache/kubetune}
"$ROOT/scripts/setup.sh"
BIN=$(cat "$CACHE/build/last-build-dir")/bin
cd "$ROOT"

EX=examples/preference
RUN=runs/preference
rm -rf "$RUN"
"$BIN/kubetune-trainer" init-model --config examples/default/model_config.json \
  --tokenizer examples/default/tokenizer --out $RUN/base-model --seed 0

echo; echo "== before training (held-out pairs; expected = the chosen answer)"
"$BIN/kubetune-trainer" eval --model $RUN/base-model --data $EX/validation.jsonl --show 5

echo; echo "== ORPO: the FineTuneJob of $EX/job.yaml as local processes (2 CPU workers)"
sed "s|@ROOT@|$ROOT|g" $EX/job.yaml >$RUN/job.yaml
KUBETUNE_TRAINER="$BIN/kubetune-trainer" "$BIN/kubetune" run $RUN/job.yaml

echo; echo "== after training (held-out pairs)"
"$BIN/kubetune-trainer" eval --model $RUN/output --data $EX/validation.jsonl --show 5
echo
echo "model: $RUN/output   metrics history (rewards/accuracies, rewards/margins): $RUN/output/metrics_history.jsonl"
