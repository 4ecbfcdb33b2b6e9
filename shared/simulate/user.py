"""The scripted user of the offline simulation: the next user message, turn after turn.

Seeded, so a run is reproducible. It asks for the kinds of work that make a coding
session long (new modules with tests, fixes, builds, refactors), answers the agent's
follow-up questions, and now and then restates an earlier identifier, so a summary that
lost it would show.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hango.simulate.content import NOUNS, PACKAGES, VERBS

_ANSWERS = (
    "Yes, go ahead.",
    "Yes please, and keep the public names stable.",
    "No, leave that for now.",
    "Good question: keep strict mode off by default.",
)

_TASKS = (
    "Create `src/{package}/{noun}.py` with a small {noun} service and tests in "
    "`tests/{package}/test_{noun}.py`, then run the tests.",
    "Add a `{verb}_{noun}` helper to the {package} package, with tests, and run them.",
    "The nightly build of `{package}` is red; run `make {package}` and fix what breaks.",
    "Refactor the {noun} code in `src/{package}` so `{verb}_{noun}` takes a strict flag; "
    "keep the tests green.",
    "Write `src/{package}/{noun}.py` for the {noun} export (ticket {ticket}) and check it "
    "with the test suite.",
)


@dataclass
class ScriptedUser:
    """Produces the user's message for each turn from a seeded generator."""

    seed: int
    _rng: random.Random = field(init=False)
    _tickets: list[str] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(f"user-{self.seed}")

    def next_message(self, turn: int, last_reply: str | None) -> str:
        """The message for ``turn`` (1-based), answering ``last_reply`` if it asked something."""
        parts = []
        if last_reply and last_reply.rstrip().endswith("?"):
            parts.append(self._rng.choice(_ANSWERS))
        if self._tickets and self._rng.random() < 0.25:
            parts.append(f"Reminder: everything in this session is for ticket {self._tickets[0]}.")
        parts.append(self._task())
        return " ".join(parts)

    def _task(self) -> str:
        ticket = f"HANGO-{self._rng.randint(100, 9999)}"
        self._tickets.append(ticket)
        template = self._rng.choice(_TASKS)
        return template.format(
            package=self._rng.choice(PACKAGES),
            noun=self._rng.choice(NOUNS),
            verb=self._rng.choice(VERBS),
            ticket=ticket,
        )
