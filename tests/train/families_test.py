#!/usr/bin/env python3
"""The model families of trainer/model/family.h end to end (issue 45), each a ctest entry:
`families_test.py FAMILY`. For a tiny random checkpoint of the family saved by transformers in the
Hub layout (sharded safetensors), with the demo tokenizer:

1. LoRA on all linear layers from a FineTuneJob run by `kubetune run` (two CPU workers, DDP over
   Gloo, a checkpoint and a resume in the middle): the adapter loads in PEFT and scores a record
   with the loss `kubetune-trainer eval --adapter` reports.
2. Full fine-tuning in one process: the HF folder it writes loads in transformers (as the same
   architecture) and scores the record with the loss our eval reports for that folder.
3. Full fine-tuning on two processes with the optimizer sharded (ZeRO-2) and with the weights
   sharded (ZeRO-3), and a sharded run's checkpoint resumed on one process: the weights of one
   process without sharding.

References: transformers and PEFT."""
import json
import math
import os
import subprocess
import sys

import torch

import harness as h

RECORD = {"messages": [{"role": "user", "content": "upper: fine tune"},
                       {"role": "assistant", "content": "FINE TUNE"}]}


def tiny_checkpoint(family, dest):
    """The family's smallest interesting shape: the demo tokenizer's vocabulary, 2-3 layers, the
    options its real checkpoints use (head_dim apart from hidden/heads, windows, two RoPEs...)."""
    import transformers as tf

    demo = json.loads((h.EXAMPLE / "model_config.json").read_text())
    common = dict(vocab_size=demo["vocab_size"], hidden_size=64, intermediate_size=96,
                  num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                  max_position_embeddings=256, bos_token_id=demo.get("bos_token_id"),
                  eos_token_id=demo.get("eos_token_id"), pad_token_id=demo.get("pad_token_id"))
    if family == "qwen3":
        model = tf.Qwen3ForCausalLM(tf.Qwen3Config(**common, head_dim=24, tie_word_embeddings=True))
    elif family == "gemma3":
        model = tf.Gemma3ForCausalLM(tf.Gemma3TextConfig(
            **{**common, "num_hidden_layers": 3}, head_dim=32, query_pre_attn_scalar=32,
            sliding_window=16, layer_types=["sliding_attention", "sliding_attention", "full_attention"]))
    elif family == "gemma3_mm":  # Gemma 3 4B-27B as published: the language model beside a vision tower
        vocab = common["vocab_size"]
        model = tf.Gemma3ForConditionalGeneration(tf.Gemma3Config(
            text_config=tf.Gemma3TextConfig(
                **{**common, "num_hidden_layers": 2}, head_dim=32, query_pre_attn_scalar=32,
                sliding_window=16, layer_types=["sliding_attention", "full_attention"]).to_dict(),
            vision_config=tf.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                num_attention_heads=2, image_size=28, patch_size=14).to_dict(),
            mm_tokens_per_image=4, boi_token_index=vocab - 3, eoi_token_index=vocab - 2,
            image_token_index=vocab - 1))
    elif family == "phi3":  # Phi-4's layout: fused qkv_proj and gate_up_proj
        model = tf.Phi3ForCausalLM(tf.Phi3Config(**common, rope_parameters={
            "rope_type": "default", "rope_theta": 250000.0}))
    elif family == "qwen3_moe":  # 4 experts, top 2, the router's load-balancing loss on
        model = tf.Qwen3MoeForCausalLM(tf.Qwen3MoeConfig(
            **common, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
            norm_topk_prob=True, output_router_logits=True, router_aux_loss_coef=0.02))
    elif family == "mixtral":
        model = tf.MixtralForCausalLM(tf.MixtralConfig(**common, num_local_experts=4,
                                                       num_experts_per_tok=2))
    elif family == "gpt_oss":  # sinks, biases, alternating windows, YaRN; 4 experts, top 2
        model = tf.GptOssForCausalLM(tf.GptOssConfig(
            **{**common, "intermediate_size": 32}, head_dim=16, num_local_experts=4,
            num_experts_per_tok=2, sliding_window=16, output_router_logits=True,
            router_aux_loss_coef=0.02))
    else:
        raise SystemExit(f"unknown family {family}")
    torch.manual_seed(0)
    with torch.no_grad():  # transformers' 0.02 init gives flat logits; larger weights train visibly
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.normal_(0, 0.08)
    model.save_pretrained(dest, max_shard_size="100KB")
    for f in (h.EXAMPLE / "tokenizer").iterdir():
        (dest / f.name).write_bytes(f.read_bytes())
    return dest


