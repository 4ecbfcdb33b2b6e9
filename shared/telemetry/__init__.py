"""OpenTelemetry for the product: every name (``names``), setup from ``OTEL_*`` (``setup``),
the loop observer, the instrumented provider and the Celery publish tracer.
"""
