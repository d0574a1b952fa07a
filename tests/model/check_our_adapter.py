"""Loads the LoRA adapter that kubetune_model_tests saved into PEFT and compares logits.

Usage: check_our_adapter.py FIXTURE_DIR
Reads FIXTURE_DIR/ours/adapter/ (adapter_config.json, adapter_model.safetensors, our_logits.safetensors)
and the base model FIXTURE_DIR/llama32/. Exits non-zero when PEFT cannot load the adapter or the
logits differ by more than 1e-4 relative.
"""
import os
import sys

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main():
    fixtures = sys.argv[1]
    adapter = os.path.join(fixtures, "ours", "adapter")
    ours = load_file(os.path.join(adapter, "our_logits.safetensors"))
    base = AutoModelForCausalLM.from_pretrained(os.path.join(fixtures, "llama32"), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter)
    model.eval()
    n_lora = sum(1 for name, _ in model.named_parameters() if "lora_" in name)
    with torch.no_grad():
        logits = model(input_ids=ours["input_ids"], position_ids=ours["position_ids"]).logits
    rel = ((logits - ours["logits"]).abs().max() / ours["logits"].abs().max()).item()
    print(f"lora tensors: {n_lora}, max relative logit difference: {rel:.3e}")
    if n_lora != 2 * 3 * 3 or rel > 1e-4:
        sys.exit(1)


if __name__ == "__main__":
    main()
