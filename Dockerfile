# One image for every fleet process; docker-compose.yml and the Procfile
# choose the command.
FROM python:3.11-slim
# postgresql-client: `nahida migrate` runs pg_dump (15, as the compose server) first.
RUN apt-get update && apt-get install -y --no-install-recommends git postgresql-client \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY nahida_workers ./nahida_workers
COPY tasks ./tasks
COPY config ./config
RUN pip install --no-cache-dir .
ENV NAHIDA_ENV_FILE=/dev/null
