#!/usr/bin/env bash
# Packs kubetune-trainer with the shared libraries it needs beyond LibTorch/CUDA/glibc into DIR, so a
# GPU machine that has the same torch wheel (2.11.0+cu130) but not our Debian libraries can run it:
#   bench/package_trainer.sh BUILD_DIR DIR    then there:  DIR/run-trainer ARGS...
set -euo pipefail
BUILD=$1; OUT=$2
mkdir -p "$OUT/lib"
cp "$BUILD/bin/kubetune-trainer" "$OUT/"
strip --strip-debug "$OUT/kubetune-trainer"
ldd "$BUILD/bin/kubetune-trainer" | awk '/=> \// {print $1, $3}' | while read -r name path; do
  case "$name" in
    libtorch*|libc10*|libcuda*|libcudart*|libnccl*|libcublas*|libcudnn*|libnv*|libcu*|libgomp*|libshm*) continue ;;
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libgcc_s*|libstdc++*) continue ;;
  esac
  cp -L "$path" "$OUT/lib/$name"
done
cat >"$OUT/run-trainer" <<'SH'
#!/usr/bin/env bash
# Runs the packed trainer against this machine's torch wheel and its CUDA libraries.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SITE=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
LIBS="$HERE/lib:$SITE/torch/lib"
for d in "$SITE"/nvidia/*/lib; do [[ -d $d ]] && LIBS="$LIBS:$d"; done
export LD_LIBRARY_PATH="$LIBS:${LD_LIBRARY_PATH:-}"
exec "$HERE/kubetune-trainer" "$@"
SH
chmod +x "$OUT/run-trainer"
du -sh "$OUT"
