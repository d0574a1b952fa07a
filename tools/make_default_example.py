#!/usr/bin/env python3
"""Regenerates examples/default: the tokenizer and dataset of the embedded demo job.

Development tool only (the trainer never runs Python). The demo task: a chat model learns to
upper-case what the user writes ("upper: hello world" -> "HELLO WORLD"). A tokenizer without merges
keeps one token per character, so a tiny randomly initialised model can learn the task on two CPU
cores in a couple of minutes, and token accuracy on held-out words shows that it did.
"""
import json
import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parent.parent / "examples" / "default"
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def make_tokenizer(out: Path) -> None:
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    fast.save_pretrained(out)


def make_record(rng: random.Random) -> dict:
    # Two words of four letters: each answer character sits at a fixed distance behind its source,
    # which a small model learns quickly; held-out words show it learned the rule, not the data.
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(4)) for _ in range(2)]
    text = " ".join(words)
    return {"messages": [{"role": "user", "content": "upper: " + text},
                         {"role": "assistant", "content": text.upper()}]}


def main() -> None:
    make_tokenizer(ROOT / "tokenizer")
    rng = random.Random(1234)
    for name, count in (("train", 3000), ("validation", 200)):
        with open(ROOT / f"{name}.jsonl", "w") as f:
            for _ in range(count):
                f.write(json.dumps(make_record(rng)) + "\n")
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 259,
        "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
        "initializer_range": 0.02, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "bos_token_id": None, "eos_token_id": 258, "pad_token_id": 256, "torch_dtype": "float32",
    }
    (ROOT / "model_config.json").write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    main()
