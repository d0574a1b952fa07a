"""The shared driver of check_our_adapter.py and check_our_hf_model.py: runs a check on every family
that has a LoRA fixture (FIXTURE_DIR/fixtures.json "lora", FIXTURE_DIR from argv) and exits
non-zero naming those that failed."""
import json
import os
import sys


def check_each_lora_family(check):
    fixtures = sys.argv[1]
    with open(os.path.join(fixtures, "fixtures.json")) as f:
        families = json.load(f)["lora"]
    failed = [family for family in families if not check(fixtures, family)]
    if failed:
        print("failed:", ", ".join(failed))
        sys.exit(1)
