"""Hostile and absurd input (issue 14), against the trainer binary: every case ends with exit 2 and
a message naming the file, line or field, or falls back to the previous good checkpoint. None may
crash (a signal), hang (the timeout), or end 0 with a silently wrong result."""
import json
import random
import shutil
import struct
import subprocess
import time
from pathlib import Path

import torch
import xxhash
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import harness as h

CRASH_MARKS = ("Segmentation", "terminate called", "Aborted", "free():", "core dumped")


def expect_user_error(name, p, needle):
    tail = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    print(f"{name}: exit {p.returncode}: {tail[:200]}")
    assert p.returncode == 2, (name, p.returncode, p.stderr[-2000:])
    assert needle in p.stderr, (name, needle, p.stderr[-2000:])
    assert not any(m in p.stderr for m in CRASH_MARKS), (name, p.stderr[-2000:])


def copy_model(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def edit_json(path: Path, **changes):
    j = json.loads(path.read_text())
    j.update(changes)
    path.write_text(json.dumps(j))


def rewrite_header(path: Path, delta: int = 0, trailing: bytes = b""):
    """The same tensors with the header-length field moved by `delta`, or bytes appended."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    path.write_bytes(struct.pack("<Q", n + delta) + raw[8:] + trailing)


def hostile_files_are_named():
    w = h.workdir("hostile")
    model = h.tiny_model(w / "model")
    good = h.subset(h.EXAMPLE / "train.jsonl", w / "good.jsonl", 4)
    lines = good.read_text().splitlines()

    def model_with(name, change):
        m = copy_model(model, w / name)
        change(m)
        return str(m)

    def data_with(name, text):
        p = w / name
        p.write_text(text)
        return str(p)

    qwen_window = dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], use_sliding_window=True,
                       sliding_window=16, max_window_layers=-1)
    config_text = (model / "config.json").read_text()
    # 50,000 nested Sequence normalizers (as text: Python's json would recurse too deep to write it).
    nested = '{"type": "Sequence", "normalizers": [' * 50000 + '{"type": "Lowercase"}' + "]}" * 50000
    cases = [
        ("negative max_window_layers", "model",
         model_with("window", lambda m: edit_json(m / "config.json", **qwen_window)), 'field "max_window_layers"'),
        ("rope_theta 0", "model", model_with("rope", lambda m: edit_json(m / "config.json", rope_theta=0)),
         'field "rope_theta"'),
        ("rms_norm_eps -1", "model", model_with("eps", lambda m: edit_json(m / "config.json", rms_norm_eps=-1)),
         'field "rms_norm_eps"'),
        ("duplicate key in config.json", "model",
         model_with("dupcfg", lambda m: (m / "config.json").write_text(
             config_text.replace('"hidden_size": 64', '"hidden_size": 64, "hidden_size": 32', 1))),
         'config.json: duplicate key at /"hidden_size"'),
        ("safetensors header length off by one", "model",
         model_with("offby1", lambda m: rewrite_header(m / "model.safetensors", delta=-1)), "model.safetensors: "),
        ("safetensors trailing bytes", "model",
         model_with("trailing", lambda m: rewrite_header(m / "model.safetensors", trailing=b"\0" * 16)),
         "trailing bytes, or a wrong header length"),
        ("50,000 nested normalizers", "model",
         model_with("nested", lambda m: (m / "tokenizer.json").write_text(
             (m / "tokenizer.json").read_text().replace('"normalizer": null', '"normalizer": ' + nested, 1))),
         "tokenizer.json: nested deeper than 128 levels"),
        ("self-calling macro", "model",
         model_with("macro", lambda m: (m / "chat_template.jinja").write_text(
             "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}")), "recursion"),
        ("template syntax error", "model",
         model_with("syntax", lambda m: (m / "chat_template.jinja").write_text(
             "{% for m in messages %}\n{{ m.content }\n{% endfor %}")), "line 2"),
        ("NUL in a line", "data", data_with("nul.jsonl", lines[0] + "\n" + lines[1][:20] + "\0" + lines[1][20:] + "\n"),
         "nul.jsonl:2: NUL byte at column 21"),
        ("duplicate key in a line", "data",
         data_with("dup.jsonl", "\n".join(lines[:2]) + '\n{"messages": [], "messages": []}\n'),
         "dup.jsonl:3: duplicate key"),
    ]
    for name, where, value, needle in cases:
        cfg = h.config(model, good, w / "out", maxSteps=1)
        if where == "model":
            cfg["model"]["path"] = value
        else:
            cfg["data"]["train"] = value
        start = time.time()
        p = h.run(["train", "--config", h.write_config(w / "c.json", cfg)], check=False, timeout=120)
        expect_user_error(name, p, needle)
        assert time.time() - start < 60, (name, time.time() - start)

    base = h.config(model, good, w / "out", maxSteps=1)
    as_yaml = "".join(f"{k}: {json.dumps(v)}\n" for k, v in base.items())  # JSON flow is YAML
    laughs = "x0: &x0 [a, a, a, a, a, a, a, a, a, a]\n" + "".join(
        f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * 10) + "]\n" for i in range(1, 11))
    yaml_cases = [
        ("billion laughs", laughs + as_yaml, "more than 1000000 nodes"),
        ("duplicate YAML key", as_yaml + "training: {maxSteps: 1}\n", 'duplicate key "training"'),
        ("second YAML document", as_yaml + "---\na: 1\n", "second YAML document"),
    ]
    for name, text, needle in yaml_cases:
        path = w / "c.yaml"
        path.write_text(text)
        start = time.time()
        p = h.run(["train", "--config", path], check=False, timeout=120)
        expect_user_error(name, p, needle)
        assert time.time() - start < 30, (name, time.time() - start)


def damaged_checkpoints_fall_back():
    """Each damage to the newest checkpoint: it is skipped, naming why, and the run resumes from
    the one before. When none fits, the run stops (exit 2) and deletes nothing."""
    w = h.workdir("ckpt-damage")
    model = h.tiny_model(w / "model")
    data = h.subset(h.EXAMPLE / "train.jsonl", w / "data.jsonl", 12)
    cfg = h.config(model, data, w / "out", maxSteps=2)
    cfg["checkpoint"] = {"resume": "auto", "dir": str(w / "pristine"), "everySteps": 1, "keepLast": 10}
    h.run(["train", "--config", h.write_config(w / "a.json", cfg)])
    state = json.loads((w / "pristine" / "step-00000002" / "trainer_state.json").read_text())
    # One process: one part of each, and the list of that part's files.
    assert set(state["files"]) >= {"trainable-00000-of-00001.safetensors", "optimizer-00000-of-00001.safetensors",
                                   "part-00000-of-00001.json"}, state
    # The checksums are XXH3-64, as the reference implementation (xxhash, `xxhsum -H3`) computes them.
    for name, f in state["files"].items():
        data = (w / "pristine" / "step-00000002" / name).read_bytes()
        assert f == {"bytes": len(data), "xxh3": xxhash.xxh3_64_hexdigest(data)}, (name, f)

    def unverified(d, **changes):  # an edit whose checksum is recomputed: only the meaning is wrong
        s = json.loads((d / "trainer_state.json").read_text())
        s.pop("files")
        s.update(changes)
        (d / "trainer_state.json").write_text(json.dumps(s))

    def flip_byte(d):
        f = d / "trainable-00000-of-00001.safetensors"
        raw = bytearray(f.read_bytes())
        raw[-3] ^= 0x10
        f.write_bytes(bytes(raw))

    def retensor(d, change):
        """`change(pieces, shapes)`: the part's flat pieces ("<name>@<first element>") and the
        shapes its metadata gives the whole tensors."""
        f = d / "trainable-00000-of-00001.safetensors"
        with safe_open(str(f), "pt") as opened:
            shapes = json.loads(opened.metadata()["shapes"])
        tensors = load_file(str(f))
        change(tensors, shapes)
        save_file(tensors, str(f), metadata={"shapes": json.dumps(shapes)})
        unverified(d)

    def lose_part(d):  # a part of 2 where the other is missing
        (d / "optimizer-00000-of-00001.safetensors").rename(d / "optimizer-00001-of-00002.safetensors")
        unverified(d)

    def shrink_norm(t, shapes):
        t["model.norm.weight@0"] = torch.ones(1)
        shapes["model.norm.weight"] = [1]

    damages = [
        ("flipped bit", flip_byte, "checksum mismatch"),
        ("step 999", lambda d: unverified(d, step=999), "says step 999 in a folder named for step 2"),
        ("negative step", lambda d: unverified(d, step=-1), '"step": expected an integer >= 0'),
        ("method", lambda d: unverified(d, method="lora"), 'written by a "lora" run; this config trains "full"'),
        ("wrong shape", lambda d: retensor(d, shrink_norm),
         'tensor "model.norm.weight" has shape [1], the model\'s is [64]'),
        ("missing tensor", lambda d: retensor(d, lambda t, _: t.pop("model.norm.weight@0")),
         'no tensor "model.norm.weight" in the trainable weights'),
        ("half a tensor", lambda d: retensor(d, lambda t, _: t.update({"model.norm.weight@0": torch.ones(32)})),
         'trainable tensor "model.norm.weight": elements from 32 on are in no part'),
        ("missing part", lose_part, "optimizer-00000-of-00002.safetensors: missing"),
    ]
    cfg["training"]["maxSteps"] = 3
    for name, damage, needle in damages:
        d = w / name.replace(" ", "-")
        shutil.copytree(w / "pristine", d)
        damage(d / "step-00000002")
        cfg["checkpoint"]["dir"] = str(d)
        cfg["output"]["dir"] = str(w / "out" / d.name)
        p = h.run(["train", "--config", h.write_config(w / "b.json", cfg)], check=False)
        print(f"{name}: exit {p.returncode}")
        assert p.returncode == 0, (name, p.stderr[-3000:])
        assert "skipping checkpoint" in p.stderr and needle in p.stderr, (name, needle, p.stderr[-3000:])
        assert "resuming from" in p.stderr and "step-00000001 at step=1/3" in p.stderr, (name, p.stderr[-3000:])

    # A checkpoint of one file each (written before checkpoints had parts) still resumes, to the
    # same weights as the checkpoint it was made from.
    for kind in ("old", "parts"):
        d = w / kind
        shutil.copytree(w / "pristine", d)
        step2 = d / "step-00000002"
        if kind == "old":
            for part in ("trainable", "optimizer"):
                f = step2 / f"{part}-00000-of-00001.safetensors"
                with safe_open(str(f), "pt") as opened:
                    shapes = json.loads(opened.metadata()["shapes"])
                whole = {key.rsplit("@", 1)[0]: t.reshape(shapes[key.rsplit("@", 1)[0]])
                         for key, t in load_file(str(f)).items()}
                save_file(whole, str(step2 / f"{part}.safetensors"))
                f.unlink()
            (step2 / "part-00000-of-00001.json").unlink()
            unverified(step2)
        cfg["checkpoint"]["dir"] = str(d)
        cfg["output"]["dir"] = str(w / "out" / kind)
        p = h.run(["train", "--config", h.write_config(w / f"{kind}.json", cfg)])
        assert "step-00000002 at step=2/3" in p.stderr and "skipping" not in p.stderr, p.stderr[-2000:]
    diff = h.max_abs_diff(h.weights(w / "out" / "old"), h.weights(w / "out" / "parts"))
    print(f"resumed from a checkpoint of one file each: max |w - w_parts| = {diff:.3g}")
    assert diff == 0, diff

    # Every checkpoint belongs to another method: nothing to resume, and nothing is deleted.
    cfg["checkpoint"]["dir"] = str(w / "pristine")
    cfg["method"]["type"] = "lora"
    p = h.run(["train", "--config", h.write_config(w / "c.json", cfg)], check=False)
    expect_user_error("all unusable", p, "none of the 2 checkpoints in")
    assert "checkpoint.resume: never" in p.stderr, p.stderr[-2000:]
    assert sorted(x.name for x in (w / "pristine").iterdir()) == ["step-00000001", "step-00000002"]


def diverged_run_stops():
    """NaN weights: the first loss is NaN; the run stops with exit 2 naming the step, saves no
    output, and its earlier checkpoint is kept."""
    w = h.workdir("nan")
    model = h.tiny_model(w / "model")
    tensors = load_file(str(model / "model.safetensors"))
    tensors["model.norm.weight"][3] = float("nan")
    save_file(tensors, str(model / "model.safetensors"), metadata={"format": "pt"})
    data = h.subset(h.EXAMPLE / "train.jsonl", w / "data.jsonl", 8)
    cfg = h.config(model, data, w / "out", maxSteps=3)
    p = h.run(["train", "--config", h.write_config(w / "c.json", cfg)], check=False)
    expect_user_error("NaN weights", p, "step 1: loss nan")
    assert not (w / "out" / "model.safetensors").exists()


def fuzzed_files_never_crash():
    """Random byte- and token-level mutations of a config, a dataset, config.json, a chat template
    and a safetensors header (a fixed seed, so a failure reproduces): each run ends 0 or 2, never
    by a signal, an internal error (1) or the timeout."""
    w = h.workdir("fuzz")
    model = h.tiny_model(w / "model")
    data = h.subset(h.EXAMPLE / "train.jsonl", w / "data.jsonl", 4)
    rng = random.Random(14)
    cfg_text = json.dumps(h.config(model, data, w / "out", maxSteps=1), indent=1)
    specials = ["-1", "0", "1e308", "NaN", "2147483648", "18446744073709551616", "\"\"", "[]", "{}", "null",
                "true", "\"\\u0000\"", "*a", "&a", "!!binary", "---", "{%", "}}", "\x00", "\"\"\"", "\\"]

    def mutate(text: str) -> str:
        b = bytearray(text.encode("utf-8", "surrogatepass"))
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(5)
            i = rng.randrange(len(b) + 1)
            if op == 0 and b:
                b[min(i, len(b) - 1)] ^= 1 << rng.randrange(8)
            elif op == 1:
                b[i:i] = rng.choice(specials).encode()
            elif op == 2 and b:
                del b[i:i + rng.randint(1, 16)]
            elif op == 3:
                j = rng.randrange(len(b) + 1)
                b[i:i] = b[min(i, j):max(i, j)][:256]  # duplicate a chunk
            else:
                tokens = text.split('"')
                k = rng.randrange(len(tokens))
                tokens[k] = rng.choice(specials)
                b = bytearray('"'.join(tokens).encode())
        return b.decode("utf-8", "replace")

    targets = ["config", "data", "config.json", "template", "safetensors"]
    outcomes = {}
    for i in range(60):
        target = targets[i % len(targets)]
        m = w / "m"
        shutil.rmtree(m, ignore_errors=True)
        shutil.copytree(model, m)
        text = mutate(cfg_text) if target == "config" else cfg_text.replace(str(model), str(m))
        path = w / "c.yaml"
        path.write_text(text)
        if target == "data":
            (w / "data.jsonl").write_text(mutate(data.read_text()))
        else:
            h.subset(h.EXAMPLE / "train.jsonl", w / "data.jsonl", 4)
        if target == "config.json":
            (m / "config.json").write_text(mutate((m / "config.json").read_text()))
        if target == "template":
            (m / "chat_template.jinja").write_text(mutate((m / "chat_template.jinja").read_text()))
        if target == "safetensors":
            raw = bytearray((m / "model.safetensors").read_bytes())
            (n,) = struct.unpack("<Q", raw[:8])
            header = mutate(raw[8:8 + n].decode())
            raw[8:8 + n] = header.encode()
            if rng.random() < 0.5:
                raw[:8] = struct.pack("<Q", len(header.encode()))
            (m / "model.safetensors").write_bytes(bytes(raw))
        try:
            p = h.run(["train", "--config", path], check=False, timeout=90)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"case {i} ({target}) hung; input kept in {w}")
        outcomes.setdefault(target, []).append(p.returncode)
        assert p.returncode in (0, 2), (i, target, p.returncode, p.stderr[-2000:], f"input kept in {w}")
        assert not any(mark in p.stderr for mark in CRASH_MARKS), (i, target, p.stderr[-2000:])
    print({t: f"{codes.count(0)} trained, {codes.count(2)} refused" for t, codes in outcomes.items()})


if __name__ == "__main__":
    h.main({f.__name__: f for f in [hostile_files_are_named, damaged_checkpoints_fall_back, diverged_run_stops,
                                     fuzzed_files_never_crash]})
