FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git build-essential \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY memoryd ./memoryd
COPY workers ./workers
COPY schema ./schema
RUN pip install --no-cache-dir .
ENV MEMORYD_DATA_DIR=/data
VOLUME ["/data"]
USER nobody
