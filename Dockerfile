# toolkeeper over streamable HTTP at http://HOST:8765/mcp, its store in the /data volume.
# Build: docker build -t toolkeeper .   Run: see "Install" in README.md (a client key comes first).

FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.12-slim
# Servers behind the gateway run as this user too: nothing in the container runs as root.
RUN useradd --create-home --uid 10001 toolkeeper \
    && mkdir /data && chown toolkeeper:toolkeeper /data
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER toolkeeper
WORKDIR /home/toolkeeper
ENV TOOLKEEPER_HOME=/data PYTHONUNBUFFERED=1
VOLUME /data
EXPOSE 8765
# /healthz is answered before authentication, so the check needs no key.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('TOOLKEEPER_HTTP_PORT', '8765'), timeout=4)"]
# Bound to every interface, so every client must authenticate: the gateway refuses to start
# until the store holds a client key (toolkeeper keys create NAME) or OAuth is set up.
CMD ["toolkeeper", "serve", "--transport", "http", "--host", "0.0.0.0"]
