#!/usr/bin/env python3
"""Turns bench/run_bench.sh's results.jsonl into the comparison table."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {(r["impl"], r["method"], r["gpus"]): r for r in rows}
print(f"{'method':6} {'GPUs':>4} | {'ours tok/s/GPU':>14} {'HF tok/s/GPU':>13} {'ratio':>6} | "
      f"{'ours peak GiB':>13} {'HF peak GiB':>11} | {'ours scaling':>12} {'HF scaling':>10}")
for method in sorted({r["method"] for r in rows}):
    for gpus in sorted({r["gpus"] for r in rows if r["method"] == method}):
        o, h = by.get(("ours", method, gpus)), by.get(("hf", method, gpus))
        o1, h1 = by.get(("ours", method, 1)), by.get(("hf", method, 1))
        def fmt(x, spec):
            return format(x, spec) if x is not None else "-"
        ratio = o["tokens_per_s_per_gpu"] / h["tokens_per_s_per_gpu"] if o and h else None
        so = o["tokens_per_s_per_gpu"] / o1["tokens_per_s_per_gpu"] if o and o1 else None
        sh = h["tokens_per_s_per_gpu"] / h1["tokens_per_s_per_gpu"] if h and h1 else None
        print(f"{method:6} {gpus:>4} | {fmt(o and o['tokens_per_s_per_gpu'], '14.0f')} "
              f"{fmt(h and h['tokens_per_s_per_gpu'], '13.0f')} {fmt(ratio, '6.2f')} | "
              f"{fmt(o and o['peak_gib'], '13.1f')} {fmt(h and h['peak_gib'], '11.1f')} | "
              f"{fmt(so and 100 * so, '11.1f')}% {fmt(sh and 100 * sh, '9.1f')}%")

# Same model, same first batch: the first step's loss and gradient norm should agree to bf16
# precision. A gap here means the two are not doing the same work.
print()
print(f"{'method':6} {'GPUs':>4} | {'ours loss@1':>11} {'HF loss@1':>10} | {'ours |g|@1':>10} {'HF |g|@1':>9}")
for (impl, method, gpus), o in sorted(by.items()):
    h = by.get(("hf", method, gpus))
    if impl != "ours" or not h or o.get("first_loss") is None or h.get("first_loss") is None:
        continue
    print(f"{method:6} {gpus:>4} | {o['first_loss']:11.4f} {h['first_loss']:10.4f} | "
          f"{o['first_grad_norm']:10.4f} {h['first_grad_norm']:9.4f}")
