FROM python:3.11-slim
WORKDIR /app
# Install agentq as a regular (non-editable) package, like its wheel, with the `monitoring` extra so the same
# image also runs Flower (docker-compose.yml), and the `otel` extra so its processes export traces once
# OTEL_EXPORTER_OTLP_ENDPOINT is set. The sources are removed afterwards: the installed package runs.
COPY pyproject.toml README.md ./src/
COPY agentq ./src/agentq
COPY workers ./src/workers
RUN pip install --no-cache-dir "./src[monitoring,otel,mcp]" && rm -rf ./src && useradd --create-home agentq \
    && mkdir -p /var/lib/agentq/metrics && chown agentq /var/lib/agentq/metrics
# config/: settings documentation, saved `_module` requests (config/modules, the default AGENTQ_MODULE_DIRS)
# and your own tool folders.
COPY config ./config
USER agentq
# Workers keep their Prometheus counters under AGENTQ_METRICS_DIR (one folder per container); a volume mounted
# there and shared with the API lets its /metrics sum them (docker-compose.yml). A new volume takes this folder's
# owner, so the unprivileged user can write to it.
ENV AGENTQ_REDIS_URL=redis://redis:6379/0 \
    AGENTQ_METRICS_DIR=/var/lib/agentq/metrics
EXPOSE 8000 5555
CMD ["agentq", "worker", "-m", "workers"]
