"""kubetune-fetch: models and data from where they live (hf://, s3://) into a local cache,
fetched once, verified against the checksums the server publishes, before any GPU is held.

The one piece of kubetune that is Python: it runs in its own initializer image (and under
`kubetune run` on a laptop), built on the official clients (huggingface_hub, boto3), never in
the trainer's or the operator's process. See fetch/README.md.
"""
