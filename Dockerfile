# One image for every Python service of the stack: migrate, the worker pools, flower.
# The sources stay in /app (the working directory) because `alembic upgrade head` and
# Store.migrate() read alembic.ini and migrations/ from there; the package itself is
# installed into site-packages with its console scripts (hango, celery, alembic).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HANGO_HOME=/app/.hango

WORKDIR /app

COPY pyproject.toml README.md alembic.ini ./
COPY shared ./shared
COPY worker ./worker
COPY migrations ./migrations
RUN pip install ".[flower]" \
    && useradd --create-home --uid 10001 hango \
    && mkdir -p /app/.hango \
    && chown hango /app/.hango

USER hango

CMD ["hango", "--help"]
