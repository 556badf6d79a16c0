"""memoryd: a local memory daemon for coding agents."""

import os

# onnxruntime (under the embedding model and the vector index) writes a device id and an
# event database to ~/.cache/Microsoft/DeveloperTools/.onnxruntime unless its telemetry is off,
# read once when it is first imported: here, before any of memoryd's modules loads it.
# memoryd keeps every file it makes in its data dir, and sends nothing anywhere.
os.environ["ORT_DISABLE_TELEMETRY"] = "1"
