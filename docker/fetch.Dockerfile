# kubetune-fetch: the initializer image that fetches a job's hf:// and s3:// sources into its cache
# volume before any GPU is held. Python lives here and only here (the trainer and operator images
# carry none): it is built on the official clients, huggingface_hub and boto3, pinned in
# fetch/pyproject.toml. Build from the repository root:
#   docker build -f docker/fetch.Dockerfile -t ghcr.io/kubetune/fetch:dev .
FROM python:3.12-slim-bookworm
WORKDIR /opt/kubetune-fetch
COPY fetch/ .
RUN pip install --no-cache-dir . && rm -rf /opt/kubetune-fetch/build
USER 65532:65532
ENV HOME=/tmp
ENTRYPOINT ["kubetune-fetch"]
