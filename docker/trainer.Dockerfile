# kubetune-trainer, the image every worker pod runs (examples/jobs use ghcr.io/kubetune/kubetune).
# LibTorch is the C++ part of the torch==2.11.0 wheel (CUDA 13.0), as on the GPU machines; the wheel's
# nvidia-* dependencies bring cuBLAS, cuDNN and NCCL. Python only installs the wheel in the build
# stage; the runtime image has none. Build from the repository root:
#   docker build -f docker/trainer.Dockerfile -t ghcr.io/kubetune/kubetune:dev .
ARG CUDA_DEVEL_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu24.04
ARG RUNTIME_IMAGE=ubuntu:24.04

FROM ${CUDA_DEVEL_IMAGE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake ninja-build pkg-config git \
      python3 python3-venv libcpprest-dev nlohmann-json3-dev libyaml-cpp-dev libpcre2-dev libicu-dev \
      libssl-dev libcli11-dev libgloo-dev libprotobuf-dev protobuf-compiler prometheus-cpp-dev libxxhash-dev \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/torch && /opt/torch/bin/pip install --no-cache-dir torch==2.11.0
WORKDIR /src
COPY . .
RUN site=$(/opt/torch/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
 && cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKUBETUNE_BUILD_TESTS=OFF \
      -DCMAKE_PREFIX_PATH="$(/opt/torch/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')" \
      -DKUBETUNE_NCCL_INCLUDE="$site/nvidia/nccl/include" \
 && cmake --build /build --target kubetune-trainer \
 && bench/package_trainer.sh /build /opt/kubetune
# Only the shared libraries of the wheel (torch/lib and the nvidia-* lib folders, in the same
# layout so their RPATHs still hold): the Python packages around them (triton, sympy, ...) are
# hundreds of MB that nothing runs.
RUN site=$(/opt/torch/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
 && mkdir -p /opt/torchlibs/torch \
 && cp -a "$site/torch/lib" /opt/torchlibs/torch/ \
 && for lib in "$site"/nvidia/*/lib; do \
      pkg=$(basename "$(dirname "$lib")"); mkdir -p "/opt/torchlibs/nvidia/$pkg"; cp -a "$lib" "/opt/torchlibs/nvidia/$pkg/"; \
    done

# The runtime: the torch wheel's shared libraries (no Python is installed to run them), the
# trainer and the few Debian-side libraries it links besides LibTorch (package_trainer.sh collects
# them), found through ld.so.conf rather than a start-up script.
FROM ${RUNTIME_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/torchlibs /opt/torchlibs
COPY --from=build /opt/kubetune /opt/kubetune
RUN { echo /opt/kubetune/lib; echo /opt/torchlibs/torch/lib; ls -d /opt/torchlibs/nvidia/*/lib; } >/etc/ld.so.conf.d/kubetune.conf \
 && ldconfig \
 && ln -s /opt/kubetune/kubetune-trainer /usr/local/bin/kubetune-trainer \
 && kubetune-trainer --help >/dev/null
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["kubetune-trainer"]
