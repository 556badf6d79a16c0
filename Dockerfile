FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git build-essential \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY memoryd ./memoryd
COPY workers ./workers
COPY schema ./schema
COPY systemd ./systemd
RUN pip install --no-cache-dir .
# The data dir must be writable by the user memoryd runs as (a volume inherits this owner).
RUN mkdir -p /data && chown nobody:nogroup /data && chmod 0700 /data
ENV MEMORYD_DATA_DIR=/data HOME=/data
VOLUME ["/data"]
USER nobody
