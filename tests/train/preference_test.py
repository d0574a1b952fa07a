#!/usr/bin/env python3
"""Preference objectives (training.objective dpo, ipo, simpo, orpo, kto) against TRL, the reference
everyone uses: trl's DPOTrainer (loss types sigmoid, hinge, robust, ipo), its CPOTrainer
(loss_type simpo, cpo_alpha 0), ORPOTrainer and KTOTrainer. On the CPU in fp32, on a tiny Llama made by
transformers, the same pairs in the same order and the same hyper-parameters: the loss and TRL's
reward metrics at every step, and the weights after the last step.

`preference_test.py NAME`: NAME is an objective (dpo_sigmoid, dpo_hinge, dpo_robust, ipo, simpo,
orpo, kto: LoRA and full fine-tuning, one process), `dpo_on_several_ranks` (LoRA on 3 Gloo
processes, full fine-tuning on 2, against one TRL process with the global batch, conversational
pairs), `kto_on_several_ranks` (2 processes with accumulation, one TRL process with the batch),
`dpo_resume_equals_uninterrupted`, `preference_data_errors_are_named` or
`demo_learns_preference_visibly`."""
import json
import shutil
import sys
from pathlib import Path

import torch

import harness as h

STEPS = 5
BATCH = 4  # pairs per step
# |ours - TRL| on the loss and each metric, relative to the value where it is above 1 (a summed
# log-probability of -66.5 carries fp32 rounding of a few 1e-6 in either program), and on the
# weights.
TOLERANCE = 1e-5
METRICS = ["loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies",
           "logps/chosen", "logps/rejected"]

# Our objective and parameters -> TRL's trainer and config.
OBJECTIVES = {
    "dpo_sigmoid": ("dpo", {"dpoLoss": "sigmoid", "beta": 0.1}),
    "dpo_hinge": ("dpo", {"dpoLoss": "hinge", "beta": 0.5}),
    "dpo_robust": ("dpo", {"dpoLoss": "robust", "beta": 0.1, "labelSmoothing": 0.2}),
    "ipo": ("ipo", {"beta": 0.1}),
    "simpo": ("simpo", {"beta": 2.0, "simpoGamma": 0.5, "labelSmoothing": 0.1}),
    "orpo": ("orpo", {"beta": 0.1}),
    "kto": ("kto", {"beta": 0.2, "desirableWeight": 1.0, "undesirableWeight": 1.5}),
}
# TRL logs no accuracy for kto, and its KL estimate besides the rewards.
KTO_METRICS = [m for m in METRICS if m != "rewards/accuracies"] + ["kl"]


def pairs(n: int, conversational: bool = False, seed: int = 0):
    """Pairs of the shipped upper-casing task: the chosen answer upper-cases, the rejected one
    repeats the words and adds a number (answers of different lengths, so padding and per-token
    averages matter)."""
    import random
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 5)))
                 for _ in range(rng.randint(1, 3))]
        prompt = "upper: " + " ".join(words)
        # The rejected answer ends with digits, tokens that neither prompts nor chosen answers
        # have (under data parallelism their embedding rows must still be reduced).
        chosen = " ".join(words).upper()
        rejected = " ".join(words + words[: i % 2 + 1]) + f" {i % 10}{i * 7 % 10}"
        if conversational:
            out.append({"prompt": [{"role": "user", "content": prompt}],
                        "chosen": [{"role": "assistant", "content": chosen}],
                        "rejected": [{"role": "assistant", "content": rejected}]})
        else:
            out.append({"prompt": prompt + "\n", "chosen": chosen, "rejected": rejected})
    return out


def unpaired(n: int, conversational: bool = False, seed: int = 0):
    """kto's unpaired examples of the same task: each pair's chosen answer as a desirable
    completion, or its rejected one as an undesirable one; every third is undesirable, so each
    batch of 2 or more holds both kinds, in changing proportions."""
    out = []
    for i, p in enumerate(pairs(n, conversational, seed)):
        desirable = i % 3 != 0
        out.append({"prompt": p["prompt"], "completion": p["chosen" if desirable else "rejected"],
                    "label": desirable})
    return out


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def our_config(model: Path, data: Path, out: Path, objective: str, preference: dict, method: str,
               **training) -> dict:
    cfg = h.config(model, data, out, method=method, microBatchSize=BATCH, maxSteps=STEPS,
                   objective=objective, preference=preference, **training)
    cfg["data"].update(format="unpaired_preference" if objective == "kto" else "preference",
                       shuffle=False)
    cfg["method"]["lora"]["targetModules"] = ["all-linear"]
    return cfg


