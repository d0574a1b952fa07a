#!/usr/bin/env python3
"""model.precision fp8 learns what bf16 learns: the held-out loss of an FP8 run stays within 1.5%
of the same run in bf16 at every evaluation point, over 300 steps of a task that can be learned
(not random tokens), for full fine-tuning and for LoRA. Each is a ctest entry
(`fp8_convergence_test.py NAME`) that exits 77, skipped, without a GPU of compute capability 9.0+.
On a GPU machine from a packed build (bench/package_trainer.sh):
  KUBETUNE_TRAINER=PACK/kubetune-trainer KUBETUNE_REPO=. PYTHONPATH=tests/train \\
      python3 tests/gpu/fp8_convergence_test.py NAME

The task: text drawn from a Markov chain over 256 made-up words, each followed by one of 4 others
(one character per token with the demo tokenizer); the loss floor is log(4) per word. The base: a
Llama of 8 layers, hidden 768, pre-trained in bf16 for 300 steps on one chain (it learns the
spelling and that chain's transitions). The fine-tuning, in bf16 and in FP8 from the same base,
data order and seed: 300 steps on a second chain with other transitions, which full fine-tuning
or LoRA r16 on all linear layers must learn. (Pre-training a model from scratch in FP8 is not what
this tool does; there, on this tiny model, the steep early descent ran up to 15% behind bf16's
and ended 1.7% above it.)"""
import json
import random
import sys
from pathlib import Path

import torch

import harness as h

STEPS, EVAL_EVERY, SEQ, MICRO = 300, 25, 512, 16
TOLERANCE = 0.015


def words(seed: int):
    rng = random.Random(seed)
    out = set()
    while len(out) < 256:
        out.add("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 8))))
    return sorted(out)


def chain_text(vocab, successors, rng: random.Random) -> str:
    w, text = rng.randrange(len(vocab)), []
    while sum(len(t) + 1 for t in text) < SEQ + 32:
        text.append(vocab[w])
        w = rng.choice(successors[w])
    return " ".join(text)


def write_task(dest: Path, transitions_seed: int) -> tuple:
    """train.jsonl (STEPS * MICRO records) and validation.jsonl (64 held-out records)."""
    vocab = words(0)
    rng = random.Random(transitions_seed)
    successors = [rng.sample(range(len(vocab)), 4) for _ in vocab]
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, n, seed in (("train", STEPS * MICRO, transitions_seed + 1), ("validation", 64, transitions_seed + 2)):
        r = random.Random(seed)
        path = dest / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"text": chain_text(vocab, successors, r)}) + "\n" for _ in range(n)))
        paths.append(path)
    return tuple(paths)


def config(model: Path, data: tuple, out: Path, method: str, precision: str, lr: float) -> dict:
    return {"model": {"path": str(model), "dtype": "bfloat16", "precision": precision},
            "data": {"train": str(data[0]), "validation": str(data[1]), "format": "text", "lossOn": "all",
                     "maxLength": SEQ, "shuffle": True},
            "method": {"type": method, "lora": {"r": 16, "alpha": 32, "targetModules": ["all-linear"]}},
            "training": {"maxSteps": STEPS, "microBatchSize": MICRO, "gradientAccumulationSteps": 1,
                         "learningRate": lr, "lrScheduler": "cosine", "warmupSteps": 20,
                         "maxGradNorm": 1.0, "seed": 5, "logEverySteps": 25, "evalEverySteps": EVAL_EVERY},
            "output": {"dir": str(out)}, "checkpoint": {"resume": "never"}}


def train(w: Path, name: str, model: Path, data: tuple, method: str, precision: str, lr: float) -> dict:
    out = w / name
    path = h.write_config(w / f"{name}.json", config(model, data, out, method, precision, lr))
    p = h.run(["train", "--config", path], timeout=500)
    log = p.stdout + p.stderr
    if precision == "fp8":
        assert "model.precision fp8: 56 decoder linear layers take their products in FP8" in log, log[-3000:]
    evals = {}
    for line in open(out / "metrics_history.jsonl"):
        r = json.loads(line)
        if "eval_loss" in r:
            evals[r["step"]] = r["eval_loss"]
    return evals


def compare(bf16: dict, fp8: dict, what: str) -> None:
    assert bf16.keys() == fp8.keys() and len(bf16) >= STEPS // EVAL_EVERY, (bf16.keys(), fp8.keys())
    worst = 0.0
    print(f"{what}: step  bf16 eval loss  fp8 eval loss  fp8/bf16 - 1")
    for step in sorted(bf16):
        gap = fp8[step] / bf16[step] - 1
        worst = max(worst, abs(gap))
        print(f"{what}: {step:4d}  {bf16[step]:14.4f}  {fp8[step]:13.4f}  {gap:+12.2%}")
    first, last = bf16[min(bf16)], bf16[max(bf16)]
    print(f"{what}: largest gap {worst:.2%} (allowed {TOLERANCE:.1%}); bf16 went from {first:.3f} to {last:.3f}")
    assert last < 0.95 * first, "the task was not learned: the comparison would prove nothing"
    assert worst <= TOLERANCE, f"FP8's held-out loss is {worst:.2%} from bf16's"


def pretrained_base(w: Path) -> Path:
    """The base both precisions fine-tune: pre-trained in bf16 on the first chain."""
    model = h.tiny_model(w / "model", seed=0, hidden_size=768, intermediate_size=2048, num_hidden_layers=8,
                         num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=SEQ + 64,
                         tie_word_embeddings=False)
    train(w, "base", model, write_task(w / "base-data", 11), "full", "default", 1e-3)
    return w / "base"


def fine_tune_in_both(method: str, lr: float):
    w = h.workdir(f"fp8-{method}")
    base, data = pretrained_base(w), write_task(w / "data", 23)
    compare(train(w, "bf16", base, data, method, "default", lr), train(w, "fp8", base, data, method, "fp8", lr),
            method)


def fp8_full_converges_like_bf16():
    fine_tune_in_both("full", 2e-4)


def fp8_lora_converges_like_bf16():
    fine_tune_in_both("lora", 1e-3)


if __name__ == "__main__":
    if not torch.cuda.is_available() or torch.cuda.get_device_capability(0) < (9, 0):
        print("no GPU of compute capability 9.0+ visible to torch: skipped")
        sys.exit(77)
    h.main({f.__name__: f for f in [fp8_full_converges_like_bf16, fp8_lora_converges_like_bf16]})
