#!/usr/bin/env bash
# Sets up (with the Python reference libraries) and runs every test through ctest.
# Tests that need a GPU report themselves as skipped on machines without one.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${KUBETUNE_CACHE:-$HOME/.cache/kubetune}
"$ROOT/scripts/setup.sh" --test
BUILD_DIR=$(cat "$CACHE/build/last-build-dir")
# One thread per test process: ctest already runs two at a time on two cores.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" --timeout 900 "$@"