def our_eval(model_dir, data, adapter=None):
    args = ["eval", "--model", model_dir, "--data", data, "--json"]
    if adapter:
        args += ["--adapter", adapter]
    return json.loads(h.run(args).stdout)["mean_loss"]


def hf_loss(model, model_dir):
    """The record tokenised and masked as the README documents (loss on the assistant's turn)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    msgs = RECORD["messages"]
    full = tok.apply_chat_template(msgs, tokenize=False)
    prefix = tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True)
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    labels = [t if s >= len(prefix) else -100 for t, (s, _) in zip(enc["input_ids"], enc["offset_mapping"])]
    # The next-token loss alone, as our eval reports it (without a router's load-balancing loss).
    extra = {"output_router_logits": False} if hasattr(model.config, "num_experts_per_tok") else {}
    with torch.no_grad():
        return model(input_ids=torch.tensor([enc["input_ids"]]), labels=torch.tensor([labels]),
                     **extra).loss.item()


def lora_job(w, model_dir, data):
    """A FineTuneJob for `kubetune run`: two CPU workers, a checkpoint every 3 steps."""
    spec = h.config(model_dir, data, w / "adapter", method="lora", maxSteps=6, learningRate=5e-2)
    spec["method"]["lora"]["targetModules"] = ["all-linear"]
    spec.update(checkpoint={"resume": "auto", "everySteps": 3}, distributed={"timeoutSeconds": 120},
                metrics={"port": 0, "lingerSeconds": 0}, workers={"replicas": 2, "gpusPerWorker": 0},
                runPolicy={"backoffLimit": 0},
                volumes=[{"name": "work", "mountPath": str(w), "hostPath": {"path": str(w)}}])
    job = {"apiVersion": "kubetune.io/v1alpha1", "kind": "FineTuneJob",
           "metadata": {"name": "lora"}, "spec": spec}
    path = w / "lora.yaml"
    path.write_text(json.dumps(job))
    p = subprocess.run([os.environ["KUBETUNE_CLI"], "run", str(path)], capture_output=True, text=True,
                       timeout=500, env={**os.environ, "KUBETUNE_TRAINER": h.TRAINER})
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    return w / "adapter"


def sharded_runs_equal_one_process(w, model_dir, data, per_example_forwards=False):
    """With per_example_forwards the one-process runs take the examples one per forward, as the
    two-process runs do: a router's load-balancing loss depends on which tokens share a forward."""
    micro, accum = (1, 4) if per_example_forwards else (2, 2)

    def run(name, world, micro, accum, sharding, checkpoint=None):
        cfg = h.config(model_dir, data, w / name, method="full", maxSteps=4, microBatchSize=micro,
                       gradientAccumulationSteps=accum, learningRate=1e-2, maxGradNorm=0.05)
        cfg["distributed"].update(sharding=sharding)
        if checkpoint:
            cfg["checkpoint"] = checkpoint
        path = h.write_config(w / f"{name}.json", cfg)
        args = ["train", "--config", path]
        if world > 1:
            args = ["launch", "--nproc-per-node", world, "--master-port", h.free_port(), "--"] + args
        p = h.run(args)
        return p.stdout + p.stderr

    run("one", 1, micro, accum, "none")
    reference = h.weights(w / "one")
    moved = h.max_abs_diff(h.weights(model_dir), reference)
    assert moved > 1e-3, moved  # the comparisons below can fail
    halfway = w / "ck" / "step-00000002"
    for sharding in ("optimizer", "full"):
        run(sharding, 2, 1, 2, sharding,
            checkpoint={"resume": "never", "dir": str(w / "ck"), "everySteps": 2} if sharding == "full" else None)
        diff = h.max_abs_diff(reference, h.weights(w / sharding))
        print(f"sharding {sharding} on 2 processes: max |w - w_one| = {diff:.3g}")
        assert diff <= 1e-5, (sharding, diff)
    out = run("resumed", 1, micro, accum, "none", checkpoint={"resume": str(halfway), "dir": str(w / "ck1"), "everySteps": 0})
    assert f"resuming from {halfway} at step=2/4" in out, out[-2000:]
    diff = h.max_abs_diff(reference, h.weights(w / "resumed"))
    print(f"ZeRO-3 checkpoint of 2 processes resumed on 1: max |w - w_one| = {diff:.3g}")
    assert diff <= 1e-5, diff


