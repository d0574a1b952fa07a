#!/usr/bin/env python3
"""The baselines: our trainer's competitors doing the same work as it (same model folder, tokenizer,
records, sequence length, micro-batch, LoRA r16/alpha 32 on all linear layers, bf16 autocast with fp32
trainable weights, fused AdamW lr 1e-4, clipping at 1.0, loss on every token), under torch DDP.
Run under torchrun; rank 0 prints one JSON line.

  --impl hf       Hugging Face transformers + PEFT.
  --impl liger    the same with Liger's kernels (apply_liger_kernel_to_llama() with its defaults: RoPE,
                  RMSNorm, SwiGLU and the fused linear cross-entropy).
  --impl unsloth  Unsloth's FastLanguageModel (16-bit LoRA, or full_finetuning with float32 mixed
                  precision). Unsloth must be imported before transformers and peft, so those are
                  imported only once the implementation is chosen.
  --recompute     gradient checkpointing: off, on (non-reentrant), or unsloth (Unsloth's own, which
                  offloads the checkpoints to CPU memory; --impl unsloth only).
  --parallel      ddp (torch DDP, the default) or fsdp2 (torch's fully_shard on every decoder layer and
                  the root, bf16 compute over fp32 weights, gradients reduced in fp32: what our
                  `distributed.sharding: full` does; --impl hf only). A model folder without weights
                  (make_bench_inputs.py --config-only) is drawn at random on the GPUs, shard by shard.

Usage: torchrun --nproc-per-node N hf_baseline.py --model DIR --data FILE --method lora|full
                [--impl hf|liger|unsloth] [--recompute off|on|unsloth]
                --seq 2048 --micro-batch 4 --steps 20 --warmup-steps 5
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# Phi-3 and Phi-4 store q, k, v in one qkv_proj and gate, up in one gate_up_proj.
FUSED_LORA_TARGETS = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]


ATTENTION_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def model_type(model_dir: str) -> str:
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f).get("model_type")


def lora_targets(model_dir: str):
    """LORA_TARGETS=attention (as bench/trainer_config.sh reads it): q, k, v and o only."""
    if os.environ.get("LORA_TARGETS") == "attention":
        return ATTENTION_TARGETS
    return FUSED_LORA_TARGETS if model_type(model_dir) == "phi3" else LORA_TARGETS


def attention_implementation(model_dir: str) -> str:
    # transformers runs gpt-oss's sinks only in its eager attention (or hub kernels, offline here).
    return "eager" if model_type(model_dir) == "gpt_oss" else "sdpa"


def load_hf(args, liger: bool) -> torch.nn.Module:
    if liger:  # patches transformers' Llama classes, so before the model is built
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        apply_liger_kernel_to_llama()
    from transformers import AutoModelForCausalLM

    frozen_dtype = torch.float32 if args.method == "full" else torch.bfloat16
    extra = {}
    if args.method == "qlora":  # QLoRA's defaults, as our method.quantization's
        from transformers import BitsAndBytesConfig
        extra = {"quantization_config": BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16), "device_map": {"": torch.cuda.current_device()}}
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=frozen_dtype,
                                                 attn_implementation=attention_implementation(args.model), **extra)
    if args.recompute == "on":
        # Non-reentrant: the frozen embedding's output needs no requires_grad hook for LoRA.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if args.method in ("lora", "qlora"):
        from peft import LoraConfig, get_peft_model
        targets = ATTENTION_TARGETS if os.environ.get("LORA_TARGETS") == "attention" else "all-linear"
        model = get_peft_model(model, LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0,
                                                 target_modules=targets, task_type="CAUSAL_LM"))
        for p in model.parameters():  # PEFT keeps adapters in fp32 under autocast, as we do
            if p.requires_grad:
                p.data = p.data.float()
    return model


def load_fsdp2(args, device) -> torch.nn.Module:
    """transformers' model under torch's FSDP2, fp32 weights sharded per decoder layer."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import AutoConfig, AutoModelForCausalLM

    has_weights = any(f.endswith(".safetensors") for f in os.listdir(args.model))
    if has_weights:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa")
    else:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(args.model), dtype=torch.float32,
                                                     attn_implementation="sdpa")
    if args.recompute == "on":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if args.method == "lora":
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.get_base_model().model.layers if args.method == "lora" else model.model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    if not has_weights:  # each rank draws its own shards: the values matter only for the timing
        model.to_empty(device=device)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.02)
    return model


