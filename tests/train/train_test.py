#!/usr/bin/env python3
"""Process-level tests of `kubetune-trainer`, each a ctest entry: `train_test.py NAME`.
References: transformers (eval loss), tokenizers (token ids), PEFT (adapter logits)."""
import json
import math
import os
import random
import re
import signal
import shutil
import subprocess
import sys

import torch

import harness as h


def accumulation_equals_big_batch():
    """One step of batch 8 == 4 micro-batches of 2 (examples of different lengths), to 1e-5."""
    w = h.workdir("accum")
    model = h.tiny_model(w / "model")
    data = h.subset(h.EXAMPLE / "train.jsonl", w / "data.jsonl", 8)
    runs = {}
    for name, micro, accum in (("big", 8, 1), ("micro", 2, 4)):
        cfg = h.config(model, data, w / name, microBatchSize=micro, gradientAccumulationSteps=accum,
                       maxSteps=1, warmupSteps=0, lrScheduler="constant", learningRate=1e-2)
        h.run(["train", "--config", h.write_config(w / f"{name}.json", cfg)])
        runs[name] = h.weights(w / name)
    base = h.weights(model)
    moved = max((runs["big"][k] - base[k]).abs().max().item() for k in base)
    diff = h.max_abs_diff(runs["big"], runs["micro"])
    print(f"max |w_big - w_micro| = {diff:.3g} (weights moved by up to {moved:.3g})")
    assert moved > 1e-3, "the step did not change the weights: the test would prove nothing"
    assert diff <= 1e-5, diff


def resume_equals_uninterrupted():
    """A run stopped right after its step-3 checkpoint, resumed, ends with the weights of a run
    that never stopped. (The stop is simulated by deleting every later checkpoint.) With a fixed
    micro-batch and accumulation, and with microBatchSize auto."""
    w = h.workdir("resume")
    model = h.tiny_model(w / "model")
    data = h.subset(h.EXAMPLE / "train.jsonl", w / "data.jsonl", 40)
    for label, batch in (("fixed", dict(microBatchSize=2, gradientAccumulationSteps=2)),
                         ("auto", dict(microBatchSize="auto", globalBatchSize=4))):
        cfg = h.config(model, data, w / f"straight-{label}", maxSteps=6, **batch)
        cfg["checkpoint"] = {"resume": "auto", "dir": str(w / f"ckpt-{label}"), "everySteps": 1, "keepLast": 10}
        h.run(["train", "--config", h.write_config(w / f"straight-{label}.json", cfg)])
        for step in (4, 5, 6):
            shutil.rmtree(w / f"ckpt-{label}" / f"step-{step:08d}")
        cfg["output"]["dir"] = str(w / f"resumed-{label}")
        p = h.run(["train", "--config", h.write_config(w / f"resumed-{label}.json", cfg)])
        assert "resuming from" in p.stderr and "step-00000003" in p.stderr, p.stderr[-2000:]
        diff = h.max_abs_diff(h.weights(w / f"straight-{label}"), h.weights(w / f"resumed-{label}"))
        print(f"{label}: max |uninterrupted - resumed| = {diff:.3g}")
        assert diff <= 1e-6, diff


def damaged_checkpoint_is_skipped():
    """A truncated newest checkpoint is reported and the previous good one is used."""
    w = h.workdir("damaged")
    model = h.tiny_model(w / "model")
    data = h.subset(h.EXAMPLE / "train.jsonl", w / "data.jsonl", 20)
    cfg = h.config(model, data, w / "out", maxSteps=2)
    cfg["checkpoint"] = {"resume": "auto", "dir": str(w / "ckpt"), "everySteps": 1}
    h.run(["train", "--config", h.write_config(w / "a.json", cfg)])
    newest = w / "ckpt" / "step-00000002" / "trainable-00000-of-00001.safetensors"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    cfg["training"]["maxSteps"] = 3
    p = h.run(["train", "--config", h.write_config(w / "b.json", cfg)])
    assert "skipping checkpoint" in p.stderr and "bytes, the checkpoint recorded" in p.stderr, p.stderr[-2000:]
    assert "resuming from" in p.stderr and "step-00000001" in p.stderr, p.stderr[-2000:]


def eval_matches_transformers():
    """`eval --json` per-record mean loss and target counts == transformers on the same tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    w = h.workdir("eval")
    model_dir = h.tiny_model(w / "model", seed=3)
    records = [
        {"text": "hello world, a plain text record"},
        {"prompt": "upper: abc", "completion": "ABC"},
        {"messages": [{"role": "user", "content": "upper: hi there"}, {"role": "assistant", "content": "HI THERE"}]},
    ]
    ours = {"records": []}
    for i, record in enumerate(records):  # one format per file, as the loader requires
        data = w / f"eval{i}.jsonl"
        data.write_text(json.dumps(record) + "\n")
        ours["records"] += json.loads(h.run(["eval", "--model", model_dir, "--data", data, "--json"]).stdout)["records"]
    tok = AutoTokenizer.from_pretrained(model_dir)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    eos = tok.eos_token_id
    # The same records, tokenised and masked the way the README documents, scored by transformers.
    text_ids = tok("hello world, a plain text record")["input_ids"] + [eos]
    prompt = tok("upper: abc")["input_ids"]
    pc_ids = prompt + tok("ABC", add_special_tokens=False)["input_ids"] + [eos]
    pc_labels = [-100] * len(prompt) + pc_ids[len(prompt):]
    msgs = [{"role": "user", "content": "upper: hi there"}, {"role": "assistant", "content": "HI THERE"}]
    full = tok.apply_chat_template(msgs, tokenize=False)
    prefix = tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True)
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    chat_labels = [t if s >= len(prefix) else -100 for t, (s, _) in zip(enc["input_ids"], enc["offset_mapping"])]
    expected = []
    for ids, labels in ((text_ids, text_ids), (pc_ids, pc_labels), (enc["input_ids"], chat_labels)):
        with torch.no_grad():
            out = hf(input_ids=torch.tensor([ids]), labels=torch.tensor([labels]))
        expected.append((out.loss.item(), sum(1 for l in labels[1:] if l != -100)))
    for rec, (loss, n) in zip(ours["records"], expected):
        print(f"ours {rec['mean_loss']:.6f} ({rec['n_targets']}) hf {loss:.6f} ({n})")
        assert rec["n_targets"] == n
        assert math.isclose(rec["mean_loss"], loss, rel_tol=1e-4), (rec, loss)
    both = w / "two.jsonl"  # the file-level mean is token-weighted over records
    both.write_text(json.dumps(records[2]) + "\n" + json.dumps(records[2]) + "\n")
    two = json.loads(h.run(["eval", "--model", model_dir, "--data", both, "--json"]).stdout)
    assert two["n_targets"] == 2 * expected[2][1]
    assert math.isclose(two["mean_loss"], expected[2][0], rel_tol=1e-4)


def tokenize_matches_tokenizers():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(h.EXAMPLE / "tokenizer")
    records = [{"text": "Hello,  wörld!\r\n\tcode = x**2 # 数字 🙂"},
               {"messages": [{"role": "user", "content": "upper: ab"}, {"role": "assistant", "content": "AB"}]}]
    stdin = "\n".join(json.dumps(r) for r in records) + "\n"
    p = h.run(["tokenize", "--tokenizer", h.EXAMPLE / "tokenizer", "--chat", "--json"], input=stdin)
    ours = [json.loads(l)["ids"] for l in p.stdout.splitlines()]
    assert ours[0] == tok(records[0]["text"], add_special_tokens=False)["input_ids"]
    assert ours[1] == tok.apply_chat_template(records[1]["messages"], tokenize=True, return_dict=False)


def lora_adapter_loads_in_peft():
    """Train LoRA; the adapter we write loads in PEFT and gives the loss our eval reports."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    w = h.workdir("lora")
    model_dir = h.tiny_model(w / "model")
    data = h.subset(h.EXAMPLE / "train.jsonl", w / "data.jsonl", 16)
    cfg = h.config(model_dir, data, w / "adapter", method="lora", maxSteps=4, learningRate=5e-2)
    h.run(["train", "--config", h.write_config(w / "lora.json", cfg)])
    assert (w / "adapter" / "adapter_config.json").exists()
    one = w / "one.jsonl"
    one.write_text(json.dumps({"text": "some text to score"}) + "\n")
    ours = json.loads(h.run(["eval", "--model", model_dir, "--adapter", w / "adapter", "--data", one, "--json"]).stdout)
    base = json.loads(h.run(["eval", "--model", model_dir, "--data", one, "--json"]).stdout)
    tok = AutoTokenizer.from_pretrained(model_dir)
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), w / "adapter")
    ids = torch.tensor([tok("some text to score")["input_ids"] + [tok.eos_token_id]])
    with torch.no_grad():
        loss = peft_model(input_ids=ids, labels=ids).loss.item()
    print(f"ours {ours['mean_loss']:.6f} peft {loss:.6f} base {base['mean_loss']:.6f}")
    assert abs(ours["mean_loss"] - base["mean_loss"]) > 1e-4, "adapter changed nothing"
    assert math.isclose(ours["mean_loss"], loss, rel_tol=1e-4)


