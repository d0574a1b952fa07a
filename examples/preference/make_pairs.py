#!/usr/bin/env python3
"""Writes the shipped preference pairs (train.jsonl, validation.jsonl) of the preference demo:
the quickstart's upper-casing task as pairs, the chosen answer upper-cased, the rejected one the
words as written. Prompts are drawn like the quickstart's (two words of four letters), with
another seed."""
import json
import random
from pathlib import Path

HERE = Path(__file__).parent


def pair(rng: random.Random) -> dict:
    words = " ".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(4))
                     for _ in range(2))
    return {"prompt": [{"role": "user", "content": f"upper: {words}"}],
            "chosen": [{"role": "assistant", "content": words.upper()}],
            "rejected": [{"role": "assistant", "content": words}]}


def main() -> None:
    rng = random.Random(47)
    for name, n in (("train.jsonl", 1000), ("validation.jsonl", 50)):
        (HERE / name).write_text("".join(json.dumps(pair(rng)) + "\n" for _ in range(n)))


if __name__ == "__main__":
    main()
