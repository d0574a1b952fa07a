#!/usr/bin/env python3
"""DPO's competitors doing the same work as `training.objective: dpo` in run_dpo_bench.sh: TRL's
DPOTrainer as people run it (--impl trl), and the same after Unsloth's PatchDPOTrainer() on
Unsloth's FastLanguageModel (--impl unsloth). Same model folder and pairs, LoRA r16/alpha 32 on all
linear layers (or QLoRA: nf4, double quantization, bf16 compute), the given pairs per step, bf16,
gradient checkpointing, AdamW, clipping at 1.0, beta 0.1, sigmoid loss; TRL's reference is the base
with the adapters switched off, one extra forward a step (its default, precompute_ref_log_probs
off). One process on one GPU; prints one JSON line. --objective kto runs KTOTrainer instead on the
pairs as unpaired examples (each chosen answer desirable, each rejected one undesirable, in turn),
micro-batch examples a step; its reference and KL forwards run in every step, as TRL's default.

Usage: dpo_bench.py --impl trl|unsloth --model DIR --pairs FILE --method lora|qlora
                    --micro-batch 4 --steps 10 --warmup-steps 3 --max-length 1100 [--objective kto]
"""
import argparse
import json
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", choices=["trl", "unsloth"], required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--pairs", required=True)
    ap.add_argument("--method", choices=["lora", "qlora"], default="lora")
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--max-length", type=int, default=1100)
    ap.add_argument("--objective", choices=["dpo", "kto"], default="dpo")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("UNSLOTH_DISABLE_STATISTICS", "1")

    import torch
    if args.impl == "unsloth":
        # First: it patches as they load.
        from unsloth import FastLanguageModel, PatchDPOTrainer, PatchKTOTrainer
        PatchKTOTrainer() if args.objective == "kto" else PatchDPOTrainer()
        model, tok = FastLanguageModel.from_pretrained(
            model_name=args.model, max_seq_length=args.max_length, dtype=torch.bfloat16,
            load_in_4bit=args.method == "qlora", use_gradient_checkpointing=True,
            device_map={"": "cuda:0"})
        model = FastLanguageModel.get_peft_model(
            model, r=16, lora_alpha=32, lora_dropout=0,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
            bias="none", use_gradient_checkpointing=True)
        peft_config = None
    else:
        from peft import LoraConfig
        from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig
        extra = {}
        if args.method == "qlora":
            extra = {"quantization_config": BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                bnb_4bit_compute_dtype=torch.bfloat16)}
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16,
                                                     attn_implementation="sdpa",
                                                     device_map={"": "cuda:0"}, **extra)
        tok = AutoTokenizer.from_pretrained(args.model)
        peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import DPOConfig, DPOTrainer, KTOConfig, KTOTrainer

    records = [json.loads(l) for l in open(args.pairs)]
    if args.objective == "kto":
        records = [{"prompt": r["prompt"], "completion": r[answer], "label": answer == "chosen"}
                   for r in records for answer in ("chosen", "rejected")]
    steps = args.warmup_steps + args.steps
    times, first = [], {}

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            torch.cuda.synchronize()
            self.start = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            torch.cuda.synchronize()
            times.append(time.perf_counter() - self.start)

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and "loss" in logs and not first:
                first.update(loss=logs["loss"])

    common = dict(output_dir="/tmp/dpo-bench-" + args.impl, per_device_train_batch_size=args.micro_batch,
                  gradient_accumulation_steps=1, learning_rate=5e-6, lr_scheduler_type="constant",
                  max_grad_norm=1.0, max_steps=steps, logging_steps=1, report_to=[], bf16=True,
                  save_strategy="no", max_length=args.max_length, gradient_checkpointing=True,
                  gradient_checkpointing_kwargs={"use_reentrant": False}, beta=0.1,
                  dataloader_drop_last=True, seed=0)
    if args.objective == "kto":
        config, cls = KTOConfig(**common, loss_type="kto"), KTOTrainer
    else:
        config, cls = DPOConfig(**common, loss_type=["sigmoid"]), DPOTrainer
    trainer = cls(model=model, args=config, processing_class=tok, peft_config=peft_config,
                  train_dataset=Dataset.from_list(records), callbacks=[Clock()])
    torch.cuda.reset_peak_memory_stats()
    trainer.train()
    # Tokens of a pair as TRL tokenized it (every pair has the same lengths): both sequences; of a
    # kto example: its one sequence (its KL sequence is scored without gradients, not counted).
    row = trainer.train_dataset[0]
    if args.objective == "kto":
        tokens_per_step = args.micro_batch * (len(row["prompt_ids"]) + len(row["completion_ids"]))
    else:
        tokens_per_step = args.micro_batch * (2 * len(row["prompt_ids"]) + len(row["chosen_ids"])
                                              + len(row["rejected_ids"]))
    timed = times[args.warmup_steps:]
    print(json.dumps({"impl": args.impl, "objective": args.objective, "method": args.method, "gpus": 1,
                      "recompute": "on", "pairs_per_step": args.micro_batch,
                      "tokens_per_s_per_gpu": tokens_per_step * len(timed) / sum(timed),
                      "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
                      "first_loss": first.get("loss")}), flush=True)


if __name__ == "__main__":
    main()