def qlora_float32_model_with_bf16_compute_matches_bitsandbytes():
    """QLoRA with model.dtype float32 and the default computeDtype (bfloat16), as
    `BitsAndBytesConfig(bnb_4bit_compute_dtype=torch.bfloat16)` on a float32 model: each 4-bit
    product runs in bf16 and returns the input's dtype, as bitsandbytes' Linear4bit does (ours once
    returned bf16 and the attention refused the mixed dtypes). The first step's loss equals the
    bitsandbytes model's to bf16's precision."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

    w = h.workdir("qlora-f32-bf16")
    model_dir = h.tiny_model(w / "model")
    texts = [f"record {i}: " + " ".join(["the quick brown fox jumps"] * (1 + i % 3)) for i in range(8)]
    data = w / "data.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    cfg = h.config(model_dir, data, w / "adapter", method="qlora", microBatchSize=8, maxSteps=1)
    cfg["data"].update(format="text", maxLength=512)
    cfg["model"]["dtype"] = "float32"
    cfg["method"]["quantization"] = {"type": "nf4", "doubleQuant": True, "blockSize": 64}
    h.run(["train", "--config", h.write_config(w / "c.json", cfg)])
    ours = [json.loads(l)["loss"] for l in (w / "adapter" / "metrics_history.jsonl").read_text().splitlines()
            if '"loss"' in l][0]
    tok = AutoTokenizer.from_pretrained(model_dir)
    rows = [tok(t)["input_ids"] + [tok.eos_token_id] for t in texts]
    width = max(map(len, rows))
    ids = torch.tensor([r + [tok.eos_token_id] * (width - len(r)) for r in rows])
    labels = torch.tensor([r + [-100] * (width - len(r)) for r in rows])
    losses = {}
    for name, compute in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                 bnb_4bit_compute_dtype=compute)
        model = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=bnb, device_map="cpu",
                                                     dtype=torch.float32)
        with torch.no_grad():
            losses[name] = model(input_ids=ids, labels=labels).loss.item()
    print(f"first loss: ours {ours:.6f}; bitsandbytes bf16 compute {losses['bf16']:.6f}, fp32 {losses['fp32']:.6f}")
    assert math.isclose(ours, losses["bf16"], rel_tol=2e-3), (ours, losses)


def qlora_matches_peft_bitsandbytes():
    """QLoRA on the CPU against PEFT on a base quantized by transformers+bitsandbytes (NF4, double
    quantization; fp32 compute, so the comparison is not lost in bf16 noise): the first step's loss
    (LoRA's B starts at zero: it is the 4-bit model's loss) equals theirs, training lowers it, and the
    adapter we write, loaded by PEFT on the bitsandbytes base, gives the loss our final evaluation
    reports."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

    w = h.workdir("qlora")
    model_dir = h.tiny_model(w / "model")
    texts = [f"record {i}: " + " ".join(["the quick brown fox jumps"] * (1 + i % 3)) for i in range(8)]
    data = w / "data.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    cfg = h.config(model_dir, data, w / "adapter", method="qlora", microBatchSize=8, maxSteps=6,
                   learningRate=2e-2)
    cfg["data"].update(format="text", validation=str(data), maxLength=512)
    cfg["model"]["dtype"] = "float32"
    cfg["method"]["quantization"] = {"type": "nf4", "doubleQuant": True, "blockSize": 64,
                                     "computeDtype": "float32"}
    p = h.run(["train", "--config", h.write_config(w / "c.json", cfg)])
    assert "qlora: decoder linear weights in nf4" in p.stderr + p.stdout, p.stderr[-2000:]
    history = [json.loads(l) for l in (w / "adapter" / "metrics_history.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in history if "loss" in r]
    eval_loss = [r["eval_loss"] for r in history if "eval_loss" in r][-1]

    tok = AutoTokenizer.from_pretrained(model_dir)
    rows = [tok(t)["input_ids"] + [tok.eos_token_id] for t in texts]
    width = max(map(len, rows))
    ids = torch.tensor([r + [tok.eos_token_id] * (width - len(r)) for r in rows])
    labels = torch.tensor([r + [-100] * (width - len(r)) for r in rows])
    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                             bnb_4bit_compute_dtype=torch.float32)
    def base():
        return AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=bnb, device_map="cpu",
                                                    dtype=torch.float32)
    with torch.no_grad():
        first = base()(input_ids=ids, labels=labels).loss.item()
        trained = PeftModel.from_pretrained(base(), w / "adapter")(input_ids=ids, labels=labels).loss.item()
    print(f"step 1: ours {losses[0]:.6f} bitsandbytes {first:.6f}; after {len(losses)} steps: "
          f"ours {eval_loss:.6f} peft {trained:.6f}")
    assert math.isclose(losses[0], first, rel_tol=1e-4), (losses[0], first)
    assert losses[-1] < losses[0] - 0.1, losses
    assert math.isclose(eval_loss, trained, rel_tol=1e-4), (eval_loss, trained)

    # The same base saved by transformers+bitsandbytes in its 4-bit format (as published on the
    # Hub) is read as it is: the same training, step for step.
    from safetensors.torch import load_file, save_file
    q4 = w / "q4"
    base().save_pretrained(q4)
    for f in model_dir.glob("tokenizer*"):
        shutil.copy(f, q4 / f.name)
    assert json.loads((q4 / "config.json").read_text())["quantization_config"]["quant_method"] == "bitsandbytes"
    cfg["model"]["path"] = str(q4)
    cfg["output"]["dir"] = str(w / "adapter-q4")
    h.run(["train", "--config", h.write_config(w / "c4.json", cfg)])
    again = [json.loads(l)["loss"] for l in (w / "adapter-q4" / "metrics_history.jsonl").read_text().splitlines()
             if "loss" in json.loads(l)]
    print(f"from the 4-bit checkpoint: {again}")
    assert again == losses, (again, losses)

    # A 4-bit weight without its quant_state, and a 4-bit checkpoint with a method other than qlora.
    tensors = load_file(str(q4 / "model.safetensors"))
    broken = next(k for k in tensors if k.endswith(".quant_state.bitsandbytes__nf4"))
    del tensors[broken]
    save_file(tensors, str(q4 / "model.safetensors"), metadata={"format": "pt"})
    p = h.run(["train", "--config", h.write_config(w / "c5.json", cfg)], check=False)
    assert p.returncode == 2 and "has no quant_state beside it" in p.stderr, (p.returncode, p.stderr[-2000:])
    assert broken.replace(".quant_state.bitsandbytes__nf4", ".absmax") in p.stderr, p.stderr[-2000:]
    cfg["method"]["type"] = "lora"
    p = h.run(["preflight", "--config", h.write_config(w / "c6.json", cfg)], check=False)
    assert p.returncode == 2 and "trains only with method.type qlora" in p.stdout, (p.returncode, p.stdout[-2000:])


