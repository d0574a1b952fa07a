"""Loads the merged, sharded model folder that kubetune_model_tests saved with transformers.

Usage: check_our_hf_model.py FIXTURE_DIR
Reads FIXTURE_DIR/ours/merged/ (config.json, model-*.safetensors + index, our_logits.safetensors).
Exits non-zero when AutoModelForCausalLM cannot load it or the logits differ by more than 1e-4
relative from ours.
"""
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main():
    folder = os.path.join(sys.argv[1], "ours", "merged")
    ours = load_file(os.path.join(folder, "our_logits.safetensors"))
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ours["input_ids"], position_ids=ours["position_ids"]).logits
    rel = ((logits - ours["logits"]).abs().max() / ours["logits"].abs().max()).item()
    print(f"{type(model).__name__}: max relative logit difference: {rel:.3e}")
    if rel > 1e-4:
        sys.exit(1)


if __name__ == "__main__":
    main()
