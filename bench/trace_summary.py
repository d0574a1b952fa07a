#!/usr/bin/env python3
"""Where a step's GPU time goes, from a Chrome/Kineto trace (ours: KUBETUNE_PROFILE=FIRST:COUNT;
the HF baseline: hf_baseline.py --profile FILE). Prints GPU busy time per step, idle time, time
per kernel category, the top kernels, and, where the trace has input shapes (ours, and
hf_baseline.py's), the GEMMs split by shape: wide products (every dimension above --narrow) with
their FLOPs and achieved TFLOP/s, narrow ones (LoRA's rank-r products), and those without a shape.

Usage: trace_summary.py TRACE.json --steps N [--top 25]
"""
import argparse
import bisect
import collections
import json
import re

CATEGORIES = [  # first match wins
    ("nccl", r"nccl"),
    ("attention", r"flash|fmha|attention|sdpa"),
    ("matmul", r"gemm|cutlass|xmma|nvjet|sm\d+_|cublas|matmul"),
    ("optimizer", r"adam|foreach|multi_tensor"),
    ("norm", r"norm"),
    ("softmax/loss", r"softmax|logsumexp|nll|cross_entropy|scatter|gather"),
    ("copy/cast", r"copy|memcpy|memset|cast|convert"),
    ("elementwise", r"elementwise|vectorized|unrolled|reduce|kernel"),
]


def category(name: str) -> str:
    low = name.lower()
    for label, pattern in CATEGORIES:
        if re.search(pattern, low):
            return label
    return "other"


def gemm_mkn(op: str, dims):
    """(M, K, N) of the product that a CPU op with these input shapes computes, or None. Only the
    ops that launch GEMM kernels themselves: aten::linear and aten::matmul reach them through these,
    and a kernel belongs to the innermost op."""
    mats = [d for d in dims if isinstance(d, list) and len(d) >= 2]
    try:
        if op in ("aten::mm", "aten::_scaled_mm"):
            (m, k), (_, n) = mats[0][-2:], mats[1][-2:]
            return m, k, n
        if op in ("aten::addmm", "aten::addmm_"):
            # addmm(self, mat1, mat2): self is a bias (1-D) or the [M, N] it adds to.
            a, b = (mats[1], mats[2]) if len(mats) >= 3 else (mats[0], mats[1])
            return a[0], a[1], b[1]
        if op in ("aten::bmm", "aten::baddbmm"):
            a, b = mats[-2], mats[-1]
            return a[0] * a[1], a[2], b[2]
    except (IndexError, TypeError):
        return None
    return None


def gemm_split(events, kernels, narrow: int, per: float) -> None:
    """Prints the matmul kernels' time by the shape of the op that launched them."""
    ops = {}
    for e in events:
        args = e.get("args") or {}
        if e.get("cat") == "cpu_op" and "External id" in args and args.get("Input Dims"):
            ops[args["External id"]] = (e["name"], args["Input Dims"])
    if not ops:
        print("  GEMMs by shape: the trace has no input shapes")
        return
    # One op's kernels (a split-K GEMM and its reduction) share its FLOPs: summed per op first.
    time_by_op, shape_of, unknown = collections.Counter(), {}, 0.0
    for e in kernels:
        if category(e["name"]) != "matmul":
            continue
        ext = (e.get("args") or {}).get("External id")
        op = ops.get(ext)
        mkn = gemm_mkn(*op) if op else None
        if mkn is None:
            unknown += e["dur"]
            continue
        time_by_op[ext] += e["dur"]
        shape_of[ext] = mkn
    wide, thin, flops = collections.Counter(), 0.0, 0.0
    for ext, dur in time_by_op.items():
        m, k, n = shape_of[ext]
        if min(m, k, n) <= narrow:
            thin += dur
        else:
            wide[(m, k, n)] += dur
            flops += 2.0 * m * k * n
    wide_us = sum(wide.values())
    rate = flops / (wide_us * 1e-6) / 1e12 if wide_us else 0.0
    print(f"  GEMMs by shape (ms/step): wide {wide_us / per:.2f} ({flops / 1e12 / (per / 1000):.1f} "
          f"TFLOP/step at {rate:.0f} TFLOP/s), narrow (a dimension <= {narrow}) {thin / per:.2f}, "
          f"no shape {unknown / per:.2f}")
    for (m, k, n), dur in wide.most_common(8):
        print(f"    {dur / per:8.2f}  M={m} K={k} N={n}")


def launches(events):
    """Correlation id -> (launch event, innermost CPU op around it) on the host."""
    runtime = {e["args"]["correlation"]: e for e in events
               if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}
    ops_by_tid = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("ph") == "X":
            ops_by_tid[e["tid"]].append(e)
    for ops in ops_by_tid.values():
        ops.sort(key=lambda e: e["ts"])
    starts = {tid: [op["ts"] for op in ops] for tid, ops in ops_by_tid.items()}
    owner = {}
    for corr, launch in runtime.items():
        # The innermost op around the launch is the latest-starting one that still runs at it.
        ops, inner = ops_by_tid.get(launch["tid"], []), None
        i = bisect.bisect_right(starts.get(launch["tid"], []), launch["ts"]) - 1
        for op in (ops[j] for j in range(i, max(i - 500, -1), -1)):
            if op["ts"] + op["dur"] >= launch["ts"] + launch["dur"]:
                inner = op
                break
        owner[corr] = (launch, inner)
    return owner


