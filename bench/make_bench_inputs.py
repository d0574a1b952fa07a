#!/usr/bin/env python3
"""Makes the benchmark's inputs: a randomly initialised model of a real shape (default: the
Llama-3.2-1B configuration) saved as a Hugging Face folder, with the project's small byte-level
tokenizer, and a JSONL of {"text"} records long enough to fill every sequence.

Usage: make_bench_inputs.py OUT_DIR [--shape llama-3.2-1b|llama-3.1-8b|llama-3.1-70b|qwen3-8b|
                             gemma-3-12b|phi-4|qwen3-30b-a3b|qwen3-235b-a22b|gpt-oss-20b] [--seq 2048] [--records 512]
                             [--config-only] [--layers N]

The Qwen3, Gemma 3 and Phi-4 shapes are those of the published checkpoints' config.json (their
vocabularies too, so the embedding and output layer cost what they cost there).

Llama-3.1-70B's and Qwen3-235B-A22B's weights (140 and 470 GB in bf16) are not written: its folder has the config and the
tokenizer only, and our trainer draws the weights itself (model.init: random); the competitors,
which need the weights on disk, are not run on it. --config-only does the same for any shape (the
preflight test needs no weights).
"""
import argparse
import json
import random
import shutil
from pathlib import Path

import torch
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, GptOssConfig, GptOssForCausalLM,
                          LlamaConfig, LlamaForCausalLM,
                          Phi3Config, Phi3ForCausalLM, Qwen3Config, Qwen3ForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM)

SHAPES = {
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                         tie_word_embeddings=True),
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                         tie_word_embeddings=False),
    "llama-3.1-70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                          num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                          tie_word_embeddings=False),
}
CONFIG_ONLY = {"llama-3.1-70b", "qwen3-235b-a22b"}
TOKENS = dict(bos_token_id=None, eos_token_id=258, pad_token_id=256)  # the project's tokenizer
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192, "rope_theta": 500000.0}
# Other families: (model class, config) as in the published config.json.
FAMILY_SHAPES = {
    # Qwen/Qwen3-8B
    "qwen3-8b": (Qwen3ForCausalLM, lambda: Qwen3Config(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
        rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, **TOKENS)),
    # google/gemma-3-12b-it's text_config: five local layers (window 1024, base 10k) to one global
    # (base 1M, linear RoPE scaling 8).
    "gemma-3-12b": (Gemma3ForCausalLM, lambda: Gemma3TextConfig(
        vocab_size=262208, hidden_size=3840, intermediate_size=15360, num_hidden_layers=48,
        num_attention_heads=16, num_key_value_heads=8, head_dim=256, query_pre_attn_scalar=256,
        sliding_window=1024, max_position_embeddings=131072, rms_norm_eps=1e-6,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 8.0,
                                            "rope_theta": 1000000.0}}, **TOKENS)),
    # microsoft/phi-4
    "phi-4": (Phi3ForCausalLM, lambda: Phi3Config(
        vocab_size=100352, hidden_size=5120, intermediate_size=17920, num_hidden_layers=40,
        num_attention_heads=40, num_key_value_heads=10, max_position_embeddings=16384,
        original_max_position_embeddings=16384, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 250000.0}, **TOKENS)),
    # Qwen/Qwen3-30B-A3B: 128 experts of width 768, 8 per token, every layer sparse.
    "qwen3-30b-a3b": (Qwen3MoeForCausalLM, lambda: Qwen3MoeConfig(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], max_position_embeddings=40960, rms_norm_eps=1e-6,
        tie_word_embeddings=False, output_router_logits=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, **TOKENS)),
    # Qwen/Qwen3-235B-A22B: 128 experts of width 1536, 8 per token, 94 layers (config only: 470 GB).
    "qwen3-235b-a22b": (Qwen3MoeForCausalLM, lambda: Qwen3MoeConfig(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, moe_intermediate_size=1536,
        num_hidden_layers=94, num_attention_heads=64, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], max_position_embeddings=40960, rms_norm_eps=1e-6,
        tie_word_embeddings=False, output_router_logits=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, **TOKENS)),
    # openai/gpt-oss-20b (its experts in bf16, as unsloth/gpt-oss-20b-BF16 publishes them): 32
    # experts of width 2880, 4 per token, sinks, windows of 128 on every other layer, YaRN.
    "gpt-oss-20b": (GptOssForCausalLM, lambda: GptOssConfig(
        vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=24,
        num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_local_experts=32,
        num_experts_per_tok=4, sliding_window=128, max_position_embeddings=131072,
        rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=True,
        output_router_logits=False, swiglu_limit=7.0,
        rope_parameters={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                         "truncate": False, "original_max_position_embeddings": 4096,
                         "rope_theta": 150000.0}, **TOKENS)),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shape", default="llama-3.2-1b", choices=[*SHAPES, *FAMILY_SHAPES])
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--records", type=int, default=512)
    ap.add_argument("--config-only", action="store_true")
    ap.add_argument("--layers", type=int, help="keep only the first N decoder layers (the shape of "
                    "each layer unchanged): a model whose weights fit the machine's disk")
    args = ap.parse_args()
    out = Path(args.out)
    repo = Path(__file__).resolve().parent.parent
    if args.shape in FAMILY_SHAPES:
        model_class, make_config = FAMILY_SHAPES[args.shape]
        config = make_config()
    else:
        model_class = LlamaForCausalLM
        config = LlamaConfig(vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5,
                             rope_parameters=LLAMA3_ROPE, **TOKENS, **SHAPES[args.shape])
    if args.layers:
        config.num_hidden_layers = args.layers
        if getattr(config, "layer_types", None):  # the first N layers' kinds (gpt-oss, Gemma 3)
            config.layer_types = config.layer_types[:args.layers]
    if args.shape in CONFIG_ONLY or args.config_only:
        config.dtype = "bfloat16"
        config.save_pretrained(out / "model")
    else:
        torch.manual_seed(0)
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = model_class(config).to(torch.bfloat16)
        model.save_pretrained(out / "model", safe_serialization=True)
    for f in (repo / "examples" / "default" / "tokenizer").iterdir():
        shutil.copy(f, out / "model" / f.name)
    # One character per token with this tokenizer: records of seq+64 characters fill a sequence.
    rng = random.Random(0)
    with open(out / "data.jsonl", "w") as f:
        for _ in range(args.records):
            words = []
            while sum(len(w) + 1 for w in words) < args.seq + 64:
                words.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))))
            f.write(json.dumps({"text": " ".join(words)}) + "\n")
    print(f"wrote {out}/model ({args.shape}) and {out}/data.jsonl")


if __name__ == "__main__":
    main()
