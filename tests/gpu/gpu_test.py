#!/usr/bin/env python3
"""Tests of `kubetune-trainer` on a GPU, each a ctest entry (`gpu_test.py NAME`) that exits 77,
skipped, where torch sees no GPU. On a GPU machine from a packed build (bench/package_trainer.sh):
  KUBETUNE_TRAINER=PACK/kubetune-trainer KUBETUNE_REPO=. PYTHONPATH=tests/train python3 tests/gpu/gpu_test.py NAME
The model is Llama-3.2-1B's shape with weights the trainer draws (model.init random), at 2048 tokens."""
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

import harness as h

SEQ = 2048
# Adam's first updates are about lr * sign(g): with the default epsilon two runs on a GPU, whose
# kernels need not repeat bitwise, differ by whole updates where g is near zero. A large epsilon
# keeps the update smooth in g, so a comparison sees the gradients (tests/train/harness.py).
ADAM_EPSILON = 1e-3


def bench_inputs(w: Path) -> Path:
    if not (w / "inputs" / "model").exists():
        subprocess.run([sys.executable, str(h.REPO / "bench" / "make_bench_inputs.py"), str(w / "inputs"),
                        "--shape", "llama-3.2-1b", "--seq", str(SEQ), "--records", "64", "--config-only"],
                       check=True, capture_output=True)
    return w / "inputs"


def lora_config(inputs: Path, out: Path, micro, global_batch, steps) -> dict:
    return {"model": {"path": str(inputs / "model"), "dtype": "bfloat16", "init": "random"},
            "data": {"train": str(inputs / "data.jsonl"), "format": "text", "lossOn": "all",
                     "maxLength": SEQ, "shuffle": False},
            "method": {"type": "lora", "lora": {"r": 16, "alpha": 32, "targetModules": ["all-linear"]}},
            "training": {"maxSteps": steps, "microBatchSize": micro, "globalBatchSize": global_batch,
                         "learningRate": 1e-3, "lrScheduler": "constant", "maxGradNorm": 1.0,
                         "logEverySteps": 1, "seed": 3, "adamEpsilon": ADAM_EPSILON},
            "output": {"dir": str(out)}, "checkpoint": {"resume": "never"}}


def preflight_gib(inputs: Path, w: Path, micro) -> float:
    path = h.write_config(w / f"preflight-{micro}.json", lora_config(inputs, w / "p", micro, micro, 1))
    return json.loads(h.run(["preflight", "--config", path]).stdout)["memory"]["totalGiB"]


def out_of_memory_step_is_rerun_smaller():
    """The caching allocator is capped (KUBETUNE_TEST_GPU_MEMORY_FRACTION) between the preflight's
    estimates for micro-batch 4 and 8, so the first step at 8 really runs out of GPU memory. The
    run re-runs it at 4 x 2 accumulation and ends with the weights of a run at 4 from the start, as
    close as two runs at 4 are to each other (GPU kernels need not be bitwise repeatable)."""
    w = h.workdir("gpu-oom")
    inputs = bench_inputs(w)
    small, large = preflight_gib(inputs, w, 4), preflight_gib(inputs, w, 8)
    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    fraction = (small + large) / 2 / total
    print(f"estimates: micro-batch 4 {small} GiB, 8 {large} GiB; cap {fraction * total:.1f} of {total:.1f} GiB")
    outs = {}
    # "half-batch" sees 4 examples a step instead of 8: how far a wrong update lands (the test
    # must tell it from the noise, or it proves nothing).
    for name, micro, global_batch, env in (
            ("oom", 8, 8, {"KUBETUNE_TEST_GPU_MEMORY_FRACTION": f"{fraction:.4f}"}),
            ("reference", 4, 8, {}), ("reference-again", 4, 8, {}), ("half-batch", 4, 4, {})):
        cfg = lora_config(inputs, w / name, micro, global_batch, 3)
        p = h.run(["train", "--config", h.write_config(w / f"{name}.json", cfg)], timeout=500,
                  env={**os.environ, **env})
        outs[name] = p.stdout + p.stderr
    log = outs["oom"]
    assert "step 1 ran out of GPU memory at micro-batch 8: running it again at micro-batch 4" in log, log[-3000:]
    assert "CUDA out of memory" in log, log[-3000:]  # a real allocation failure, not an injected one
    weights = {n: h.weights(w / n) for n in outs}
    moved = h.max_abs_diff(weights["reference"], {k: torch.zeros_like(v) for k, v in weights["reference"].items()})
    noise = h.max_abs_diff(weights["reference"], weights["reference-again"])
    diff = h.max_abs_diff(weights["reference"], weights["oom"])
    wrong = h.max_abs_diff(weights["reference"], weights["half-batch"])
    print(f"max |w_oom - w_reference| = {diff:.3g}; two reference runs differ by {noise:.3g}; "
          f"a run on half the batch by {wrong:.3g}; |w| up to {moved:.3g}")
    assert wrong > 5 * max(noise, 1e-6), (wrong, noise)
    assert diff <= max(2 * noise, 1e-6), (diff, noise)


def auto_micro_batch_runs_at_its_choice():
    """microBatchSize auto with a global batch of 64: the trainer chooses from this GPU's memory
    what the preflight chooses for it, runs at that size without running out of memory, and its
    measured peak stays under the 90% the choice allowed."""
    w = h.workdir("gpu-auto")
    inputs = bench_inputs(w)
    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    cfg = lora_config(inputs, w / "out", "auto", 64, 3)
    path = h.write_config(w / "auto.json", cfg)
    planned = json.loads(h.run(["preflight", "--config", path, "--gpu-memory-gib", f"{total}"]).stdout)["microBatch"]
    log = h.run(["train", "--config", path], timeout=500)
    text = log.stdout + log.stderr
    print(f"preflight chose {planned['size']} x {planned['accumulation']}: {planned['reason']}")
    assert f"training.microBatchSize auto: {planned['size']} x {planned['accumulation']} accumulation" in text, text[-3000:]
    assert "ran out of GPU memory" not in text, text[-3000:]
    steps = [json.loads(l) for l in open(w / "out" / "metrics_history.jsonl") if '"loss"' in l]
    peak = max(s["gpu_memory_peak_bytes"] for s in steps) / 2**30
    print(f"measured peak {peak:.2f} GiB of {total:.1f}")
    assert peak <= 0.9 * total, peak


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("no GPU visible to torch: skipped")
        sys.exit(77)
    h.main({f.__name__: f for f in [out_of_memory_step_is_rerun_smaller, auto_micro_batch_runs_at_its_choice]})
