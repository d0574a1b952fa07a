#!/usr/bin/env python3
"""The baseline: Hugging Face transformers + PEFT + torch DDP doing the same work as our trainer
(same model folder, tokenizer, records, sequence length, micro-batch, LoRA rank/targets, bf16
autocast with fp32 trainable weights, AdamW). Run under torchrun; rank 0 prints one JSON line.

Usage: torchrun --nproc-per-node N hf_baseline.py --model DIR --data FILE --method lora|full
                --seq 2048 --micro-batch 4 --steps 20 --warmup-steps 5
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--method", choices=["lora", "full"], default="lora")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup-steps", type=int, default=5)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--profile", help="write a Chrome trace of the last two warm-up steps (rank 0) here")
    args = ap.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)

    tok = AutoTokenizer.from_pretrained(args.model)
    texts = [json.loads(l)["text"] for l in open(args.data)]
    ids = [tok(t, add_special_tokens=True)["input_ids"][: args.seq] for t in texts]

    frozen_dtype = torch.bfloat16 if args.method == "lora" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=frozen_dtype, attn_implementation="sdpa")
    if args.method == "lora":
        model = get_peft_model(model, LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
        for p in model.parameters():  # PEFT keeps adapters in fp32 under autocast, as we do
            if p.requires_grad:
                p.data = p.data.float()
    model.to(device)
    model.config.use_cache = False
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0, fused=True)

    torch.cuda.reset_peak_memory_stats(device)
    timed_tokens, timed_seconds = 0, 0.0
    profiler = None
    first_loss = first_grad_norm = None
    for step in range(args.warmup_steps + args.steps):
        if args.profile and rank == 0 and step == args.warmup_steps - 2:
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                          torch.profiler.ProfilerActivity.CUDA])
            profiler.__enter__()
        first = (step * world + rank) * args.micro_batch
        batch = [ids[(first + i) % len(ids)] for i in range(args.micro_batch)]
        x = torch.tensor(batch, device=device)
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = ddp(input_ids=x, labels=x)
        out.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        if step == 0:  # the first update's loss and gradient norm, to check that we compute the same
            loss = out.loss.detach().clone()
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
        print(json.dumps({"impl": "hf", "method": args.method, "gpus": world,
                          "tokens_per_s_per_gpu": per_gpu,
                          "peak_gib": max(g[1].item() for g in gathered) / 2**30,
                          "first_loss": first_loss, "first_grad_norm": first_grad_norm}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
