"""A scripted provider that also counts tokens, for the tests of the token figure."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from hango.core.messages import Request
from hango.providers.scripted import ScriptedProvider


@dataclass
class ScriptedCounter(ScriptedProvider):
    """A scripted provider that also counts tokens (``TokenCounter``).

    ``count`` computes the figure; ``count_error`` is raised instead when set;
    ``count_delay`` seconds are slept first (to exercise the caller's deadline).
    """

    count: Callable[[Request], int] = lambda request: 0
    count_error: BaseException | None = None
    count_delay: float = 0.0
    count_calls: int = 0

    def count_tokens(self, request: Request, *, timeout: float) -> int:
        self.count_calls += 1
        if self.count_delay:
            time.sleep(self.count_delay)
        if self.count_error is not None:
            raise self.count_error
        return self.count(request)
