"""Example counts of the property tests: moderate in CI, at least 10,000 when asked.

``HYPOTHESIS_PROFILE=thorough python -m pytest tests/unit -k properties`` runs every
property test with :data:`THOROUGH_EXAMPLES` examples (docs/reliability.md has the count
and the time it took); the default profile, ``ci``, keeps each test's own count so the
suite stays within minutes.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

THOROUGH_EXAMPLES = 10_000
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")

settings.register_profile("ci", deadline=None)
settings.register_profile(
    "thorough",
    deadline=None,
    max_examples=THOROUGH_EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def examples(ci: int) -> int:
    """``ci`` examples in the suite, :data:`THOROUGH_EXAMPLES` under the thorough profile."""
    if PROFILE not in ("ci", "thorough"):
        raise ValueError(f"HYPOTHESIS_PROFILE={PROFILE!r}: expected 'ci' or 'thorough'")
    return THOROUGH_EXAMPLES if PROFILE == "thorough" else ci


settings.load_profile(PROFILE if PROFILE in ("ci", "thorough") else "ci")
