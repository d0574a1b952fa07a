#!/usr/bin/env bash
# Downloads the competitors of bench/run_bench.sh (Liger kernels, Unsloth) and the packages they import
# that the GPU machine lacks, and installs them, trimmed, into DIR/site for Python 3.12 on x86-64 Linux:
#   bench/fetch_competitors.sh DIR          (here, where PyPI is reachable)
#   there:  bench/run_bench.sh BIN_DIR --competitors DIR ...     (or PYTHONPATH=DIR/site)
# It also packs DIR/site into DIR/site.tar.gz (about 10 MB), the thing to carry to the GPU machine.
# The GPU machine already has torch 2.11 (+ triton), transformers 5.17, peft, accelerate, numpy,
# pandas, pyarrow, xxhash, einops, sentencepiece, protobuf, rich, typer, httpx, aiohttp and the usual
# small ones. Wheels are cached in $BENCH_WHEELS (default ~/.cache/kubetune/bench-wheels); nothing
# here is committed (DIR is .gitignored when it is .bench-competitors).
set -euo pipefail
DIR=${1:?usage: bench/fetch_competitors.sh DIR}
WHEELS=${BENCH_WHEELS:-$HOME/.cache/kubetune/bench-wheels}
PIP=${PIP:-$HOME/.cache/kubetune/venv/bin/pip}
[[ -x $PIP ]] || PIP="python3 -m pip"

# Pinned. The first three are the competitors; the rest is what they import on the benchmark's path
# that the GPU machine does not have: the wheels' Requires-Dist, walked down, and kept only where a
# benchmark run on the GPU machine loaded it (a module trace of liger's LoRA and full runs and
# unsloth's LoRA run, H100, 2026-11-23).
PACKAGES=(
  unsloth==2026.10.9 unsloth_zoo==2026.10.9 liger-kernel==0.8.5
  trl==1.15.0                                          # unsloth patches its trainers at import
  datasets==4.8.5 dill==0.4.1 multiprocess==0.70.19    # trl and unsloth_zoo import datasets
  torchao==0.18.0 bitsandbytes==0.50.2 cut_cross_entropy==25.1.1
)
# Left out although Requires-Dist lists them, because the benchmark never imports them (unsloth's
# imports of them are optional, lazy, or for other features): tyro (and its docstring-parser,
# typeguard), msgspec (vLLM only), pydantic (only to silence one of its warnings, in a try),
# structlog, json5 and nest-asyncio (Unsloth Studio, OpenEnv), diffusers (30 MB), hf_transfer
# (looked up with find_spec only; the run is offline), sentence-transformers, and xformers (optional:
# without it Unsloth uses torch SDPA, as the HF baseline does).

TARGET=(--python-version 3.12 --implementation cp --only-binary=:all:
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
mkdir -p "$WHEELS"
$PIP download -q --no-deps "${TARGET[@]}" -d "$WHEELS" "${PACKAGES[@]}"

rm -rf "$DIR/site"
mkdir -p "$DIR"
$PIP install -q --no-deps --no-compile --no-index --find-links "$WHEELS" "${TARGET[@]}" \
  --target "$DIR/site" "${PACKAGES[@]}"

# Drop what a benchmark never loads.
site=$DIR/site
rm -rf "$site/studio" "$site/unsloth_cli" "$site/bin"          # Unsloth's web app and CLI
rm -rf "$site/test"                                             # torchao's tests (top-level!)
find "$site" -depth -type d \( -name __pycache__ -o -name tests \) -exec rm -rf {} +
# bitsandbytes loads libbitsandbytes_cuda<torch's CUDA>.so (torch 2.11+cu130 there), else the CPU one.
find "$site/bitsandbytes" -maxdepth 1 -name 'libbitsandbytes_*.so' \
  ! -name libbitsandbytes_cuda130.so ! -name libbitsandbytes_cpu.so -delete
# torchao's CUTLASS/MX kernels (13 MB): torchao imports without them (it loads whichever _C*.so it
# finds); bf16 LoRA and full fine-tuning never call them.
rm -f "$site"/torchao/_C*.so
# unsloth_zoo's Apple MLX backend: only its runtime probe is imported off Apple silicon.
find "$site/unsloth_zoo/mlx" -mindepth 1 ! -name __init__.py ! -name runtime.py -exec rm -rf {} +

# The device machine takes at most 64 MiB of working tree and carried paths together, the packed
# trainer included: carry DIR/site.tar.gz alone (run_bench.sh unpacks it when DIR/site is missing).
tar -C "$DIR" -czf "$DIR/site.tar.gz" site
du -sh "$site" "$DIR/site.tar.gz"