def check_family(family):
    from peft import PeftModel
    from transformers import AutoConfig, AutoModelForCausalLM

    w = h.workdir(f"family-{family}")
    model_dir = tiny_checkpoint(family, w / "model")
    data = h.subset(h.EXAMPLE / "train.jsonl", w / "data.jsonl", 24)
    one = w / "one.jsonl"
    one.write_text(json.dumps(RECORD) + "\n")
    architecture = AutoConfig.from_pretrained(model_dir).architectures

    base = our_eval(model_dir, one)
    base_hf = hf_loss(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), model_dir)
    print(f"{family} base: ours {base:.6f} transformers {base_hf:.6f}")
    assert math.isclose(base, base_hf, rel_tol=1e-4)

    adapter = lora_job(w, model_dir, data)
    ours = our_eval(model_dir, one, adapter)
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                                           adapter)
    peft = hf_loss(peft_model, model_dir)
    print(f"{family} LoRA (FineTuneJob, 2 workers): ours {ours:.6f} peft {peft:.6f}")
    assert abs(ours - base) > 1e-3, "the adapter changed nothing"
    assert math.isclose(ours, peft, rel_tol=1e-4)

    cfg = h.config(model_dir, data, w / "full", method="full", maxSteps=3, learningRate=1e-3)
    h.run(["train", "--config", h.write_config(w / "full.json", cfg)])
    tuned = AutoModelForCausalLM.from_pretrained(w / "full", dtype=torch.float32)
    assert [type(tuned).__name__] == architecture, (type(tuned).__name__, architecture)
    ours_full, hf_full = our_eval(w / "full", one), hf_loss(tuned, model_dir)
    print(f"{family} full fine-tuning: ours {ours_full:.6f} transformers {hf_full:.6f}")
    assert abs(ours_full - base) > 1e-4, "full fine-tuning changed nothing"
    assert math.isclose(ours_full, hf_full, rel_tol=1e-4)

    if hasattr(tuned.config, "num_experts_per_tok"):  # every token met k experts in every layer
        config = tuned.config
        for line in (w / "full" / "metrics_history.jsonl").read_text().splitlines():
            step = json.loads(line)
            if "loss" in step:
                routed = sum(step["expert_tokens"])
                expected = step["global_tokens"] * config.num_hidden_layers * config.num_experts_per_tok
                assert routed == expected, (step, expected)
        first = json.loads((w / "full" / "metrics_history.jsonl").read_text().splitlines()[0])
        print(f"{family}: tokens routed to each expert in step 1: {first.get('expert_tokens')}")

    sharded_runs_equal_one_process(w, model_dir, data,
                                   per_example_forwards=family in ("qwen3_moe", "gpt_oss"))


if __name__ == "__main__":
    check_family(sys.argv[1])
    print(f"{sys.argv[1]}: ok")
