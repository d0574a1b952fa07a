#!/usr/bin/env python3
"""Makes the benchmark's inputs: a randomly initialised model of a real shape (default: the
Llama-3.2-1B configuration) saved as a Hugging Face folder, with the project's small byte-level
tokenizer, and a JSONL of {"text"} records long enough to fill every sequence.

Usage: make_bench_inputs.py OUT_DIR [--shape llama-3.2-1b|llama-3.1-8b|llama-3.1-70b] [--seq 2048]
                             [--records 512] [--config-only]

Llama-3.1-70B's weights (140 GB in bf16) are not written: its folder has the config and the
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
from transformers import LlamaConfig, LlamaForCausalLM

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
CONFIG_ONLY = {"llama-3.1-70b"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shape", default="llama-3.2-1b", choices=SHAPES)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--records", type=int, default=512)
    ap.add_argument("--config-only", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    repo = Path(__file__).resolve().parent.parent
    config = LlamaConfig(vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
                         rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=258, pad_token_id=256,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 8192},
                         **SHAPES[args.shape])
    if args.shape in CONFIG_ONLY or args.config_only:
        config.dtype = "bfloat16"
        config.save_pretrained(out / "model")
    else:
        torch.manual_seed(0)
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = LlamaForCausalLM(config).to(torch.bfloat16)
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
