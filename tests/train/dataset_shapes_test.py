#!/usr/bin/env python3
"""Datasets in the shapes people publish them (issue 49, column mapping): data.format sharegpt and
alpaca, and data.columns. Each mapped file must train exactly as the same records written in the
format they map to: for ShareGPT, as TRL's maybe_convert_to_chatml converts them (with the
ShareGPT role names human and gpt read as user and assistant, as Unsloth's standardize_sharegpt
does); the preflight must say what it mapped, and a record that cannot be mapped must be named by
line and column.

`dataset_shapes_test.py NAME`: sharegpt_trains_as_trl_converts_it, columns_and_alpaca_train_as_
their_mapping, mapping_errors_are_named."""
import copy
import json
import sys
from pathlib import Path

import harness as h


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def train(w: Path, name: str, model: Path, data: Path, fmt: str, columns=None):
    """Two steps of LoRA; returns the losses, the weights and the preflight report."""
    cfg = h.config(model, data, w / name, method="lora", maxSteps=2)
    cfg["data"].update(format=fmt, shuffle=False)
    if columns:
        cfg["data"]["columns"] = columns
    path = h.write_config(w / f"{name}.json", cfg)
    report = json.loads(h.run(["preflight", "--config", path]).stdout)
    h.run(["train", "--config", path])
    history = [json.loads(l) for l in (w / name / "metrics_history.jsonl").read_text().splitlines()]
    return [r["loss"] for r in history if "loss" in r], h.weights(w / name), report


def same_training(w, model, mapped, reference, label):
    losses, weights, report = mapped
    want_losses, want_weights, want_report = reference
    assert len(losses) == 2 and losses == want_losses, (label, losses, want_losses)
    for key in ("records", "tokens", "targets"):
        assert report["data"]["train"][key] == want_report["data"]["train"][key], (label, key)
    assert h.max_abs_diff(weights, want_weights) == 0, label
    print(f"{label}: the same {report['data']['train']['records']} records, "
          f"{report['data']['train']['targets']} targets, losses {losses}, weights equal; "
          f"mapped: {report['data']['train'].get('mapped')}")
    return report


def sharegpt_records():
    out = []
    for i in range(8):
        turns = [{"from": "human", "value": f"upper: word{i} next"},
                 {"from": "gpt", "value": f"WORD{i} NEXT"}]
        if i % 2:
            turns = [{"from": "system", "value": "You upper-case."}] + turns + \
                [{"from": "human", "value": "again"}, {"from": "gpt", "value": f"WORD{i}"}]
        out.append({"conversations": turns, "source": "synthetic"})
    return out


def sharegpt_trains_as_trl_converts_it():
    from trl import maybe_convert_to_chatml
    w = h.workdir("shapes-sharegpt")
    model = h.tiny_model(w / "model")
    records = sharegpt_records()
    converted = []
    for r in copy.deepcopy(records):
        r = maybe_convert_to_chatml(r)
        for m in r["messages"]:
            m["role"] = {"human": "user", "gpt": "assistant"}.get(m["role"], m["role"])
        converted.append(r)
    mapped = train(w, "sharegpt", model, write_jsonl(w / "sharegpt.jsonl", records), "sharegpt")
    reference = train(w, "messages", model, write_jsonl(w / "messages.jsonl", converted), "messages")
    report = same_training(w, model, mapped, reference, "sharegpt")
    assert "sharegpt" in report["data"]["train"]["mapped"], report["data"]["train"]
    # The same conversations as the Hub publishes them, a Parquet file, read through the fetch
    # initializer's converter (pyarrow).
    import subprocess
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pylist(records), w / "sharegpt.parquet", row_group_size=3)
    subprocess.run([sys.executable, "-m", "kubetune_fetch.parquet", str(w / "sharegpt.parquet")],
                   check=True, env={**__import__("os").environ, "PYTHONPATH": str(h.REPO / "fetch")})
    mapped = train(w, "parquet", model, w / "sharegpt.parquet.jsonl", "sharegpt")
    same_training(w, model, mapped, reference, "sharegpt from Parquet")
    # The same conversations under another column name.
    renamed = [{"dialog": r["conversations"]} for r in records]
    mapped = train(w, "renamed", model, write_jsonl(w / "renamed.jsonl", renamed), "sharegpt",
                   {"messages": "dialog"})
    same_training(w, model, mapped, reference, "sharegpt under data.columns.messages")


