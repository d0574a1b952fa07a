#!/usr/bin/env python3
"""distributed.sharding full (ZeRO-3 / FSDP, trainer/train/full_sharding.h) on CPU (Gloo), through
`kubetune-trainer launch`: 2, 3 and 4 processes end with the weights of one process without
sharding, and checkpoints resume on another number of processes. Each function a ctest entry."""
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "train"))
import harness as h  # noqa: E402

# Sizes no number of processes here divides: every unit is padded somewhere. A decoder layer has
# 2*70*70 + 2*70*14 (attention, 1 KV head of 14) + 3*70*131 (MLP) + 2*70 (norms) = 39410
# elements, 2 mod 3 and 2 mod 4; the root 259*70 (+70, +259*70 untied), 2 mod 3.
UNEVEN = dict(hidden_size=70, num_attention_heads=5, num_key_value_heads=1, head_dim=14,
              intermediate_size=131, num_hidden_layers=3)
TOLERANCE = 1e-5  # as the DDP equivalence tests (dist_test.py)


def launch(nproc, cfg_path):
    return ["launch", "--nproc-per-node", nproc, "--master-port", h.free_port(), "--", "train", "--config", cfg_path]


def setup(name, n_examples=48, **model_config):
    w = h.workdir(name)
    model = h.tiny_model(w / "model", **{**UNEVEN, **model_config})
    data = h.subset(h.EXAMPLE / "train.jsonl", w / "data.jsonl", n_examples)
    return w, model, data


def train(w, model, data, name, world, micro, accum, sharding, method="full", recompute=False, steps=4,
          checkpoint=None, validation=None, merged_from_random_base=False, method_extra=None):
    """One run with a global batch of micro x accum x world (`steps` None: one epoch); returns its log."""
    cfg = h.config(model, data, w / name, method=method, microBatchSize=micro, gradientAccumulationSteps=accum,
                   learningRate=1e-2, maxGradNorm=0.05, **({"maxSteps": steps} if steps else {}))
    cfg["distributed"].update(sharding=sharding)
    cfg["method"].update(method_extra or {})
    if method == "qlora":  # fp32 compute over the 4-bit base, as the QLoRA parity test runs it
        cfg["model"]["dtype"] = "float32"
    if merged_from_random_base:  # the merged output then reads the (sharded) base from the run
        cfg["model"]["init"] = "random"
        cfg["output"]["saveMerged"] = True
    cfg["model"]["gradientCheckpointing"] = recompute
    # An evaluation after step 2 and at the end: forwards without backward, between steps.
    cfg["data"]["validation"] = str(validation or data)
    cfg["training"]["evalEverySteps"] = 2
    if checkpoint:
        cfg["checkpoint"] = checkpoint
    path = h.write_config(w / f"{name}.json", cfg)
    p = h.run(["train", "--config", path] if world == 1 else launch(world, path))
    out = p.stdout + p.stderr
    fully = re.search(r"weights fully sharded across processes \((\d+) units, (\d+) of (\d+) elements", out)
    assert bool(fully) == (sharding == "full"), out[-2000:]
    if fully:
        units, mine, total = map(int, fully.groups())
        # Each process holds its padded 1/N of every unit: a little more than total / N.
        assert total / world <= mine < total / world + units, fully.group(0)
        print(f"{name}: {fully.group(0)}")
        # The storage really freed: at most the root and two decoder layers gathered at once.
        peak = re.search(r"at most (\d+) of (\d+) sharded elements gathered at once \(the root's (\d+) and "
                         r"two layers' (\d+)\)", out)
        assert peak, out[-2000:]
        held, padded, root, two_layers = map(int, peak.groups())
        print(f"{name}: {peak.group(0)}")
        assert held == padded if world == 1 else held <= root + two_layers < padded, peak.group(0)
    return out


def clipped(out):
    """The gradient norms the log printed (3 decimals): the tests clip at 0.05, below all of them."""
    norms = [float(x) for x in re.findall(r"grad_norm=([0-9.e+-]+)", out)]
    assert norms and min(norms) > 0.05, norms
    return norms


def eval_losses(out):
    losses = [float(x) for x in re.findall(r"eval step=\d+ eval_loss=([0-9.]+)", out)]
    assert len(losses) >= 2, out[-2000:]
    return losses


def compare(reference, other, what):
    diff = h.max_abs_diff(reference, other)
    print(f"{what}: max |w - w_reference| = {diff:.3g}")
    assert diff <= TOLERANCE, (what, diff)