def run_ours(w: Path, name: str, model: Path, data: Path, objective: str, preference: dict,
             method: str, nproc: int = 1, sharding: str = "none", **training):
    out = w / name
    cfg = our_config(model, data, out, objective, preference, method, **training)
    cfg["distributed"]["sharding"] = sharding
    # A checkpoint after every step: the first (learning rate 0 in the warm-up step, so nothing
    # moved) holds the LoRA adapters as they started, which TRL starts from too.
    cfg["checkpoint"] = {"resume": "never", "dir": str(w / f"{name}-ckpt"), "everySteps": 1,
                         "keepLast": 10}
    path = h.write_config(w / f"{name}.json", cfg)
    args = ["train", "--config", path] if nproc == 1 else \
        ["launch", "--nproc-per-node", nproc, "--master-port", h.free_port(), "--", "train",
         "--config", path]
    p = h.run(args, timeout=600)
    history = [json.loads(l) for l in (out / "metrics_history.jsonl").read_text().splitlines()]
    steps = [r for r in history if "loss" in r and "step" in r]
    return steps, out, w / f"{name}-ckpt" / "step-00000001", p


class SequentialTrainer:
    """TRL's trainers shuffle with their own sampler; ours reads the file in order
    (data.shuffle false): the same order on both sides."""

    @staticmethod
    def wrap(cls):
        from torch.utils.data import SequentialSampler

        class Sequential(cls):
            def _get_train_sampler(self, *args, **kwargs):
                return SequentialSampler(self.train_dataset)
        return Sequential


