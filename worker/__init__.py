"""The Celery side: app, tasks and worker signals. Logic lives in ``shared``."""
