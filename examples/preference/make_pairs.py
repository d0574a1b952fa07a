#!/usr/bin/env python3
"""Writes the shipped preference pairs (train.jsonl, validation.jsonl) of the preference demo:
the quickstart's upper-casing task as pairs, the chosen answer upper-cased, the rejected one the
words as written. Prompts are drawn like the quickstart's (two words of four letters), with
another seed. The same pairs as kto's unpaired examples (unpaired_train.jsonl: each pair's chosen
answer as a desirable completion or, every other line, its rejected one as an undesirable one;
unpaired_validation.jsonl: both answers of every held-out pair)."""
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


def unpaired(p: dict, desirable: bool) -> dict:
    return {"prompt": p["prompt"], "completion": p["chosen" if desirable else "rejected"],
            "label": desirable}


def write(name: str, records) -> None:
    (HERE / name).write_text("".join(json.dumps(r) + "\n" for r in records))


def main() -> None:
    rng = random.Random(47)
    train = [pair(rng) for _ in range(1000)]
    validation = [pair(rng) for _ in range(50)]
    write("train.jsonl", train)
    write("validation.jsonl", validation)
    write("unpaired_train.jsonl", [unpaired(p, i % 2 == 0) for i, p in enumerate(train)])
    write("unpaired_validation.jsonl", [unpaired(p, d) for p in validation for d in (True, False)])


if __name__ == "__main__":
    main()
