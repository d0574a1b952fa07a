# kubetune-operator: built from source on Debian 12 with the Debian packages scripts/setup.sh uses;
# it needs no LibTorch. Build from the repository root:
#   docker build -f docker/operator.Dockerfile -t ghcr.io/kubetune/operator:dev .
FROM debian:bookworm-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake ninja-build pkg-config \
      libcpprest-dev nlohmann-json3-dev libyaml-cpp-dev libpcre2-dev libicu-dev libssl-dev libcli11-dev libspdlog-dev prometheus-cpp-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DKUBETUNE_WITH_TORCH=OFF -DKUBETUNE_BUILD_TESTS=OFF \
 && cmake --build /build --target kubetune-operator

# Only the shared libraries the binary links (see `ldd`), CA certificates for the API server's TLS,
# and an unprivileged user.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libcpprest2.10 libyaml-cpp0.7 libspdlog1.10 libfmt9 libprometheus-cpp-core1.0 libssl3 \
      ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /build/bin/kubetune-operator /usr/local/bin/kubetune-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kubetune-operator"]