def same_weights_as_one_process():
    """Full fine-tuning, global batch 12 with accumulation and clipping to the global norm: one
    process without sharding is the reference; full sharding on 1 (the degenerate case), 2, 3 and
    4 processes, and on 3 with gradient checkpointing, end with its weights. Tied and untied
    embeddings (the root unit holds one or two vocabulary matrices)."""
    for tied in (True, False):
        w, model, data = setup("fsdp-equal-" + ("tied" if tied else "untied"), tie_word_embeddings=tied)
        reference_log = train(w, model, data, "reference", 1, 2, 6, "none")
        reference = h.weights(w / "reference")
        moved = h.max_abs_diff(h.weights(model), reference)
        assert moved > 1e-3, moved
        norms = clipped(reference_log)
        # name: world, micro-batch, accumulation, gradient checkpointing
        runs = {"1": (1, 2, 6, False), "2": (2, 2, 3, False), "3": (3, 2, 2, False), "4": (4, 1, 3, False),
                "3-recompute": (3, 4, 1, True)}
        for name, (world, micro, accum, recompute) in runs.items():
            out = train(w, model, data, f"full{name}", world, micro, accum, "full", recompute=recompute)
            ours = clipped(out)
            assert len(ours) == len(norms) and max(abs(a - b) for a, b in zip(norms, ours)) <= 1e-3, (norms, ours)
            evals, reference_evals = eval_losses(out), eval_losses(reference_log)
            assert len(evals) == len(reference_evals), (evals, reference_evals)
            assert max(abs(a - b) for a, b in zip(evals, reference_evals)) <= 2e-4, (evals, reference_evals)
            compare(reference, h.weights(w / f"full{name}"), f"tied={tied} sharding full on {name}")


def short_tail_and_uneven_evaluation():
    """One epoch of 38 examples in global batches of 12 on 3 processes (micro-batch 1 x 4): the last
    step's 2 examples go to processes 0 and 1, and process 2's micro-batches are all empty while
    its peers' first is not; it still joins their gathers and reductions (a forward on one padding
    token). 7 validation examples give the processes 3, 2 and 2 forwards, evened out the same way.
    Weights and evaluation losses equal one process's."""
    w, model, data = setup("fsdp-tail", n_examples=38)
    validation = h.subset(h.EXAMPLE / "train.jsonl", w / "validation.jsonl", 7)
    reference_log = train(w, model, data, "reference", 1, 2, 6, "none", steps=None, validation=validation)
    out = train(w, model, data, "full3", 3, 1, 4, "full", steps=None, validation=validation)
    assert "step=4/4" in out, out[-2000:]
    evals, reference_evals = eval_losses(out), eval_losses(reference_log)
    assert len(evals) == len(reference_evals) and max(abs(a - b) for a, b in zip(evals, reference_evals)) <= 2e-4, \
        (evals, reference_evals)
    compare(h.weights(w / "reference"), h.weights(w / "full3"), "38 examples on 3 processes")


def lora_same_as_one_process():
    """LoRA with the frozen base fully sharded (the adapters stay whole on every process): the
    adapters of 2 and 3 processes equal one process's without sharding, and so does a merged
    model over a randomly drawn base."""
    w, model, data = setup("fsdp-lora")
    train(w, model, data, "reference", 1, 2, 3, "none", method="lora")
    reference = h.weights(w / "reference")
    assert any("lora_A" in k for k in reference), list(reference)[:5]
    for world, micro, accum in ((2, 1, 3), (3, 2, 1)):
        train(w, model, data, f"full{world}", world, micro, accum, "full", method="lora")
        compare(reference, h.weights(w / f"full{world}"), f"lora, sharding full on {world}")
    # A merged model over a randomly drawn base: the base exists only in the run, split across
    # processes, and is gathered a layer at a time as the merged folder is written.
    train(w, model, data, "merged-reference", 1, 2, 3, "none", method="lora", merged_from_random_base=True)
    train(w, model, data, "merged-full2", 2, 1, 3, "full", method="lora", merged_from_random_base=True)
    merged = h.weights(w / "merged-reference" / "merged")
    assert "model.layers.0.mlp.down_proj.weight" in merged and not any("lora" in k for k in merged), list(merged)[:5]
    compare(merged, h.weights(w / "merged-full2" / "merged"), "merged over a random base, sharding full on 2")


