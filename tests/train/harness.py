"""Shared helpers for the process-level trainer tests: make a tiny model, write a config, run the
trainer binary, read weights back. The references are transformers, PEFT and safetensors."""
import json
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

TRAINER = os.environ["KUBETUNE_TRAINER"]
REPO = Path(os.environ["KUBETUNE_REPO"])
EXAMPLE = REPO / "examples" / "default"


def free_port() -> int:
    """A free port below the kernel's ephemeral range: no outgoing connection (a Gloo peer, a
    scrape) is given it as its source port between the test picking it and a process binding it,
    as bind(0)'s port could be (that once failed CI with EADDRINUSE)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        port = random.randrange(10000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise AssertionError("no free port below the ephemeral range")


def children_of(pid: int):
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    out.append(int(p.name))
            except (OSError, IndexError):
                pass
    return out


def child_pids(parent: int, n: int, timeout=60):
    """The `n` children of `parent` once all have started, in pid order (= start order: a launcher
    starts rank 0 first, `kubetune run` worker 0 first)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        kids = sorted(children_of(parent))
        if len(kids) == n:
            return kids
        time.sleep(0.1)
    raise AssertionError(f"{n} children of {parent} did not start")


def wait_for_step(out_dir: Path, step: int, timeout=240):
    history = out_dir / "metrics_history.jsonl"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if history.exists() and f'"step":{step},' in history.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"step {step} not reached")


def workdir(name: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=f"kubetune-{name}-"))
    return d


def tiny_model(dest: Path, seed: int = 0, **overrides) -> Path:
    """A randomly initialised tiny Llama made by transformers (not by us) with the demo tokenizer;
    `overrides` change its config (e.g. tie_word_embeddings=False)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = json.loads((EXAMPLE / "model_config.json").read_text())
    cfg.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2)
    cfg.update(overrides)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in cfg.items() if k != "architectures"}))
    model.save_pretrained(dest, safe_serialization=True)
    for f in (EXAMPLE / "tokenizer").iterdir():
        shutil.copy(f, dest / f.name)
    return dest


def subset(src: Path, dest: Path, n: int) -> Path:
    lines = [l for l in src.read_text().splitlines() if l.strip()][:n]
    dest.write_text("\n".join(lines) + "\n")
    return dest


def config(model: Path, data: Path, out: Path, **training) -> dict:
    method = training.pop("method", "full")
    # Adam's first steps are ~lr*sign(g): with the default epsilon (1e-8), float rounding in a
    # near-zero gradient flips whole updates. A larger epsilon keeps the update smooth in g, so
    # the equivalence tests measure the gradient arithmetic, not that amplification.
    base = {"epochs": 1, "microBatchSize": 2, "gradientAccumulationSteps": 1, "learningRate": 1e-3,
            "lrScheduler": "linear", "warmupSteps": 1, "maxGradNorm": 1.0, "seed": 7, "logEverySteps": 1,
            "adamEpsilon": 1e-4}
    base.update(training)
    return {"model": {"path": str(model)}, "data": {"train": str(data), "format": "messages", "maxLength": 64},
            "method": {"type": method, "lora": {"r": 4, "alpha": 8, "dropout": 0.0}},
            "training": base, "output": {"dir": str(out)}, "checkpoint": {"resume": "never"},
            "distributed": {"timeoutSeconds": 20}}


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(json.dumps(cfg, indent=1))
    return path


def run(args, timeout=300, check=True, **kw):
    p = subprocess.run([TRAINER, *map(str, args)], capture_output=True, text=True, errors="replace",
                       timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} exited {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}")
    return p


def weights(folder: Path) -> dict:
    files = sorted(folder.glob("*.safetensors"))
    assert files, f"no safetensors in {folder}"
    out = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


def max_abs_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys(), (sorted(a.keys() ^ b.keys()))[:5]
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def main(tests: dict) -> None:
    import sys
    name = sys.argv[1]
    tests[name]()
    print(f"{name}: ok")
