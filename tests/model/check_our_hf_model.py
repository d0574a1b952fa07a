"""Loads the merged, sharded model folders that kubetune_model_tests saved with transformers.

Usage: check_our_hf_model.py FIXTURE_DIR
For each family with a LoRA fixture (FIXTURE_DIR/fixtures.json "lora"), reads
FIXTURE_DIR/ours/merged/<family>/ (config.json, model-*.safetensors + index,
our_logits.safetensors). Exits non-zero when AutoModelForCausalLM cannot load one, loads it as
another architecture than the base's, or the logits differ by more than 1e-4 relative from ours.
"""
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
    return [type(model).__name__] == expected and rel <= 1e-4


if __name__ == "__main__":
    check_each_lora_family(check)
