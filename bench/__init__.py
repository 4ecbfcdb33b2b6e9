"""Micro-benchmarks: each ``bench_*.py`` module has a ``main()`` printing its table.

Run them all with ``.venv/bin/python -m bench``; results are recorded in
``docs/benchmarks.md``.
"""
