# One image for every Python service of the stack: migrate, the worker pools, flower.
# The package is installed into site-packages with its console scripts (hango, celery,
# alembic) and its migrations (hango.migrations, found through the package by hango migrate
# and Store.migrate); alembic.ini stays in /app (the working directory) so that
# `alembic upgrade head` runs there too. The exact versions come from constraints.txt.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HANGO_HOME=/app/.hango

WORKDIR /app

COPY pyproject.toml README.md LICENSE alembic.ini constraints.txt ./
COPY shared ./shared
COPY worker ./worker
COPY migrations ./migrations
RUN pip install -c constraints.txt ".[all]" \
    && useradd --create-home --uid 10001 hango \
    && mkdir -p /app/.hango \
    && chown hango /app/.hango

USER hango

CMD ["hango", "--help"]
