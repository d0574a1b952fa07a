"""Loads the LoRA adapters that kubetune_model_tests saved into PEFT and compares logits.

Usage: check_our_adapter.py FIXTURE_DIR
For each family with a LoRA fixture (FIXTURE_DIR/fixtures.json "lora"), reads
FIXTURE_DIR/ours/adapter/<family>/ (adapter_config.json, adapter_model.safetensors,
our_logits.safetensors) and the base model FIXTURE_DIR/<family>/. Exits non-zero when PEFT cannot
load an adapter, adapts other layers than ours did, or the logits differ by more than 1e-4 relative.
"""
import os

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from each_lora_family import check_each_lora_family


def check(fixtures, family):
    adapter = os.path.join(fixtures, "ours", "adapter", family)
    ours = load_file(os.path.join(adapter, "our_logits.safetensors"))
    saved = load_file(os.path.join(adapter, "adapter_model.safetensors"))
    base = AutoModelForCausalLM.from_pretrained(os.path.join(fixtures, family), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter)
    model.eval()
    n_lora = sum(1 for name, _ in model.named_parameters() if "lora_" in name)
    with torch.no_grad():
        logits = model(input_ids=ours["input_ids"], position_ids=ours["position_ids"]).logits
    rel = ((logits - ours["logits"]).abs().max() / ours["logits"].abs().max()).item()
    print(f"{family}: lora tensors {n_lora} (ours {len(saved)}), max relative logit difference {rel:.3e}")
    return n_lora == len(saved) and n_lora > 0 and rel <= 1e-4


if __name__ == "__main__":
    check_each_lora_family(check)