def run_trl(w: Path, model_dir: Path, records, objective: str, preference: dict, method: str,
            adapter: Path, batch: int = BATCH):
    """TRL's logged metrics per step, and its final weights (PEFT names for LoRA, transformers'
    for full fine-tuning)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if method == "lora":
        from peft import PeftModel
        model = PeftModel.from_pretrained(model, adapter, is_trainable=True)
    common = dict(output_dir=str(w / "trl"), per_device_train_batch_size=batch,
                  gradient_accumulation_steps=1, learning_rate=1e-3, lr_scheduler_type="linear",
                  warmup_steps=1, max_grad_norm=1.0, adam_epsilon=1e-4, weight_decay=0.0,
                  max_steps=STEPS, logging_steps=1, report_to=[], use_cpu=True, bf16=False,
                  save_strategy="no", max_length=64, gradient_checkpointing=False, seed=7)
    beta = preference.get("beta", 0.1)
    if objective in ("dpo", "ipo"):
        from trl import DPOConfig, DPOTrainer
        loss = "ipo" if objective == "ipo" else preference.get("dpoLoss", "sigmoid")
        args = DPOConfig(**common, beta=beta, loss_type=[loss],
                         label_smoothing=preference.get("labelSmoothing", 0.0))
        cls = DPOTrainer
    elif objective == "simpo":
        from trl.experimental.cpo import CPOConfig, CPOTrainer
        args = CPOConfig(**common, beta=beta, loss_type="simpo", cpo_alpha=0.0,
                         simpo_gamma=preference.get("simpoGamma", 0.5),
                         label_smoothing=preference.get("labelSmoothing", 0.0))
        cls = CPOTrainer
    elif objective == "kto":
        from trl import KTOConfig, KTOTrainer
        args = KTOConfig(**common, beta=beta, loss_type="kto",
                         desirable_weight=preference.get("desirableWeight", 1.0),
                         undesirable_weight=preference.get("undesirableWeight", 1.0))
        cls = KTOTrainer
    else:
        from trl.experimental.orpo import ORPOConfig, ORPOTrainer
        args = ORPOConfig(**common, beta=beta)
        cls = ORPOTrainer
    logged = []

    class Keep(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                logged.append(dict(logs, step=state.global_step))

    trainer = SequentialTrainer.wrap(cls)(model=model, args=args, processing_class=tok,
                                          train_dataset=Dataset.from_list(records),
                                          callbacks=[Keep()])
    trainer.train()
    if method == "lora":
        from peft import get_peft_model_state_dict
        final = {"base_model.model." + k.removeprefix("base_model.model."): v
                 for k, v in get_peft_model_state_dict(trainer.model).items()}
    else:
        final = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return logged, final


def compare_steps(ours, theirs, label, metrics=METRICS):
    assert len(ours) == len(theirs) == STEPS, (label, len(ours), len(theirs))
    worst = 0.0
    for a, b in zip(ours, theirs):
        for key in metrics:
            diff = abs(a[key] - b[key]) / max(1.0, abs(b[key]))
            worst = max(worst, diff)
            assert diff <= TOLERANCE, f"{label} step {a['step']} {key}: ours {a[key]!r}, TRL {b[key]!r}"
    first, last = ours[0], ours[-1]
    print(f"{label}: every metric of {STEPS} steps within {worst:.2g} (relative above 1) of TRL's; loss "
          f"{first['loss']:.6f} -> {last['loss']:.6f}, reward margin "
          f"{first['rewards/margins']:.4f} -> {last['rewards/margins']:.4f}")
    moved = abs(first["loss"] - last["loss"]) + abs(first["logps/chosen"] - last["logps/chosen"])
    assert moved > 1e-3, f"{label}: training changed nothing: the test would prove nothing"


def compare_weights(our_out: Path, trl_final: dict, method: str, label: str):
    ours = h.weights(our_out)
    if method == "lora":
        ours = {k: v for k, v in ours.items() if "lora_" in k}
    keys = sorted(set(ours) & set(trl_final))
    assert keys and len(keys) == len(ours), (label, sorted(set(ours) ^ set(trl_final))[:6])
    diff = max((ours[k].float() - trl_final[k].float()).abs().max().item() for k in keys)
    print(f"{label}: weights after {STEPS} steps within {diff:.2g} of TRL's ({len(keys)} tensors)")
    assert diff <= TOLERANCE, (label, diff)


def objective_matches_trl(name: str):
    objective, preference = OBJECTIVES[name]
    w = h.workdir(f"pref-{name}")
    model = h.tiny_model(w / "model")
    records = (unpaired if objective == "kto" else pairs)(STEPS * BATCH)
    data = write_jsonl(w / "pairs.jsonl", records)
    for method in ("lora", "full"):
        ours, out, first_checkpoint, _ = run_ours(w, f"ours-{method}", model, data, objective,
                                                  preference, method)
        theirs, final = run_trl(w, model, records, objective, preference, method, first_checkpoint)
        compare_steps(ours, theirs, f"{name} {method}",
                      KTO_METRICS if objective == "kto" else METRICS)
        compare_weights(out, final, method, f"{name} {method}")


def dpo_on_several_ranks():
    """Gloo processes of 2 pairs each == TRL in one process with their whole batch (conversational
    pairs through the chat template: the prompt is what both answers share): LoRA on 3 ranks, and
    full fine-tuning on 2, replicated (the embedding's rows of both answers' tokens are reduced:
    the rejected answers hold digits the chosen ones do not) and fully sharded."""
    global BATCH
    w = h.workdir("pref-ranks")
    model = h.tiny_model(w / "model")
    objective, preference = OBJECTIVES["dpo_sigmoid"]
    for method, ranks, sharding in (("lora", 3, "none"), ("full", 2, "none"), ("full", 2, "full")):
        label = f"dpo {method} {ranks} ranks sharding {sharding}"
        records = pairs(STEPS * 2 * ranks, conversational=True, seed=1)
        data = write_jsonl(w / f"pairs-{method}.jsonl", records)
        BATCH = 2
        ours, out, first_checkpoint, _ = run_ours(w, f"ours-{method}-{sharding}", model, data,
                                                  objective, preference, method, nproc=ranks,
                                                  sharding=sharding)
        BATCH = 2 * ranks
        theirs, final = run_trl(w, model, records, objective, preference, method,
                                first_checkpoint, batch=2 * ranks)
        compare_steps(ours, theirs, label)
        compare_weights(out, final, method, label)


def kto_on_several_ranks():
    """kto's KL estimate is over the step's whole batch, whatever its split: 2 Gloo processes of 2
    micro-batches of 1 example (conversational, through the chat template) == TRL in one process
    with the batch of 4 (whose KL estimate is over that batch too), for LoRA replicated and for
    full fine-tuning fully sharded."""
    global BATCH
    w = h.workdir("kto-ranks")
    model = h.tiny_model(w / "model")
    objective, preference = OBJECTIVES["kto"]
    records = unpaired(STEPS * 4, conversational=True, seed=2)
    data = write_jsonl(w / "examples.jsonl", records)
    for method, sharding in (("lora", "none"), ("full", "full")):
        label = f"kto {method} 2 ranks x 2 micro-batches, sharding {sharding}"
        BATCH = 1
        ours, out, first_checkpoint, _ = run_ours(w, f"ours-{method}", model, data, objective,
                                                  preference, method, nproc=2, sharding=sharding,
                                                  gradientAccumulationSteps=2)
        BATCH = 4
        theirs, final = run_trl(w, model, records, objective, preference, method,
                                first_checkpoint, batch=4)
        compare_steps(ours, theirs, label, KTO_METRICS)
        compare_weights(out, final, method, label)


def dpo_resume_equals_uninterrupted():
    """Full fine-tuning, whose reference is the starting weights: a run stopped after step 2 and
    resumed (the checkpoint holds trained weights, the reference must not move) ends where an
    uninterrupted run ends, step by step: once with the reference kept in the checkpoint folder
    (read back), once without it (computed again from the model folder before the checkpoint is
    restored)."""
    w = h.workdir("pref-resume")
    model = h.tiny_model(w / "model")
    data = write_jsonl(w / "pairs.jsonl", pairs(STEPS * BATCH))
    objective, preference = OBJECTIVES["dpo_sigmoid"]
    straight, straight_out, _, _ = run_ours(w, "straight", model, data, objective, preference,
                                            "full")
    kept = w / "straight-ckpt" / "reference_logps.safetensors"
    assert kept.exists(), "the reference was not kept in the checkpoint folder"
    for label in ("kept", "recomputed"):
        cfg = our_config(model, data, w / f"resumed-{label}", objective, preference, "full")
        cfg["checkpoint"] = {"resume": "auto", "dir": str(w / f"ckpt-{label}"), "everySteps": 1,
                             "keepLast": 10}
        shutil.copytree(w / "straight-ckpt" / "step-00000002", w / f"ckpt-{label}" / "step-00000002")
        if label == "kept":
            shutil.copy(kept, w / f"ckpt-{label}" / kept.name)
        p = h.run(["train", "--config", h.write_config(w / f"resumed-{label}.json", cfg)])
        assert "resuming from" in p.stderr, p.stderr[-2000:]
        assert ("reference log-probabilities read from" in p.stderr) == (label == "kept"), p.stderr[-2000:]
        resumed = [json.loads(l) for l in (w / f"resumed-{label}" / "metrics_history.jsonl").read_text().splitlines()]
        resumed = {r["step"]: r for r in resumed if "loss" in r}
        for r in straight[2:]:
            for key in METRICS:
                assert abs(r[key] - resumed[r["step"]][key]) <= 1e-6, (label, r["step"], key)
        diff = h.max_abs_diff(h.weights(straight_out), h.weights(w / f"resumed-{label}"))
        print(f"resumed at step 2, reference {label}: steps 3-{STEPS} and the final weights equal "
              f"(max diff {diff:.2g})")
        assert diff <= 1e-6, diff


def preflight_names_lines(w: Path, model: Path, name: str, objective: str, records, expected):
    """The preflight of `records` under `objective` names each (line, words) of `expected`;
    returns the data file and the config."""
    data = write_jsonl(w / f"{name}.jsonl", records)
    cfg = our_config(model, data, w / f"out-{name}", objective, {}, "lora")
    cfg["data"]["format"] = "auto"
    path = h.write_config(w / f"{name}.json", cfg)
    p = h.run(["preflight", "--config", path], check=False)
    text = p.stdout + p.stderr
    for line, words in expected:
        assert f"{name}.jsonl:{line}:" in text and words in text, (line, words, text[-3000:])
    return data, path


def preference_data_errors_are_named():
    """Bad pairs are named by line before any step: a missing field, an empty answer, a chosen
    equal to its rejected, a prompt that fills data.maxLength; SFT records under dpo and pairs
    under sft are refused with the field to change."""
    w = h.workdir("pref-errors")
    model = h.tiny_model(w / "model")
    good = pairs(4)
    bad = [dict(good[0]), {"prompt": "a", "chosen": "b"}, {"prompt": "a", "chosen": "", "rejected": "c"},
           {"prompt": "a", "chosen": "same", "rejected": "same"},
           {"prompt": "long " * 200, "chosen": "x", "rejected": "y"}]
    data, path = preflight_names_lines(w, model, "bad", "dpo", bad, (
        (2, "rejected"), (3, "empty"), (4, "nothing to prefer"), (5, "data.maxLength")))
    p = h.run(["train", "--config", path], check=False)
    assert p.returncode != 0 and "bad.jsonl:2:" in p.stderr, p.stderr[-2000:]
    sft = write_jsonl(w / "sft.jsonl", [{"messages": [{"role": "user", "content": "a"},
                                                      {"role": "assistant", "content": "b"}]}])
    cfg = our_config(model, sft, w / "out2", "dpo", {}, "lora")
    cfg["data"]["format"] = "auto"
    p = h.run(["train", "--config", h.write_config(w / "sft.json", cfg)], check=False)
    assert p.returncode != 0 and "sft.jsonl:1:" in p.stderr and "preference pairs" in p.stderr, p.stderr[-2000:]
    cfg = our_config(model, data, w / "out3", "sft", {}, "lora")
    cfg["data"]["format"] = "auto"
    p = h.run(["train", "--config", h.write_config(w / "sft-pairs.json", cfg)], check=False)
    assert p.returncode != 0 and "training.objective" in p.stderr, p.stderr[-2000:]
    # kto: a label that is not a boolean, a prompt that fills data.maxLength, an empty completion;
    # pairs under kto, and unpaired examples under dpo.
    good = unpaired(3)
    bad = [good[0], dict(good[1], label="yes"), {"prompt": "long " * 200, "completion": "x", "label": True},
           dict(good[2], completion="")]
    preflight_names_lines(w, model, "kto-bad", "kto", bad, (
        (2, '"label": expected true'), (3, "data.maxLength"), (4, "empty")))
    # 5 desirable and 3 undesirable examples under weights 1 and 1: KTOTrainer's advice, with its
    # bounds (Eq. 8 of the KTO paper) for these counts, and the count in the report.
    cfg = our_config(model, write_jsonl(w / "kto-5-3.jsonl", unpaired(8)), w / "out5", "kto", {}, "lora")
    p = h.run(["preflight", "--config", h.write_config(w / "kto-5-3.json", cfg)])
    assert "desirableWeight in [0.6, 0.8] OR undesirableWeight in [1.25, 1.67]" in p.stderr, p.stderr[-2000:]
    assert json.loads(p.stdout)["data"]["train"]["desirableRecords"] == 5, p.stdout[-2000:]
    for objective, records, words in (("kto", pairs(2), "unpaired preference examples"),
                                      ("dpo", unpaired(2), "trains on preference pairs")):
        data = write_jsonl(w / f"{objective}-mismatch.jsonl", records)
        cfg = our_config(model, data, w / f"out-{objective}", objective, {}, "lora")
        cfg["data"]["format"] = "auto"
        p = h.run(["train", "--config", h.write_config(w / f"{objective}-mismatch.json", cfg)], check=False)
        assert p.returncode != 0 and f"{objective}-mismatch.jsonl:1:" in p.stderr and words in p.stderr, \
            (objective, p.stderr[-2000:])
    print("bad pairs and unpaired examples named by line; objective and data mismatches refused")


def demo_learns_preference_visibly():
    """scripts/preference_demo.sh minus the set-up: the shipped pairs, ORPO from random weights
    under `kubetune run` (two CPU workers), end with the chosen answer likelier on >= 95% of the
    held-out pairs (from near chance before), TRL's metrics in the history, and the model's own
    answers closer to the chosen ones (held-out token accuracy up by half or more). Then KTO from
    that model on the unpaired examples: the held-out undesirable completions become much less
    likely (by 2 nats a token or more) and the desirable ones no less likely."""
    import os
    import re
    import subprocess
    w = h.workdir("pref-demo")
    example = h.REPO / "examples" / "preference"
    h.run(["init-model", "--config", h.EXAMPLE / "model_config.json", "--tokenizer",
           h.EXAMPLE / "tokenizer", "--out", w / "runs/preference/base-model", "--seed", "0"])
    (w / "examples/preference").mkdir(parents=True)
    for f in ("train.jsonl", "validation.jsonl", "unpaired_train.jsonl", "unpaired_validation.jsonl"):
        shutil.copy(example / f, w / "examples/preference" / f)
    for job in ("job.yaml", "kto-job.yaml"):
        (w / job).write_text((example / job).read_text().replace("@ROOT@", str(w)))

    def held_out(model):
        out = h.run(["eval", "--model", model, "--data", w / "examples/preference/validation.jsonl",
                     "--show", "2"]).stdout
        preferred = float(re.search(r"likelier per token than the rejected one in ([0-9.]+)%", out).group(1))
        accuracy = float(re.search(r"token accuracy ([0-9.]+)", out).group(1))
        return preferred, accuracy, out

    before = held_out(w / "runs/preference/base-model")
    def run_job(name):
        p = subprocess.run([os.environ["KUBETUNE_CLI"], "run", str(w / name)], capture_output=True,
                           text=True, timeout=400, env={**os.environ, "KUBETUNE_TRAINER": h.TRAINER})
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]

    run_job("job.yaml")
    after = held_out(w / "runs/preference/output")
    print(before[2], after[2], sep="\n")
    print(f"held-out: chosen likelier {before[0]}% -> {after[0]}%, token accuracy of the chosen "
          f"answers {before[1]:.3f} -> {after[1]:.3f}")
    assert 25 <= before[0] <= 75, before[0]  # a random model has no preference
    assert after[0] >= 95, after[0]
    assert after[1] >= before[1] + 0.15, (before[1], after[1])
    history = [json.loads(l) for l in (w / "runs/preference/output/metrics_history.jsonl").read_text().splitlines()]
    steps = [r for r in history if "rewards/accuracies" in r]
    assert steps and steps[-1]["rewards/accuracies"] >= 0.9, steps[-1:]

    def completion_losses(model):
        out = h.run(["eval", "--model", model, "--data",
                     w / "examples/preference/unpaired_validation.jsonl"]).stdout
        found = re.search(r"desirable ([0-9.]+), undesirable ([0-9.]+)", out)
        return float(found.group(1)), float(found.group(2))

    before = completion_losses(w / "runs/preference/output")
    run_job("kto-job.yaml")
    after = completion_losses(w / "runs/preference/kto-output")
    print(f"kto, held-out loss per completion token: desirable {before[0]:.3f} -> {after[0]:.3f}, "
          f"undesirable {before[1]:.3f} -> {after[1]:.3f}")
    assert after[1] >= before[1] + 2.0, (before, after)
    assert after[0] <= before[0] + 0.05, (before, after)
    history = [json.loads(l) for l in (w / "runs/preference/kto-output/metrics_history.jsonl").read_text().splitlines()]
    steps = [r for r in history if "kl" in r]
    assert steps and steps[-1]["rewards/margins"] >= 1.0, steps[-1:]


if __name__ == "__main__":
    name = sys.argv[1]
    tests = {"dpo_on_several_ranks": dpo_on_several_ranks,
             "kto_on_several_ranks": kto_on_several_ranks,
             "dpo_resume_equals_uninterrupted": dpo_resume_equals_uninterrupted,
             "preference_data_errors_are_named": preference_data_errors_are_named,
             "demo_learns_preference_visibly": demo_learns_preference_visibly}
    tests.update({k: (lambda k=k: objective_matches_trl(k)) for k in OBJECTIVES})
    tests[name]()
    print(f"{name}: ok")
