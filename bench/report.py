#!/usr/bin/env python3
"""Turns bench/run_bench.sh's results.jsonl into the comparison tables: one row per (work: shape,
sequence length and micro-batch where the rows name them; method, GPUs,
recompute: off, on, or offload, where our offloaded checkpointing meets Unsloth's), our tokens/s per
GPU and peak memory, then each competitor's and our ratio to it, and the
scaling efficiency (tokens/s per GPU at N GPUs / at 1 GPU) of ours and HF's; then the first step's loss
and gradient norm of each. Rows without "recompute" (older results) count as recompute off. Our rows
with "precision": "fp8" (run_bench.sh --precisions) get a table of their own: FP8 against our bf16
step and against each competitor's bf16 step on the same work.

Usage: report.py results.jsonl [more.jsonl ...]
"""
import json
import sys

ORDER = ["hf", "liger", "unsloth", "unsloth-offload"]


def name(r: dict) -> str:
    # Unsloth's offloaded checkpointing is its own column beside its plain one, in the "offload" rows.
    return "unsloth-offload" if r["impl"] == "unsloth" and r.get("recompute") == "unsloth" else r["impl"]


def fmt(x, spec: str, width: int) -> str:
    return format(x, spec) if x is not None else format("-", f">{width}")


def work(r: dict) -> str:
    """The shape, sequence length and micro-batch a row measured ("-" for older rows without them),
    in the method column: a row compares only runs of the same work."""
    if "shape" not in r:
        return r["method"]
    shape = r["shape"].replace("llama-", "").replace("3.2-", "").replace("3.1-", "")
    return f"{r['method']} {shape} s{r['seq']} mb{r['micro_batch']}"


rows = [json.loads(l) for path in sys.argv[1:] for l in open(path) if l.strip()]
fp8_rows = [r for r in rows if r.get("precision") == "fp8"]
rows = [r for r in rows if r.get("precision", "default") != "fp8"]
by = {}
for r in rows:
    recompute = {"off": "off", "on": "on", "offload": "offload", "unsloth": "offload"}[r.get("recompute", "off")]
    by[(name(r), work(r), r["gpus"], recompute)] = r
keys = sorted({(m, g, rc) for _, m, g, rc in by}, key=lambda k: (k[0], k[2], k[1]))
col = max([6] + [len(m) for m, _, _ in keys])
comps = [c for c in ORDER if any(k[0] == c for k in by)] + sorted({k[0] for k in by} - set(ORDER) - {"ours"})


def get(impl, method, gpus, rc, field):
    r = by.get((impl, method, gpus, rc))
    return None if r is None or r.get("failed") else r.get(field)


def cell(impl, method, gpus, rc, field, spec, width):
    r = by.get((impl, method, gpus, rc))
    if r is not None and r.get("failed"):
        return format("failed" if width >= 6 else "-", f">{width}")
    return fmt(get(impl, method, gpus, rc, field), spec, width)


head = f"{'method':{col}} {'GPUs':>4} {'recompute':>9} | {'ours tok/s/GPU':>14} {'GiB':>5}"
for c in comps:
    head += f" | {c + ' tok/s':>{max(len(c) + 6, 8)}} {'GiB':>5} {'ratio':>5}"
head += f" | {'ours scaling':>12} {'hf scaling':>10}"
print(head)
for method, gpus, rc in keys:
    ours = get("ours", method, gpus, rc, "tokens_per_s_per_gpu")
    line = (f"{method:{col}} {gpus:>4} {rc:>9} | {cell('ours', method, gpus, rc, 'tokens_per_s_per_gpu', '14.0f', 14)} "
            f"{cell('ours', method, gpus, rc, 'peak_gib', '5.1f', 5)}")
    for c in comps:
        w = max(len(c) + 6, 8)
        theirs = get(c, method, gpus, rc, "tokens_per_s_per_gpu")
        ratio = ours / theirs if ours and theirs else None
        line += (f" | {cell(c, method, gpus, rc, 'tokens_per_s_per_gpu', f'{w}.0f', w)} "
                 f"{cell(c, method, gpus, rc, 'peak_gib', '5.1f', 5)} {fmt(ratio, '5.2f', 5)}")
    for impl, width in (("ours", 12), ("hf", 10)):
        now, one = get(impl, method, gpus, rc, "tokens_per_s_per_gpu"), get(impl, method, 1, rc, "tokens_per_s_per_gpu")
        line += (" | " if impl == "ours" else " ") + fmt(now / one * 100 if now and one else None, f"{width - 1}.1f", width - 1) + "%"
    print(line)
print("tok/s: tokens/s per GPU; ratio: ours / theirs; GiB: peak GPU memory allocated; failed: see run_bench's log")

# Same model, same first batch: the first step's loss should agree to bf16 precision (a gap means the
# work differs). LoRA gradient norms differ by design: the adapters' A matrices are random.
print()
impls = ["ours"] + comps
head = f"{'method':{col}} {'GPUs':>4} {'recompute':>9} |" + "".join(f" {i + ' loss@1':>{max(len(i) + 7, 10)}}" for i in impls)
head += " |" + "".join(f" {i + ' |g|@1':>{max(len(i) + 5, 10)}}" for i in impls)
print(head)
for method, gpus, rc in keys:
    line = f"{method:{col}} {gpus:>4} {rc:>9} |"
    line += "".join(" " + cell(i, method, gpus, rc, "first_loss", f"{max(len(i) + 7, 10)}.4f", max(len(i) + 7, 10)) for i in impls)
    line += " |" + "".join(" " + cell(i, method, gpus, rc, "first_grad_norm", f"{max(len(i) + 5, 10)}.4f", max(len(i) + 5, 10)) for i in impls)
    print(line)

if fp8_rows:
    print()
    print("model.precision fp8 (ours) against the bf16 steps of the same work (ratio: fp8 / theirs)")
    head = f"{'method':{col}} {'GPUs':>4} {'recompute':>9} | {'fp8 tok/s/GPU':>13} {'GiB':>5} {'loss@1':>7}"
    for c in ["ours"] + comps:
        head += f" | {c + ' bf16':>{max(len(c) + 5, 8)}} {'ratio':>5}"
    print(head)
    for r in fp8_rows:
        rc = {"off": "off", "on": "on", "offload": "offload", "unsloth": "offload"}[r.get("recompute", "off")]
        method, gpus = work(r), r["gpus"]
        if r.get("failed"):
            print(f"{method:{col}} {gpus:>4} {rc:>9} | {'failed':>13}")
            continue
        mine = r["tokens_per_s_per_gpu"]
        line = f"{method:{col}} {gpus:>4} {rc:>9} | {mine:13.0f} {r['peak_gib']:5.1f} {r['first_loss']:7.4f}"
        for c in ["ours"] + comps:
            w = max(len(c) + 5, 8)
            theirs = get(c, method, gpus, rc, "tokens_per_s_per_gpu")
            line += f" | {fmt(theirs, f'{w}.0f', w)} {fmt(mine / theirs if theirs else None, '5.2f', 5)}"
        print(line)