def columns_and_alpaca_train_as_their_mapping():
    w = h.workdir("shapes-columns")
    model = h.tiny_model(w / "model")
    pairs = [(f"upper: word{i}\n", f"WORD{i}") for i in range(8)]
    reference = train(w, "pc", model, write_jsonl(w / "pc.jsonl", [{"prompt": p, "completion": c}
                                                               for p, c in pairs]),
                      "prompt_completion")
    mapped = train(w, "qa", model, write_jsonl(w / "qa.jsonl", [{"question": p, "answer": c, "id": i}
                                                              for i, (p, c) in enumerate(pairs)]),
                   "auto", {"prompt": "question", "completion": "answer"})
    same_training(w, model, mapped, reference, "data.columns prompt/completion")

    alpaca = [{"instruction": "Upper-case the words.", "input": f"word{i}" if i % 2 else "",
               "output": f"WORD{i}"} for i in range(8)]
    # The documented mapping: the instruction, then a blank line and the input when there is one,
    # as the user's prompt; the output as the assistant's completion.
    expected = [{"prompt": [{"role": "user", "content": a["instruction"] + (f"\n\n{a['input']}" if a["input"] else "")}],
                 "completion": [{"role": "assistant", "content": a["output"]}]} for a in alpaca]
    reference = train(w, "alpaca-ref", model, write_jsonl(w / "alpaca-ref.jsonl", expected),
                      "prompt_completion")
    mapped = train(w, "alpaca", model, write_jsonl(w / "alpaca.jsonl", alpaca), "alpaca")
    same_training(w, model, mapped, reference, "alpaca")
    renamed = [{"task": a["instruction"], "context": a["input"], "response": a["output"]} for a in alpaca]
    mapped = train(w, "alpaca-renamed", model, write_jsonl(w / "alpaca-renamed.jsonl", renamed), "alpaca",
                   {"instruction": "task", "input": "context", "output": "response"})
    same_training(w, model, mapped, reference, "alpaca under data.columns")


def mapping_errors_are_named():
    w = h.workdir("shapes-errors")
    model = h.tiny_model(w / "model")
    cases = [
        ("sharegpt", None, [sharegpt_records()[0], {"conversations": [{"from": "robot", "value": "x"}]}],
         2, 'conversations[0]": role "robot"'),
        ("sharegpt", None, [sharegpt_records()[0], {"dialog": []}], 2, 'field "conversations": missing'),
        ("auto", {"prompt": "question", "completion": "answer"},
         [{"question": "a", "answer": "b"}, {"question": "a", "reply": "b"}], 2,
         'column "answer" (data.columns.completion): missing; the record has fields "question", "reply"'),
        ("alpaca", None, [{"instruction": "a", "output": "b"}, {"instruction": "a", "input": "b"}], 2,
         'field "output": missing'),
    ]
    for k, (fmt, columns, records, line, words) in enumerate(cases):
        data = write_jsonl(w / f"bad{k}.jsonl", records)
        cfg = h.config(model, data, w / f"out{k}", method="lora", maxSteps=1)
        cfg["data"]["format"] = fmt
        if columns:
            cfg["data"]["columns"] = columns
        p = h.run(["preflight", "--config", h.write_config(w / f"bad{k}.json", cfg)], check=False)
        text = p.stdout + p.stderr
        assert f"bad{k}.jsonl:{line}:" in text and words in text, (k, words, text[-2000:])
        assert f"bad{k}.jsonl:1:" not in text, (k, text[-2000:])
    # A Parquet file given as data.train: named, with what to do.
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pylist(sharegpt_records()), w / "train.parquet")
    cfg = h.config(model, w / "train.parquet", w / "out-parquet", method="lora", maxSteps=1)
    p = h.run(["preflight", "--config", h.write_config(w / "parquet.json", cfg)], check=False)
    assert p.returncode != 0 and "train.parquet: a Parquet file" in p.stdout + p.stderr and \
        "kubetune_fetch.parquet" in p.stdout + p.stderr, (p.stdout + p.stderr)[-2000:]
    print("unmappable records named by line and column; a Parquet file named with what to do")


if __name__ == "__main__":
    name = sys.argv[1]
    {"sharegpt_trains_as_trl_converts_it": sharegpt_trains_as_trl_converts_it,
     "columns_and_alpaca_train_as_their_mapping": columns_and_alpaca_train_as_their_mapping,
     "mapping_errors_are_named": mapping_errors_are_named}[name]()
    print(f"{name}: ok")