def load_unsloth(args, local_rank: int) -> torch.nn.Module:
    from unsloth import FastLanguageModel  # first: it patches transformers and peft as they load

    recompute = {"off": False, "on": True, "unsloth": "unsloth"}[args.recompute]
    full = args.method == "full"
    # float32_mixed_precision: fp32 trainable weights (the full model, or the adapters) under bf16
    # autocast, as we and the HF baseline train; Unsloth's default for full fine-tuning is pure bf16.
    model, _ = FastLanguageModel.from_pretrained(
        model_name=args.model, max_seq_length=args.seq, dtype=torch.bfloat16,
        load_in_4bit=args.method == "qlora",
        full_finetuning=full, float32_mixed_precision=True, use_gradient_checkpointing=recompute,
        device_map={"": f"cuda:{local_rank}"})
    if not full:
        model = FastLanguageModel.get_peft_model(
            model, r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0, target_modules=lora_targets(args.model),
            bias="none", use_gradient_checkpointing=recompute)
    FastLanguageModel.for_training(model)
    return model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--method", choices=["lora", "qlora", "full"], default="lora")
    ap.add_argument("--impl", choices=["hf", "liger", "unsloth"], default="hf")
    ap.add_argument("--recompute", choices=["off", "on", "unsloth"], default="off")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup-steps", type=int, default=5)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--parallel", choices=["ddp", "fsdp2"], default="ddp")
    ap.add_argument("--profile", help="write a Chrome trace of the last two warm-up steps (rank 0) here")
    args = ap.parse_args()
    if args.recompute == "unsloth" and args.impl != "unsloth":
        ap.error("--recompute unsloth needs --impl unsloth")
    if args.parallel == "fsdp2" and (args.impl != "hf" or args.method == "qlora"):
        ap.error("--parallel fsdp2 needs --impl hf and --method full or lora")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is a local folder; never look on the hub
    os.environ.setdefault("UNSLOTH_DISABLE_STATISTICS", "1")
    os.environ.setdefault("UNSLOTH_COMPILE_LOCATION", "/tmp/unsloth_compiled_cache")

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)

    if args.parallel == "fsdp2":
        model = load_fsdp2(args, device)
    else:
        model = load_unsloth(args, local_rank) if args.impl == "unsloth" else load_hf(args, args.impl == "liger")
    from transformers import AutoTokenizer  # after Unsloth, if any

    tok = AutoTokenizer.from_pretrained(args.model)
    texts = [json.loads(l)["text"] for l in open(args.data)]
    ids = [tok(t, add_special_tokens=True)["input_ids"][: args.seq] for t in texts]

    if args.method != "qlora":  # a 4-bit model is placed by from_pretrained (device_map)
        model.to(device)
    model.train()  # from_pretrained returns eval mode, where transformers skips gradient checkpointing
    model.config.use_cache = False
    # FSDP2's modules are the model itself; its compute dtype is its policy's, not autocast's.
    ddp = model if args.parallel == "fsdp2" else torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0, fused=True)

    torch.cuda.reset_peak_memory_stats(device)
    timed_tokens, timed_seconds = 0, 0.0
    profiler = None
    first_loss = first_grad_norm = None
    for step in range(args.warmup_steps + args.steps):
        if args.profile and rank == 0 and step == args.warmup_steps - 2:
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                          torch.profiler.ProfilerActivity.CUDA],
                                              record_shapes=True)  # GEMM FLOPs in trace_summary.py
            profiler.__enter__()
        first = (step * world + rank) * args.micro_batch
        batch = [ids[(first + i) % len(ids)] for i in range(args.micro_batch)]
        x = torch.tensor(batch, device=device)
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.parallel == "ddp"):
            out = ddp(input_ids=x, labels=x)
        out.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        if step == 0:  # the first update's loss and gradient norm, to check that we compute the same
            loss = out.loss.detach().float().clone()
            dist.all_reduce(loss)
            first_loss, first_grad_norm = loss.item() / world, grad_norm.item()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize(device)
        if step >= args.warmup_steps:
            timed_seconds += time.perf_counter() - start
            timed_tokens += x.numel()
        if profiler is not None and step == args.warmup_steps - 1:
            profiler.__exit__(None, None, None)
            profiler.export_chrome_trace(args.profile)
            profiler = None
    peak = torch.cuda.max_memory_allocated(device)
    stats = torch.tensor([timed_tokens / timed_seconds, peak], device=device, dtype=torch.float64)
    gathered = [torch.zeros_like(stats) for _ in range(world)]
    dist.all_gather(gathered, stats)
    if rank == 0:
        per_gpu = sum(g[0].item() for g in gathered) / world
        print(json.dumps({"impl": args.impl if args.parallel == "ddp" else "fsdp2", "method": args.method,
                          "gpus": world, "recompute": args.recompute,
                          "tokens_per_s_per_gpu": per_gpu,
                          "peak_gib": max(g[1].item() for g in gathered) / 2**30,
                          "first_loss": first_loss, "first_grad_norm": first_grad_norm}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