def gap_owners(events, ordered, per: float) -> None:
    """Idle time by the host op that launched the kernel after each gap, and how late the launch
    came: a launch after the gap opened means the host, not the device, set the pace."""
    owner = launches(events)
    idle_by_op, late_by_op, count = collections.Counter(), collections.Counter(), collections.Counter()
    end = ordered[0]["ts"] + ordered[0]["dur"]
    for e in ordered[1:]:
        if e["ts"] > end:
            corr = (e.get("args") or {}).get("correlation")
            launch, op = owner.get(corr, (None, None))
            name = op["name"] if op else "?"
            idle_by_op[name] += e["ts"] - end
            count[name] += 1
            if launch is not None and launch["ts"] > end:
                late_by_op[name] += e["ts"] - end
        end = max(end, e["ts"] + e["dur"])
    print("  idle time by the op launching the kernel after the gap (ms/step, of it launched late, gaps/step):")
    for name, idle in idle_by_op.most_common(15):
        print(f"    {idle / per:8.2f} {late_by_op[name] / per:8.2f} {count[name] * 1000 / per:6.0f}  {short(name, 80)}")


def kernels_by_op(events, kernels, pattern: str, per: float) -> None:
    owner = launches(events)
    time, calls = collections.Counter(), collections.Counter()
    for e in kernels:
        if not re.search(pattern, e["name"]):
            continue
        _, op = owner.get((e.get("args") or {}).get("correlation"), (None, None))
        dims = (op.get("args") or {}).get("Input Dims") if op else None
        key = (op["name"] if op else "?", json.dumps(dims)[:100] if dims else "", short(e["name"], 50))
        time[key] += e["dur"]
        calls[key] += 1
    print(f"  kernels matching {pattern!r} by launching op (ms/step, calls/step):")
    for (name, dims, kernel), dur in time.most_common(20):
        print(f"    {dur / per:8.2f} {calls[(name, dims, kernel)] * 1000 / per:6.0f}  {name} {dims} {kernel}")


def short(name: str, width: int = 110) -> str:
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= width else name[: width - 3] + "..."


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, required=True, help="steps covered by the trace")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--gaps", type=int, default=10, help="list the longest idle gaps")
    ap.add_argument("--by-op", metavar="REGEX",
                    help="kernels whose name matches: time by the launching op and its input shapes")
    ap.add_argument("--narrow", type=int, default=128,
                    help="a GEMM with a dimension at most this is narrow (LoRA's rank-r products)")
    args = ap.parse_args()
    events = json.load(open(args.trace))
    events = events["traceEvents"] if isinstance(events, dict) else events
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not gpu:
        raise SystemExit(f"{args.trace}: no GPU events (was CUDA activity profiled?)")
    by_name, by_cat = collections.Counter(), collections.Counter()
    for e in gpu:
        by_name[e["name"]] += e["dur"]
        by_cat[category(e["name"])] += e["dur"]
    # Busy time is the union of kernel intervals over all streams.
    ordered = sorted(gpu, key=lambda e: (e["ts"], e["ts"] + e["dur"]))
    busy, cur_start, cur_end = 0.0, ordered[0]["ts"], ordered[0]["ts"] + ordered[0]["dur"]
    gaps, before = [], ordered[0]  # (idle microseconds, start offset, kernel before, kernel after)
    for e in ordered[1:]:
        start, end = e["ts"], e["ts"] + e["dur"]
        if start > cur_end:
            busy += cur_end - cur_start
            gaps.append((start - cur_end, cur_end - ordered[0]["ts"], before["name"], e["name"]))
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
        if end >= cur_end:
            before = e
    busy += cur_end - cur_start
    wall = ordered[-1]["ts"] + ordered[-1]["dur"] - ordered[0]["ts"]
    per = 1000.0 * args.steps  # microseconds -> milliseconds per step
    print(f"{args.trace}: {len(gpu)} GPU events over {args.steps} steps")
    print(f"  GPU span {wall / per:8.1f} ms/step, busy {busy / per:8.1f} ms/step, "
          f"idle {(wall - busy) / per:6.1f} ms/step")
    print("  by category (ms/step, summed over streams):")
    for label, dur in by_cat.most_common():
        print(f"    {label:14s} {dur / per:8.2f}")
    gemm_split(events, gpu, args.narrow, per)
    print(f"  top {args.top} kernels (ms/step, calls/step):")
    calls = collections.Counter(e["name"] for e in gpu)
    for name, dur in by_name.most_common(args.top):
        print(f"    {dur / per:8.2f} {calls[name] / args.steps:6.0f}  {short(name)}")
    # Where the GPU waits: for the host (launches, a read-back), or between streams.
    print(f"  longest {args.gaps} idle gaps (us, at ms into the trace: kernel before -> kernel after):")
    for idle, at, prev, nxt in sorted(gaps, reverse=True)[: args.gaps]:
        print(f"    {idle:8.0f} at {at / 1000:8.2f}: {short(prev, 60)} -> {short(nxt, 60)}")
    gap_owners(events, ordered, per)
    if args.by_op:
        kernels_by_op(events, gpu, args.by_op, per)
    small = sum(g[0] for g in gaps if g[0] < 20)
    print(f"  idle in gaps under 20 us (launch-bound stretches): {small / per:.2f} ms/step "
          f"over {sum(1 for g in gaps if g[0] < 20) / args.steps:.0f} gaps/step")


if __name__ == "__main__":
    main()