def resume_on_other_process_counts():
    """A fully sharded run on 2 processes checkpoints at step 2; resumed from that checkpoint on
    3 and 4 processes (sharding full) and on 1 (no sharding), which put its two parts together,
    with the same global batch, each ends with the weights of the uninterrupted 2-process
    run and of one process without sharding. And a checkpoint written under `optimizer` sharding
    on 3 resumes under `full` on 2."""
    w, model, data = setup("fsdp-resume")
    every2 = {"resume": "never", "dir": str(w / "ck"), "everySteps": 2}
    train(w, model, data, "straight", 2, 2, 3, "full", checkpoint=every2)
    halfway = w / "ck" / "step-00000002"
    assert (halfway / "trainer_state.json").exists(), sorted(p.name for p in (w / "ck").iterdir())
    # Each process wrote its own slices (nothing was gathered to rank 0): two parts of about one
    # size (rank 0's adds the step counter, and a unit's padding may fall to either).
    sizes = [(halfway / f"optimizer-0000{r}-of-00002.safetensors").stat().st_size for r in (0, 1)]
    assert 0.8 < sizes[0] / sizes[1] < 1.25, sizes
    train(w, model, data, "reference", 1, 2, 6, "none")
    reference = h.weights(w / "reference")
    compare(reference, h.weights(w / "straight"), "uninterrupted on 2")
    for world, micro, accum, sharding in ((3, 2, 2, "full"), (4, 1, 3, "full"), (1, 2, 6, "none")):
        name = f"resumed{world}"
        out = train(w, model, data, name, world, micro, accum, sharding,
                    checkpoint={"resume": str(halfway), "dir": str(w / f"ck{world}"), "everySteps": 0})
        assert f"resuming from {halfway} at step=2/4" in out, out[-2000:]
        compare(reference, h.weights(w / name), f"resumed on {world} ({sharding})")
    # The other way: a checkpoint of 3 processes with the optimizer alone sharded (ZeRO-2, whose
    # slices are of gradient buckets, not of units) resumed fully sharded on 2.
    train(w, model, data, "zero2", 3, 2, 2, "optimizer", checkpoint={**every2, "dir": str(w / "ck-zero2")})
    zero2_halfway = w / "ck-zero2" / "step-00000002"
    assert (zero2_halfway / "optimizer-00002-of-00003.safetensors").exists(), sorted(zero2_halfway.iterdir())
    out = train(w, model, data, "zero2-resumed2", 2, 2, 3, "full",
                checkpoint={"resume": str(zero2_halfway), "dir": str(w / "ck-zero2-resumed"), "everySteps": 0})
    assert f"resuming from {zero2_halfway} at step=2/4" in out, out[-2000:]
    compare(reference, h.weights(w / "zero2-resumed2"), "written under optimizer on 3, resumed under full on 2")


def qlora_same_as_one_process():
    """QLoRA with its 4-bit base fully sharded (the blocks' bytes and their scales split like the
    weights, a flat buffer each, and gathered a layer at a time; the adapters stay whole): the
    adapters of 2 and 3 processes equal one process's without sharding, with double quantization
    and without, and the log says the base was split."""
    w, model, data = setup("fsdp-qlora")
    for double_quant in (True, False):
        quant = {"quantization": {"doubleQuant": double_quant, "computeDtype": "float32"}}
        ref = f"reference-{double_quant}"
        train(w, model, data, ref, 1, 2, 3, "none", method="qlora", method_extra=quant)
        reference = h.weights(w / ref)
        assert any("lora_A" in k for k in reference), list(reference)[:5]
        for world, micro, accum in ((2, 1, 3), (3, 2, 1)):
            name = f"full{world}-{double_quant}"
            out = train(w, model, data, name, world, micro, accum, "full", method="qlora", method_extra=quant)
            split = re.search(r"of the 4-bit base, (\d+) of (\d+) bytes", out)
            assert split and int(split.group(2)) / world <= int(split.group(1)) < int(split.group(2)), out[-2000:]
            compare(reference, h.weights(w / name), f"qlora (double quant {double_quant}), sharding full on {world}")


if __name__ == "__main__":
    h.main({f.__name__: f for f in [same_weights_as_one_process, short_tail_and_uneven_evaluation,
                                     lora_same_as_one_process,
                                     resume_on_other_process_counts, qlora_same_as_one_process]})
