"""hango-context: keeps long agent sessions inside the context window without rewriting history.

The public API. Everything a library user needs is importable from here::

    from hango import Message, ToolResultBlock, build_agent, load_settings

The names are listed once, in ``__init__.pyi`` (what type checkers read); they are loaded
from it on first use (PEP 562, ``lazy_loader``), so importing one subpackage (the CLI, a
worker) does not import the whole library.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
