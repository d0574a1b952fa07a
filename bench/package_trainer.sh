#!/usr/bin/env bash
# Packs kubetune-trainer with the shared libraries it needs beyond LibTorch/CUDA/glibc into DIR, so a
# GPU machine that has the same torch wheel (2.11.0+cu130) but not our Debian libraries can run it:
#   bench/package_trainer.sh BUILD_DIR DIR    then there:  . DIR/env.sh; DIR/kubetune-trainer ARGS...
# With --with-gpu-tests it also packs the test binaries that have GPU cases, and their fixtures:
#   there:  KUBETUNE_MODEL_FIXTURES=DIR/fixtures/model DIR/kubetune_model_tests --gtest_filter='*Cuda*'
set -euo pipefail
BUILD=$1; OUT=$2
binaries=(kubetune-trainer)
if [[ ${3:-} == --with-gpu-tests ]]; then
  binaries+=(kubetune_kernels_tests kubetune_model_tests)
  mkdir -p "$OUT/fixtures" && cp -r "$BUILD/fixtures/model" "$OUT/fixtures/"
fi
mkdir -p "$OUT/lib"
for b in "${binaries[@]}"; do
  cp "$BUILD/bin/$b" "$OUT/"
  strip --strip-debug "$OUT/$b"
done
for b in "${binaries[@]}"; do ldd "$BUILD/bin/$b"; done | awk '/=> \// {print $1, $3}' | sort -u | while read -r name path; do
  case "$name" in
    libtorch*|libc10*|libcuda*|libcudart*|libnccl*|libcublas*|libcudnn*|libnv*|libcu*|libgomp*|libshm*) continue ;;
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libutil.so*|ld-linux*|libgcc_s*|libstdc++*) continue ;;
  esac
  cp -L "$path" "$OUT/lib/$name"
done
strip --strip-debug "$OUT"/lib/libkubetune_*.so
cat >"$OUT/env.sh" <<'SH'
# Source me: points the dynamic linker at the packed libraries, this machine's torch wheel and its
# CUDA libraries.
_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_site=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
_libs="$_here/lib:$_site/torch/lib"
for _d in "$_site"/nvidia/*/lib; do [[ -d $_d ]] && _libs="$_libs:$_d"; done
export LD_LIBRARY_PATH="$_libs:${LD_LIBRARY_PATH:-}"
SH
du -sh "$OUT"
