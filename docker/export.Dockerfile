# kubetune-export: GGUF files from a fine-tuned model folder (the merged model, or a full
# fine-tune's), made by llama.cpp's own tools (fetch/kubetune_fetch/export_gguf.py says why). Its
# own image, not the fetch initializer's: the converter needs torch and transformers (about 1 GB
# even for the CPU build), which an initializer that only downloads must not carry.
#   docker build -f docker/export.Dockerfile -t ghcr.io/kubetune/export:dev .
#   docker run -v $PWD/out:/out ghcr.io/kubetune/export:dev /out/merged --out /out/gguf --type q8_0
# The pins are scripts/setup.sh's (LLAMA_CPP_PIN and the test pins), which the tests ran with.
FROM python:3.12-slim-bookworm AS llama
RUN apt-get update && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /build
# llama-cpp-python builds llama.cpp's library (its quantizer); its source release carries the
# converter and gguf-py, unpacked to /opt/llama.cpp.
RUN pip download --no-cache-dir --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d . \
    && tar -xzf llama_cpp_python-0.3.36.tar.gz \
    && mkdir -p /opt/llama.cpp \
    && cp -r llama_cpp_python-0.3.36/vendor/llama.cpp/convert_hf_to_gguf.py \
             llama_cpp_python-0.3.36/vendor/llama.cpp/conversion \
             llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py /opt/llama.cpp/ \
    && CMAKE_ARGS="-DGGML_NATIVE=OFF" pip wheel --no-cache-dir --no-deps -w /wheels \
       llama_cpp_python-0.3.36.tar.gz

FROM python:3.12-slim-bookworm
COPY --from=llama /opt/llama.cpp /opt/llama.cpp
COPY --from=llama /wheels /wheels
WORKDIR /opt/kubetune-fetch
COPY fetch/ .
# torch from PyPI, as every dependency here (its CUDA libraries come along, unused: a smaller image
# would take the CPU build from PyTorch's own index).
RUN pip install --no-cache-dir torch==2.11.0 transformers==5.23.0 numpy==2.4.6 sentencepiece==0.2.1 /wheels/*.whl . \
    && rm -rf /wheels /opt/kubetune-fetch/build
USER 65532:65532
ENV HOME=/tmp KUBETUNE_LLAMA_CPP=/opt/llama.cpp
ENTRYPOINT ["python3", "-m", "kubetune_fetch.export_gguf"]
