#!/usr/bin/env bash
# Preference tuning on the embedded default: a tiny Llama with random weights trains with ORPO (the
# chosen answers' loss and the odds ratio of chosen over rejected, in one stage) on shipped pairs of
# the quickstart's upper-casing task (examples/preference). Before and after, on held-out pairs:
# how often the model finds the chosen answer likelier than the rejected one, and its own answers.
# Then KTO from that model on the same task's unpaired examples (each answer marked desirable or
# not): held-out desirable completions get likelier, undesirable ones less likely.
# No cluster, no GPU; under a minute of training on two CPU workers once set up.
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

echo; echo "== KTO from the ORPO output: the FineTuneJob of $EX/kto-job.yaml (unpaired examples)"
echo "   before (held-out desirable and undesirable completions):"
"$BIN/kubetune-trainer" eval --model $RUN/output --data $EX/unpaired_validation.jsonl | tail -1
sed "s|@ROOT@|$ROOT|g" $EX/kto-job.yaml >$RUN/kto-job.yaml
KUBETUNE_TRAINER="$BIN/kubetune-trainer" "$BIN/kubetune" run $RUN/kto-job.yaml
echo "   after:"
"$BIN/kubetune-trainer" eval --model $RUN/kto-output --data $EX/unpaired_validation.jsonl | tail -1
echo
echo "models: $RUN/output (ORPO), $RUN/kto-output (KTO)   metrics history (rewards/margins, kl):" \
  "$RUN/*/metrics_history.jsonl"
