"""The Alembic scripts, installed as ``hango.migrations`` (``package-dir`` in pyproject.toml).

Shipping them as a package lets ``Store.migrate`` and ``alembic upgrade head`` find them
through the package (``importlib.resources``) from any directory and from a wheel.
"""
