"""Loads the merged, sharded model folders that kubetune_model_tests saved with transformers.

Usage: check_our_hf_model.py FIXTURE_DIR
For each family with a LoRA fixture (FIXTURE_DIR/fixtures.json "lora"), reads
FIXTURE_DIR/ours/merged/<family>/ (config.json, model-*.safetensors + index,
our_logits.safetensors). Exits non-zero when AutoModelForCausalLM cannot load one, loads it as
another architecture than the base's, or the logits differ by more than 1e-4 relative from ours.
"""
import json
import os

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

from each_lora_family import check_each_lora_family


def check(fixtures, family):
    folder = os.path.join(fixtures, "ours", "merged", family)
    ours = load_file(os.path.join(folder, "our_logits.safetensors"))
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    expected = AutoConfig.from_pretrained(os.path.join(fixtures, family)).architectures
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ours["input_ids"], position_ids=ours["position_ids"]).logits
    rel = ((logits - ours["logits"]).abs().max() / ours["logits"].abs().max()).item()
    print(f"{family}: {type(model).__name__}, max relative logit difference {rel:.3e}")
    return [type(model).__name__] == expected and rel <= 1e-4 and carried_untouched(fixtures, family, folder)


def carried_untouched(fixtures, family, folder):
    """A multimodal model's vision tower and projector, which kubetune does not train: in the merged
    folder exactly as in the base."""
    from safetensors import safe_open

    def tensors(path):
        index = os.path.join(path, "model.safetensors.index.json")
        files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) \
            else ["model.safetensors"]
        out = {}
        for name in files:
            with safe_open(os.path.join(path, name), "pt") as f:
                out.update({k: f.get_tensor(k) for k in f.keys() if not k.startswith("language_model.")})
        return out

    if "text_config" not in json.load(open(os.path.join(fixtures, family, "config.json"))):
        return True
    base = tensors(os.path.join(fixtures, family))
    merged = tensors(folder)
    same = base.keys() == merged.keys() and all(torch.equal(base[k], merged[k]) for k in base)
    print(f"{family}: {len(base)} vision and projector tensors carried {'unchanged' if same else 'CHANGED'}")
    return same


if __name__ == "__main__":
    check_each_lora_family(check)