def random_init_trains_from_config_alone():
    """model.init random: a folder with config.json and the tokenizer but no weights trains. Its
    weights are drawn as transformers' from_config draws them: every matrix with the mean and std
    of normal(0, initializer_range), the norms at 1, and the first step's loss among those that
    models transformers builds from the same config give on the same batch."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    w = h.workdir("random-init")
    src = h.tiny_model(w / "src")
    bare = w / "bare"
    bare.mkdir()
    for f in src.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, bare / f.name)
    text = "the quick brown fox jumps over the lazy dog " * 4
    data = w / "data.jsonl"
    data.write_text((json.dumps({"text": text}) + "\n") * 4)
    cfg = h.config(bare, data, w / "out", microBatchSize=4, maxSteps=1, learningRate=1e-9)
    cfg["data"].update(format="text", maxLength=256)
    cfg["model"]["init"] = "random"
    h.run(["train", "--config", h.write_config(w / "c.json", cfg)])
    ours = h.weights(w / "out")
    std = AutoConfig.from_pretrained(bare).initializer_range
    for name, t in ours.items():
        if name.endswith("norm.weight"):
            assert torch.equal(t, torch.ones_like(t)), name
        else:
            assert abs(t.std().item() - std) < 0.05 * std and abs(t.mean().item()) < 0.1 * std, (
                name, t.mean().item(), t.std().item())
    loss = [json.loads(l)["loss"] for l in (w / "out" / "metrics_history.jsonl").read_text().splitlines()
            if '"loss"' in l][0]
    tok = AutoTokenizer.from_pretrained(bare)
    ids = torch.tensor([tok(text)["input_ids"] + [tok.eos_token_id]])
    references = []
    for seed in range(8):  # a random model's loss varies by draw: ours must fall among theirs
        torch.manual_seed(seed)
        hf = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(bare))
        with torch.no_grad():
            references.append(hf(input_ids=ids, labels=ids).loss.item())
    print(f"first loss: ours {loss:.4f}, transformers models from the same config "
          f"{min(references):.4f}..{max(references):.4f}")
    assert min(references) - 0.02 <= loss <= max(references) + 0.02, (loss, references)
    # Without the option the same folder is refused, naming what is missing.
    del cfg["model"]["init"]
    p = h.run(["train", "--config", h.write_config(w / "d.json", cfg)], check=False)
    assert p.returncode == 2 and "no model.safetensors" in p.stderr, (p.returncode, p.stderr[-2000:])


def bad_inputs_are_named():
    """Each bad input: non-zero exit (2: user error) and a message naming the file/line/field."""
    w = h.workdir("bad")
    model = h.tiny_model(w / "model")
    good = h.subset(h.EXAMPLE / "train.jsonl", w / "good.jsonl", 4)
    bad_json = w / "bad.jsonl"
    bad_json.write_text(good.read_text().splitlines()[0] + "\n{not json\n")
    no_targets = w / "no_targets.jsonl"
    no_targets.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    empty = w / "empty.jsonl"
    empty.write_text("\n")
    broken_model = w / "broken"
    subprocess.run(["cp", "-r", str(model), str(broken_model)], check=True)
    st = broken_model / "model.safetensors"
    st.write_bytes(st.read_bytes()[:1000])
    unknown_arch = w / "unknown"
    subprocess.run(["cp", "-r", str(model), str(unknown_arch)], check=True)
    c = json.loads((unknown_arch / "config.json").read_text())
    c["model_type"], c["architectures"] = "gpt_neox", ["GPTNeoXForCausalLM"]
    (unknown_arch / "config.json").write_text(json.dumps(c))
    prequantized = w / "prequantized"  # as transformers saves a bitsandbytes-4-bit model
    subprocess.run(["cp", "-r", str(model), str(prequantized)], check=True)
    c = json.loads((prequantized / "config.json").read_text())
    c["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    (prequantized / "config.json").write_text(json.dumps(c))
    cases = [
        ("unknown key", lambda cfg: cfg["training"].update(learningrate=1), "training.learningrate"),
        ("malformed line", lambda cfg: cfg["data"].update(train=str(bad_json)), "bad.jsonl:2"),
        ("no targets", lambda cfg: cfg["data"].update(train=str(no_targets)), "no_targets.jsonl:1"),
        ("empty dataset", lambda cfg: cfg["data"].update(train=str(empty)), "empty.jsonl"),
        ("truncated safetensors", lambda cfg: cfg["model"].update(path=str(broken_model)), "model.safetensors"),
        ("missing model", lambda cfg: cfg["model"].update(path=str(w / "nope")), "nope"),
        ("unknown architecture", lambda cfg: cfg["model"].update(path=str(unknown_arch)), "GPTNeoXForCausalLM"),
        ("quantized, not 4-bit bitsandbytes", lambda cfg: cfg["model"].update(path=str(prequantized)),
         'field "quantization_config": the checkpoint is quantized with quant_method "gptq"'),
        ("qlora block size", lambda cfg: cfg["method"].update(type="qlora", quantization={"blockSize": 48}),
         "method.quantization.blockSize"),
    ]
    for name, mutate, needle in cases:
        cfg = h.config(model, good, w / "out", maxSteps=1)
        mutate(cfg)
        p = h.run(["train", "--config", h.write_config(w / "c.json", cfg)], check=False)
        print(f"{name}: exit {p.returncode}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}")
        assert p.returncode == 2, (name, p.returncode, p.stderr[-2000:])
        assert needle in p.stderr, (name, needle, p.stderr[-2000:])
        assert "Segmentation" not in p.stderr and "terminate called" not in p.stderr


def logs_are_structured_and_options_checked():
    """Text logs carry a UTC timestamp, the level and key=value fields; --log-format json gives one
    JSON object per line, in the launcher and in its ranks alike. `launch --help` answers, and every
    command names an unknown option instead of guessing."""
    w = h.workdir("logs")
    model = h.tiny_model(w / "model")
    data = h.subset(h.EXAMPLE / "train.jsonl", w / "data.jsonl", 8)
    cfg = h.write_config(w / "c.json", h.config(model, data, w / "out", maxSteps=2))
    text = h.run(["train", "--config", cfg]).stderr
    step_lines = [l for l in text.splitlines() if "step=2/2" in l]
    assert step_lines, text[-2000:]
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z info +trainer: step=2/2 epoch=", step_lines[0]), step_lines[0]

    p = h.run(["--log-format", "json", "launch", "--nproc-per-node", "2", "--master-port", "29731",
               "--", "train", "--config", cfg], timeout=300)
    # The launcher's own logs on stderr, its ranks' relayed on stdout: every line is JSON.
    records = [json.loads(l) for l in (p.stderr + p.stdout).splitlines() if l.strip()]
    assert {"time", "level", "component", "msg"} <= records[0].keys(), records[0]
    components = {r["component"] for r in records}
    assert components == {"launcher", "trainer"}, components
    assert not any(l.startswith("[rank") for l in p.stdout.splitlines()), "prefixed JSON lines"
    assert {r.get("rank") for r in records if r["component"] == "trainer"} >= {0}, records
    assert any(r["msg"].startswith("step=2/2") for r in records), [r["msg"] for r in records]

    help_text = h.run(["launch", "--help"]).stdout
    assert "--nproc-per-node" in help_text and "--master-port" in help_text, help_text
    for args in (["launch", "--bogus", "--", "train"], ["train", "--config", cfg, "--bogus"],
                 ["eval", "--model", model, "--data", data, "--bogus"]):
        p = h.run(args, check=False)
        assert p.returncode != 0 and "--bogus" in p.stdout + p.stderr, (args, p.returncode, p.stderr)


def quickstart_events_read_by_tensorboard():
    """The quickstart's job (examples/default: init-model, then its FineTuneJob under `kubetune run`,
    two CPU workers; cut to 24 steps) leaves TensorBoard event files that TensorBoard's own reader
    loads, with every number of metrics_history.jsonl under its tag at its step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    w = h.workdir("tensorboard")
    h.run(["init-model", "--config", h.EXAMPLE / "model_config.json", "--tokenizer",
           h.EXAMPLE / "tokenizer", "--out", w / "runs/default/base-model", "--seed", "0"])
    job = (h.EXAMPLE / "job.yaml").read_text().replace("@ROOT@", str(w))
    job = job.replace("    epochs: 3\n", "    epochs: 3\n    maxSteps: 24\n")
    job = job.replace("evalEverySteps: 100", "evalEverySteps: 12")
    for f in ("train.jsonl", "validation.jsonl"):
        (w / "examples/default").mkdir(parents=True, exist_ok=True)
        shutil.copy(h.EXAMPLE / f, w / "examples/default" / f)
    (w / "job.yaml").write_text(job)
    p = subprocess.run([os.environ["KUBETUNE_CLI"], "run", str(w / "job.yaml")], capture_output=True,
                       text=True, timeout=540, env={**os.environ, "KUBETUNE_TRAINER": h.TRAINER})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = w / "runs/default/output"
    history = [json.loads(l) for l in (out / "metrics_history.jsonl").read_text().splitlines()]
    events = sorted((out / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1, events
    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    checked = 0
    for line in history:
        for key, value in line.items():
            if key == "step":
                continue
            tag = "eval/loss" if key == "eval_loss" else f"train/{key}"
            assert tag in tags, (tag, sorted(tags))
            at_step = [e.value for e in acc.Scalars(tag) if e.step == line["step"]]
            assert at_step, (tag, line["step"])
            want = float(torch.tensor(value, dtype=torch.float32))  # TensorBoard keeps float32
            assert at_step[-1] == want, (tag, line["step"], at_step, value)
            checked += 1
    steps = [l["step"] for l in history if "loss" in l]
    evals = [l["step"] for l in history if "eval_loss" in l]
    assert steps == list(range(1, 25)), steps
    assert evals == [12, 24], evals
    print(f"{checked} values of {len(history)} history lines match TensorBoard's reader "
          f"({len(tags)} tags, {events[0].name})")


def quickstart_learns_visibly():
    """The README's first command, minus the set-up: the embedded default job (a tiny Llama from
    init-model, the shipped upper-casing task, two CPU workers under `kubetune run`) ends at >= 90%
    held-out token accuracy, from about 2% before, and `eval --show` prints the model's own
    answers next to the expected ones."""
    w = h.workdir("quickstart")
    h.run(["init-model", "--config", h.EXAMPLE / "model_config.json", "--tokenizer",
           h.EXAMPLE / "tokenizer", "--out", w / "runs/default/base-model", "--seed", "0"])
    (w / "examples/default").mkdir(parents=True, exist_ok=True)
    for f in ("train.jsonl", "validation.jsonl"):
        shutil.copy(h.EXAMPLE / f, w / "examples/default" / f)
    (w / "job.yaml").write_text((h.EXAMPLE / "job.yaml").read_text().replace("@ROOT@", str(w)))
    p = subprocess.run([os.environ["KUBETUNE_CLI"], "run", str(w / "job.yaml")], capture_output=True,
                       text=True, timeout=540, env={**os.environ, "KUBETUNE_TRAINER": h.TRAINER})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]

    def accuracy(model):
        out = h.run(["eval", "--model", model, "--data", w / "examples/default/validation.jsonl",
                     "--json"]).stdout
        return json.loads(out.strip().splitlines()[-1])["accuracy"]

    before, after = accuracy(w / "runs/default/base-model"), accuracy(w / "runs/default/output")
    assert before < 0.1 and after >= 0.9, (before, after)
    shown = h.run(["eval", "--model", w / "runs/default/output", "--data",
                   w / "examples/default/validation.jsonl", "--show", "3"]).stdout
    lines = [l for l in shown.splitlines() if l.startswith("line ")]
    assert len(lines) == 3 and all('"user\\nupper: ' in l and " -> " in l for l in lines), shown
    assert (w / "runs/default/output/training_curves.svg").exists()
    print(f"held-out token accuracy {before:.3f} -> {after:.3f}; " + lines[0])


def local_job(w, name, training, run_policy, metrics_port=0):
    """A FineTuneJob for `kubetune run`: two CPU workers on a tiny model, the volume at `w`."""
    model = w / "model"
    if not model.exists():
        h.tiny_model(model)
        h.subset(h.EXAMPLE / "train.jsonl", w / "data.jsonl", 48)
    spec = h.config(model, w / "data.jsonl", w / name, **training)
    spec.update(checkpoint={"resume": "auto", "everySteps": 0},
                distributed={"timeoutSeconds": 120},
                metrics={"port": metrics_port, "lingerSeconds": 0},
                workers={"replicas": 2, "gpusPerWorker": 0}, runPolicy=run_policy,
                volumes=[{"name": "work", "mountPath": str(w), "hostPath": {"path": str(w)}}])
    job = {"apiVersion": "kubetune.io/v1alpha1", "kind": "FineTuneJob", "metadata": {"name": name},
           "spec": spec}
    path = w / f"{name}.yaml"
    path.write_text(json.dumps(job))  # JSON is YAML
    return path


def start_local(path):
    return subprocess.Popen([os.environ["KUBETUNE_CLI"], "run", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "KUBETUNE_TRAINER": h.TRAINER})


def preempted_worker_resumes_under_kubetune_run():
    """SIGTERM to one worker at an arbitrary step, as a node drain sends its pod: both workers stop
    after the same step with a checkpoint, the gang restarts from it, and the final weights equal
    those of a run nobody interrupted."""
    w = h.workdir("preempt")
    # Steps take milliseconds: enough of them that SIGTERM lands long before the end.
    training = dict(microBatchSize=2, maxSteps=1500)
    straight = start_local(local_job(w, "straight", training, {"backoffLimit": 0}))
    out, _ = straight.communicate(timeout=300)
    assert straight.returncode == 0, out[-3000:]
    runner = start_local(local_job(w, "preempted", training, {"backoffLimit": 1}))
    try:
        victim = h.child_pids(runner.pid, 2)[1]  # worker 1, a pod's PID 1
        stop_at = random.Random().randint(3, 12)
        h.wait_for_step(w / "preempted", stop_at)
        os.kill(victim, signal.SIGTERM)
        out, _ = runner.communicate(timeout=300)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 0, out[-4000:]
    stopped = re.search(r"stopping at step=(\d+)/1500 on request", out)
    assert stopped, out[-4000:]
    step = int(stopped.group(1))
    # Both workers stop with 3 after the same step; whichever exits first is the one reported.
    assert re.search(r"worker [01] exited with code 3; restarting all workers \(restart 1 of 1\)", out), \
        "\n".join(l for l in out.splitlines() if "step=" not in l)[-4000:]
    assert f"step-{step:08d} at step={step}/1500" in out, out[-4000:]  # the restart resumed there
    diff = h.max_abs_diff(h.weights(w / "straight"), h.weights(w / "preempted"))
    print(f"SIGTERM after step {stop_at}, stopped at step {step}; |uninterrupted - resumed| = {diff:.3g}")
    assert diff <= 1e-6, diff


def ctrl_c_stops_kubetune_run_with_a_checkpoint():
    """Ctrl-C (SIGINT) to `kubetune run`, whose workers run in a process group of their own: they get
    SIGTERM as a drained pod would, stop after the same step with a checkpoint, none is left running,
    kubetune exits 130, and running the job again resumes from that step."""
    w = h.workdir("interrupt")
    path = local_job(w, "interrupted", dict(microBatchSize=2, maxSteps=1500), {"backoffLimit": 0})
    runner = start_local(path)
    try:
        workers = h.child_pids(runner.pid, 2)
        h.wait_for_step(w / "interrupted", random.Random().randint(3, 12))
        runner.send_signal(signal.SIGINT)
        out, _ = runner.communicate(timeout=300)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 130, (runner.returncode, out[-3000:])
    assert "interrupted (signal 2)" in out, out[-3000:]
    stopped = re.search(r"stopping at step=(\d+)/1500 on request", out)
    assert stopped, out[-3000:]
    step = int(stopped.group(1))
    for pid in workers:
        try:
            os.kill(pid, 0)
            raise AssertionError(f"worker {pid} still runs after kubetune run ended")
        except ProcessLookupError:
            pass
    again = start_local(path)
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out[-3000:]
    assert f"step-{step:08d} at step={step}/1500" in out, out[-3000:]  # resumed where it stopped
    print(f"Ctrl-C: stopped at step {step} with a checkpoint; the second run resumed there")


def stalled_gang_is_restarted_by_kubetune_run():
    """A worker frozen with SIGSTOP (a hung filesystem, a deadlocked loader) while the collective
    timeout is long: the stall watchdog (runPolicy.stallTimeoutSeconds) restarts the gang, which
    then finishes."""
    w = h.workdir("stall")
    port = h.free_port()
    runner = start_local(local_job(w, "stalled", dict(microBatchSize=2, maxSteps=60),
                                   {"backoffLimit": 1, "stallTimeoutSeconds": 3}, metrics_port=port))
    try:
        victim = h.child_pids(runner.pid, 2)[1]  # worker 1, a pod's PID 1
        h.wait_for_step(w / "stalled", 3)
        ranks = h.children_of(victim)
        assert len(ranks) == 1, ranks
        os.kill(ranks[0], signal.SIGSTOP)
        out, _ = runner.communicate(timeout=300)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 0, out[-4000:]
    assert re.search(r"Stalled: rank 0 has not finished a step for 3 s \(runPolicy.stallTimeoutSeconds; "
                     r"last seen: step \d+\); restarting all workers \(restart 1 of 1\)", out), out[-4000:]
    assert "stalled succeeded" in out, out[-4000:]


def preflight_lists_bad_lines_and_counts_like_peft():
    """`preflight` reads the whole dataset without a GPU: every invalid line is reported with its
    number (exit 2), the parameter counts equal transformers' and PEFT's for the same model and
    LoRA targets, and a job whose memory estimate exceeds --gpu-memory-gib does not fit."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    w = h.workdir("preflight")
    model = h.tiny_model(w / "model")
    lines = (h.EXAMPLE / "train.jsonl").read_text().splitlines()[:40]
    lines[6] = '{"messages": [{"role": "user"}]}'
    lines[30] = "not json"
    (w / "data.jsonl").write_text("\n".join(lines) + "\n")
    cfg = h.config(model, w / "data.jsonl", w / "out", method="lora")
    cfg["method"]["lora"]["targetModules"] = ["q_proj", "v_proj", "down_proj"]
    path = h.write_config(w / "c.json", cfg)
    p = h.run(["preflight", "--config", path, "--world-size", "2"], check=False)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    report = json.loads(p.stdout)
    assert report["verdict"] == "DatasetInvalid", report
    train = report["data"]["train"]
    assert [b["line"] for b in train["invalidLines"]] == [7, 31], train["invalidLines"]
    assert train["records"] == 38 and train["invalidRecords"] == 2, train
    assert "data.jsonl:7: " in report["message"], report["message"]

    hf = AutoModelForCausalLM.from_pretrained(model)
    assert report["model"]["parameters"] == hf.num_parameters(), (report["model"], hf.num_parameters())
    peft = get_peft_model(hf, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    trainable, _ = peft.get_nb_trainable_parameters()
    assert report["model"]["trainableParameters"] == trainable, (report["model"], trainable)

    (w / "data.jsonl").write_text("\n".join(l for i, l in enumerate(lines) if i not in (6, 30)) + "\n")
    ok = json.loads(h.run(["preflight", "--config", path, "--world-size", "2"]).stdout)
    assert ok["verdict"] == "OK" and ok["steps"]["perEpoch"] == math.ceil(38 / 4), ok  # the short tail is a step
    p = h.run(["preflight", "--config", path, "--gpu-memory-gib", "0.0001"], check=False)
    assert p.returncode == 2 and json.loads(p.stdout)["verdict"] == "DoesNotFit", p.stdout[-2000:]
    assert "more than the GPU's 0.0 GiB" in json.loads(p.stdout)["message"], p.stdout[-2000:]
    print(json.dumps(ok["memory"]))


def preflight_termination_log_names_line_9731():
    """What the operator's preflight pod leaves in its termination message (at most 4 KiB, which
    Kubernetes cuts blindly): valid JSON with the verdict and the bad line's number, however many
    and however long the bad lines are."""
    w = h.workdir("termination-log")
    model = h.tiny_model(w / "model")
    good = (h.EXAMPLE / "train.jsonl").read_text().splitlines()
    lines = [good[i % len(good)] for i in range(10000)]
    lines[9730] = '{"messages": "not a list"}'
    (w / "data.jsonl").write_text("\n".join(lines) + "\n")
    path = h.write_config(w / "c.json", h.config(model, w / "data.jsonl", w / "out", method="lora"))
    log = w / "termination-log"
    p = h.run(["preflight", "--config", path, "--termination-log", str(log)], check=False)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    short = json.loads(log.read_text())
    assert short["verdict"] == "DatasetInvalid" and "data.jsonl:9731: " in short["message"], short
    assert short["data"]["train"]["records"] == 9999, short["data"]

    # 300 long bad lines: the lists shrink, the counts and the first line's number stay.
    bad = ['{"messages": [{"role": "user", "content": "%s"}]' % ("x" * 3000)] * 300
    (w / "data.jsonl").write_text("\n".join(good[:20] + bad) + "\n")
    p = h.run(["preflight", "--config", path, "--termination-log", str(log)], check=False)
    assert p.returncode == 2 and len(log.read_bytes()) <= 4096, len(log.read_bytes())
    short = json.loads(log.read_text())
    assert short["data"]["train"]["invalidRecords"] == 300, short["data"]
    assert short["data"]["train"]["invalidLines"][0]["line"] == 21, short["data"]
    assert "data.jsonl:21: " in short["message"], short["message"]
    assert len(json.loads(p.stdout)["data"]["train"]["invalidLines"]) == 20  # stdout: the whole one

    # A model folder that is not there: a verdict too, not only a log line.
    cfg = h.config(w / "no-model", w / "data.jsonl", w / "out", method="lora")
    p = h.run(["preflight", "--config", h.write_config(w / "c2.json", cfg), "--termination-log",
               str(log)], check=False)
    short = json.loads(log.read_text())
    assert p.returncode == 2 and short["verdict"] == "InputInvalid", (p.returncode, short)
    assert "no-model" in short["message"], short


def kubetune_plan_and_run_stop_at_a_bad_line():
    """The FineTuneJob's own check, with the real trainer: a bad line 9 makes `kubetune plan` exit 2
    with the line in its report, and `kubetune run` fail with it before any worker starts."""
    w = h.workdir("plan")
    path = local_job(w, "planned", dict(microBatchSize=2, maxSteps=5), {"backoffLimit": 0})
    lines = (w / "data.jsonl").read_text().splitlines()
    lines[8] = '{"messages": "not a list"}'
    (w / "data.jsonl").write_text("\n".join(lines) + "\n")
    env = {**os.environ, "KUBETUNE_TRAINER": h.TRAINER}
    plan = subprocess.run([os.environ["KUBETUNE_CLI"], "plan", str(path)], capture_output=True,
                          text=True, timeout=120, env=env)
    assert plan.returncode == 2, (plan.returncode, plan.stdout[-2000:], plan.stderr[-2000:])
    report = json.loads(plan.stdout)
    assert report["verdict"] == "DatasetInvalid", report
    assert [b["line"] for b in report["data"]["train"]["invalidLines"]] == [9], report["data"]
    assert report["steps"]["worldSize"] == 2, report["steps"]
    run = subprocess.run([os.environ["KUBETUNE_CLI"], "run", str(path)], capture_output=True,
                         text=True, timeout=120, env=env)
    assert run.returncode == 2, (run.returncode, run.stdout[-2000:])
    assert "data.jsonl:9: " in run.stdout and "[worker-" not in run.stdout, run.stdout[-2000:]
    print(run.stdout.strip().splitlines()[-2:])


def profile_trace_counts_gemms_like_torch():
    """KUBETUNE_PROFILE's trace records each op's input shapes, and bench/trace_summary.py reads
    every GEMM of a LoRA step from them with the FLOPs that torch's own counter (the profiler's
    with_flops, replaying the op at those shapes) gives it."""
    sys.path.insert(0, str(h.REPO / "bench"))
    import trace_summary

    w = h.workdir("profile")
    model = h.tiny_model(w / "model")
    data = h.subset(h.EXAMPLE / "train.jsonl", w / "data.jsonl", 8)
    cfg = h.config(model, data, w / "out", method="lora", maxSteps=3)
    h.run(["train", "--config", h.write_config(w / "cfg.json", cfg)],
          env={**os.environ, "KUBETUNE_PROFILE": "2:1"})
    events = json.loads((w / "out" / "trace_rank0.json").read_text())["traceEvents"]
    gemms = [(e["name"], e["args"].get("Input Dims")) for e in events
             if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::addmm")]
    assert len(gemms) >= 20 and all(dims for _, dims in gemms), gemms[:3]
    shapes = {(name, json.dumps(dims)) for name, dims in gemms}
    narrow = 0
    for name, dims_json in sorted(shapes):
        dims = json.loads(dims_json)
        args = [torch.randn(d) for d in dims if isinstance(d, list) and d]
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_flops=True) as p:
            getattr(torch, name.split("::")[1])(*args)
        reference = sum(e.flops for e in p.key_averages() if e.key == name)
        m, k, n = trace_summary.gemm_mkn(name, dims)
        assert 2 * m * k * n == reference > 0, (name, dims, 2 * m * k * n, reference)
        narrow += min(m, k, n) <= 4  # the adapters' rank
    print(f"{len(gemms)} GEMM ops in the traced step, {len(shapes)} distinct shapes counted as torch "
          f"counts them, {narrow} of them of rank 4 (LoRA)")
    assert narrow >= 4, narrow


def bench_rows(name):
    """The JSON rows of bench/results/NAME."""
    results = h.REPO / "bench" / "results" / name
    return [json.loads(line) for line in results.read_text().splitlines() if line.strip()]


def preflight_memory_matches_measured_peaks():
    """The preflight's memory estimate against the peaks measured on an H200 with this trainer
    (bench/results: session 11's 1B and 8B LoRA, QLoRA and full fine-tuning at 2048 tokens,
    offloaded checkpoints, 8B LoRA at 65536 and 131072 tokens, 70B QLoRA; session 12's 8B LoRA at
    262144 tokens, measured after the estimate was fitted): for each measured run, the same config
    (bench/trainer_config.sh) on the same shape (config.json only) must be estimated within 6% of
    its peak. Session 16's H100 runs of the 1B with distributed.sharding full and without (one
    process: issue 29's check) within 5%. Session 17's H100 runs: 8B LoRA and QLoRA in bf16 and with
    model.precision fp8 (its FP8 base), and 8B QLoRA at 294912 tokens (issue 30's longest context),
    within 6%. Session 18's H100 runs with the MLP over chunks of tokens: 8B LoRA at 65536 and
    131072 tokens, 8B QLoRA r32 at 131072 and 393216, within 6%. Session 22's H100 runs of 8B LoRA
    and QLoRA in bf16 and fp8 (LoRA's FP8 base now kept transposed too, fp8_linear.h), within 6%.
    Session 25's H100 runs of the other families (issue 45): Qwen3-8B LoRA and QLoRA, Gemma-3-12B
    LoRA and Phi-4 QLoRA, bf16 and fp8, within 6%. Session 26's Qwen3-30B-A3B (24 layers) LoRA and
    QLoRA, within 6%. Session 35's Phi-4 QLoRA on an H200 (its MLP one node since), within 6%.
    Session 36's whole-model FP8 rows of Gemma-3-12B LoRA and Phi-4 QLoRA on an H200, within 6%."""
    w = h.workdir("preflight-memory")
    rows = []
    for name in ["h200-session11.jsonl", "h200-session12-long-context.jsonl", "h100-full-sharding-1gpu.jsonl",
                 "h100-session17-fp8-8b-lora.jsonl", "h100-session17-fp8-8b-qlora.jsonl",
                 "h100-session17-long-context.jsonl"]:
        rows += bench_rows(name)
    # Session 18 runs the MLP of long sequences over chunks of tokens (trainer/model/
    # frozen_linear_group.h): the long rows measured before (over 32768 tokens) are another build's
    # peaks, and session 18's long rows take their place.
    rows = [dict(r, before_chunking=True) for r in rows]
    rows += bench_rows("h100-session18-long-context.jsonl")
    # Before session 22 LoRA's FP8 base was kept in one layout only: those peaks are another
    # build's, and session 22's rows take their place.
    rows = [dict(r, one_fp8_layout=True) for r in rows]
    rows += bench_rows("h100-session22-vs-unsloth.jsonl")
    rows += [r for r in bench_rows("h100-session25-families-vs-unsloth.jsonl") if not r.get("superseded")]
    # Session 26: Qwen3-30B-A3B (24 of its 48 layers) LoRA and QLoRA.
    rows += [r for r in bench_rows("h100-session26-moe-vs-unsloth.jsonl") if not r.get("superseded")]
    # Session 35: Phi-4 QLoRA with its fused gate_up_proj in the frozen MLP node (all 40 layers, and
    # 20 of them; bf16, and FP8 at 20), on an H200.
    rows += [r for r in bench_rows("h200-session35-phi4-qlora.jsonl")
             if r["call"].startswith(("session35-C", "session35-H"))]
    # Session 36: the FP8 rows no earlier session measured on the whole model (Gemma-3-12B LoRA,
    # Phi-4 QLoRA), on an H200.
    rows += [r for r in bench_rows("h200-session36-families.jsonl")
             if r["call"].startswith(("session36-E", "session36-F")) and r.get("precision") == "fp8"]
    rows = [r for r in rows if r.get("impl") == "ours" and r.get("gpus") == 1 and "shape" in r
            and not (r.get("before_chunking") and r["seq"] * r["micro_batch"] > 32768)
            and not (r.get("one_fp8_layout") and r.get("precision") == "fp8" and r["method"] == "lora")]
    assert len(rows) >= 20, len(rows)
    checkpointing = {"off": "false", "on": "true", "offload": "offload"}
    worst = 0.0
    for r in rows:
        inputs = w / f"{r['shape']}-{r['seq']}-{r.get('layers', 'all')}"
        if not inputs.exists():
            subprocess.run([sys.executable, str(h.REPO / "bench" / "make_bench_inputs.py"),
                            # Long rows: a micro-batch of 1 needs one record, and each is seq characters.
                            str(inputs), "--shape", r["shape"], "--seq", str(r["seq"]),
                            "--records", "2" if r["seq"] > 8192 else "8",
                            "--config-only"] + (["--layers", str(r["layers"])] if "layers" in r else []),
                           check=True, capture_output=True, timeout=300)
        cfg = subprocess.run(["bash", str(h.REPO / "bench" / "trainer_config.sh"), str(inputs),
                              str(w / "out"), r["method"], "10", str(r["micro_batch"]), str(r["seq"]),
                              json.dumps({"sharding": r["sharding"]} if "sharding" in r else {}),
                              checkpointing[r["recompute"]], r.get("precision", "default")],
                             check=True, capture_output=True, text=True,
                             env={**os.environ, "LORA_RANK": str(r.get("lora_r", 16))}).stdout
        path = w / "c.json"
        path.write_text(cfg)
        report = json.loads(h.run(["preflight", "--config", str(path)], timeout=600).stdout)
        estimate, peak = report["memory"]["totalGiB"], r["peak_gib"]
        error = estimate / peak - 1
        print(f"{r['gpu'] if 'gpu' in r else ''} {r['shape']} {r['method']} {r.get('precision', '')} "
              f"mb{r['micro_batch']} seq{r['seq']} "
              f"{r['recompute']} sharding {r.get('sharding', '-')}: measured {peak:.2f} GiB, estimated "
              f"{estimate:.2f} ({error:+.1%})")
        assert abs(error) <= (0.05 if "sharding" in r else 0.06), (r, estimate)
        worst = max(worst, abs(error))
    print(f"worst {worst:.1%}")


def plan_says_8b_full_needs_full_sharding():
    """Llama-3.1-8B full fine-tuning (gradient checkpointing, 2048 tokens, micro-batch 1) on 80 GB
    H100s (79.6 GiB): one GPU cannot hold it and no number of GPUs can with the optimizer alone
    sharded (every process keeps the weights and gradients, 64 GB); `preflight` says it fits with
    distributed.sharding full across >= 2 GPUs and lists the estimate of each mode and count, and
    with that setting on 2 processes the verdict is OK. The load's peak (the whole model on each GPU
    before it is split) is part of the estimate at every count."""
    w = h.workdir("plan-8b-full")
    inputs = w / "llama-3.1-8b"
    subprocess.run([sys.executable, str(h.REPO / "bench" / "make_bench_inputs.py"), str(inputs), "--shape",
                    "llama-3.1-8b", "--seq", "2048", "--records", "8", "--config-only"],
                   check=True, capture_output=True, timeout=300)
    def preflight(sharding, world):
        cfg = subprocess.run(["bash", str(h.REPO / "bench" / "trainer_config.sh"), str(inputs), str(w / "out"),
                              "full", "10", "1", "2048", json.dumps({"sharding": sharding}), "true"],
                             check=True, capture_output=True, text=True).stdout
        path = w / f"{sharding}.json"
        path.write_text(cfg)
        p = h.run(["preflight", "--config", str(path), "--world-size", str(world), "--gpu-memory-gib", "79.6"],
                  check=False, timeout=300)
        return p.returncode, json.loads(p.stdout)
    code, report = preflight("optimizer", 1)
    assert code == 2 and report["verdict"] == "DoesNotFit", (code, report.get("message"))
    assert "it fits with distributed.sharding full across >= 2 GPUs" in report["message"], report["message"]
    table = {(e["sharding"], e["processes"]): e for e in report["memory"]["byShardingMode"]}
    print(report["message"])
    print({f"{k[0]}x{k[1]}": e["totalGiB"] for k, e in table.items()})
    assert not table[("none", 1)]["fits"], table
    assert not any(e["fits"] for (mode, _), e in table.items() if mode != "full"), table
    assert table[("full", 2)]["fits"] and table[("full", 8)]["totalGiB"] < table[("full", 2)]["totalGiB"], table
    code, report = preflight("full", 2)
    assert code == 0 and report["verdict"] == "OK", (code, report.get("message"))
    assert report["memory"]["sharding"] == "full", report["memory"]
    # Each layer is split as it loads, so no GPU holds the whole model (29.9 GiB of fp32 for the
    # 8B): the load's peak is this GPU's half (14.96 GiB) and the root (embedding and output
    # layer, 2 x 525M parameters) twice, as loaded and in its flat buffer (7.8 GiB).
    loading = report["memory"]["loadingGiB"]
    assert 22.0 < loading < 23.8, loading


def plan_235b_a22b_qlora_across_gpus_with_full_sharding():
    """Qwen3-235B-A22B QLoRA (its real config: 94 layers of 128 experts, 8 per token; gradient
    checkpointing, 2048 tokens, micro-batch 1) on 80 GB GPUs (79.6 GiB), as issue 46 asks it
    planned. Its 4-bit base (about 118 GiB) fits no single GPU; with the adapters on attention,
    `preflight` says it fits with distributed.sharding full across >= 2 GPUs, each GPU's share
    shrinks with their number, and 4 processes are OK. With every expert adapted as well (PEFT's
    names, 3.9B adapter weights, which every process keeps whole with their gradients and Adam's
    moments) no sharding fits, and the estimate says why: the trainable part alone is 72 GiB."""
    w = h.workdir("plan-235b")
    inputs = w / "qwen3-235b-a22b"
    subprocess.run([sys.executable, str(h.REPO / "bench" / "make_bench_inputs.py"), str(inputs), "--shape",
                    "qwen3-235b-a22b", "--seq", "2048", "--records", "8", "--config-only"],
                   check=True, capture_output=True, timeout=300)

    def preflight(targets, sharding, world):
        cfg = subprocess.run(["bash", str(h.REPO / "bench" / "trainer_config.sh"), str(inputs), str(w / "out"),
                              "qlora", "10", "1", "2048", json.dumps({"sharding": sharding}), "true"],
                             check=True, capture_output=True, text=True,
                             env={**os.environ, "LORA_TARGETS": targets}).stdout
        path = w / f"{targets}-{sharding}.json"
        path.write_text(cfg)
        p = h.run(["preflight", "--config", str(path), "--world-size", str(world), "--gpu-memory-gib", "79.6"],
                  check=False, timeout=300)
        return p.returncode, json.loads(p.stdout)

    code, report = preflight("attention", "none", 1)
    assert code == 2 and report["verdict"] == "DoesNotFit", (code, report.get("message"))
    assert report["memory"]["frozenWeightsGiB"] > 110, report["memory"]
    assert "it fits with distributed.sharding full across >= 2 GPUs" in report["message"], report["message"]
    table = {(e["sharding"], e["processes"]): e for e in report["memory"]["byShardingMode"]}
    print({f"{k[0]}x{k[1]}": e["totalGiB"] for k, e in table.items()})
    assert not any(e["fits"] for (mode, _), e in table.items() if mode != "full"), table
    assert table[("full", 2)]["fits"] and table[("full", 4)]["fits"], table
    assert table[("full", 8)]["totalGiB"] < table[("full", 4)]["totalGiB"] < table[("full", 2)]["totalGiB"], table
    code, report = preflight("attention", "full", 4)
    assert code == 0 and report["verdict"] == "OK", (code, report.get("message"))
    share = report["memory"]["frozenWeightsGiB"]
    assert 118 / 4 < share < 118 / 4 + 10, share  # a quarter of the base, and what is gathered at once

    code, report = preflight("all-linear", "full", 4)
    assert code == 2 and "no distributed.sharding up to 64 GPUs makes it fit" in report["message"], report
    memory = report["memory"]
    adapters = memory["trainableWeightsGiB"] + memory["gradientsGiB"] + memory["optimizerStatesGiB"]
    assert adapters > 70, memory


def kubetune_plan_picks_the_measured_micro_batch():
    """`kubetune plan` of a FineTuneJob with microBatchSize auto on the 1B and 8B shapes (LoRA r16
    all-linear, 2048 tokens, the benchmark's work) picks, for an H100's and an H200's memory
    (workers.gpuMemoryGiB), the micro-batch the benchmark measured fastest among those that fit
    there, or the one below it (bench/results/micro-batch-sweep-h100-h200.jsonl, bench/README.md:
    the margin), and never one that ran out of memory; accumulation keeps the global batch."""
    w = h.workdir("plan-auto")
    rows = bench_rows("micro-batch-sweep-h100-h200.jsonl")
    assert len(rows) == 4, len(rows)
    env = {**os.environ, "KUBETUNE_TRAINER": h.TRAINER}
    for r in rows:
        inputs = w / r["shape"]
        if not inputs.exists():
            subprocess.run([sys.executable, str(h.REPO / "bench" / "make_bench_inputs.py"), str(inputs),
                            "--shape", r["shape"], "--seq", str(r["seq"]), "--records", "8", "--config-only"],
                           check=True, capture_output=True, timeout=300)
        spec = json.loads(subprocess.run(
            ["bash", str(h.REPO / "bench" / "trainer_config.sh"), str(inputs), str(w / "out"), r["method"],
             "10", "1", str(r["seq"])], check=True, capture_output=True, text=True).stdout)
        swept = [row["micro_batch"] for row in r["rows"]]
        spec["training"].update(microBatchSize="auto", globalBatchSize=max(swept) * 2)
        spec.update(workers={"replicas": 1, "gpusPerWorker": 1, "gpuMemoryGiB": r["gpu_gib"]},
                    volumes=[{"name": "work", "mountPath": str(w), "hostPath": {"path": str(w)}}])
        path = w / "job.yaml"
        path.write_text(json.dumps({"apiVersion": "kubetune.io/v1alpha1", "kind": "FineTuneJob",
                                    "metadata": {"name": "planned"}, "spec": spec}))
        plan = subprocess.run([os.environ["KUBETUNE_CLI"], "plan", str(path)], capture_output=True,
                              text=True, timeout=300, env=env)
        assert plan.returncode == 0, (plan.returncode, plan.stdout[-2000:], plan.stderr[-2000:])
        chosen = json.loads(plan.stdout)["microBatch"]
        fits = sorted(row["micro_batch"] for row in r["rows"] if not row.get("out_of_memory"))
        fastest = r["fastest_that_fits"]
        allowed = {fastest} | {m for m in fits if m < fastest and m * 2 >= fastest}
        print(f"{r['gpu']} {r['shape']}: measured fastest that fits {fastest}, plan picks "
              f"{chosen['size']} x {chosen['accumulation']} ({chosen['reason']})")
        assert chosen["auto"] and chosen["size"] in allowed, (chosen, allowed)
        assert chosen["size"] * chosen["accumulation"] == max(swept) * 2, chosen


if __name__ == "__main__":
    h.main({f.__name__: f for f in [accumulation_equals_big_batch, resume_equals_uninterrupted,
                                     damaged_checkpoint_is_skipped, eval_matches_transformers,
                                     tokenize_matches_tokenizers, lora_adapter_loads_in_peft,
                                     qlora_matches_peft_bitsandbytes,
                                     qlora_float32_model_with_bf16_compute_matches_bitsandbytes,
                                     random_init_trains_from_config_alone,
                                     bad_inputs_are_named, quickstart_events_read_by_tensorboard,
                                     quickstart_learns_visibly,
                                     logs_are_structured_and_options_checked,
                                     profile_trace_counts_gemms_like_torch,
                                     preempted_worker_resumes_under_kubetune_run,
                                     stalled_gang_is_restarted_by_kubetune_run,
                                     ctrl_c_stops_kubetune_run_with_a_checkpoint,
                                     preflight_lists_bad_lines_and_counts_like_peft,
                                     preflight_termination_log_names_line_9731,
                                     preflight_memory_matches_measured_peaks,
                                     kubetune_plan_and_run_stop_at_a_bad_line,
                                     kubetune_plan_picks_the_measured_micro_batch,
                                     plan_says_8b_full_needs_full_sharding,
                                     plan_235b_a22b_qlora_across_gpus_with_full_sharding]})
