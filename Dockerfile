FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY agentq ./agentq
COPY workers ./workers
COPY config ./config
RUN pip install --no-cache-dir -e . && useradd --create-home agentq
USER agentq
ENV AGENTQ_REDIS_URL=redis://redis:6379/0
CMD ["agentq", "worker", "-m", "workers"]
