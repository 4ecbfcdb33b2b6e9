"""One simulated session: the scripted user and model driving the real agent loop.

``build_simulation`` wires the agent exactly as a deployment does (``build_agent``: the
configured store, history backend, middleware chain, summarizer and, with a Redis URL,
the Celery ports) with the scripted model as both the agent's and the summarizer's
provider and the pretend shell as an extra tool. ``Simulation.run`` plays the turns.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hango.agent.loop import TurnResult
from hango.compaction.record import CompactionRecord
from hango.core.ids import validate_session_id
from hango.core.profiles import Profiles
from hango.core.settings import Settings
from hango.history.base import HistoryBackend
from hango.history.local import LocalHistory
from hango.history.paths import conversation_history_path
from hango.middleware.observer import LoopObserver
from hango.providers.base import Provider
from hango.simulate.commands import PretendShell
from hango.simulate.model import ScriptedCodingModel
from hango.simulate.user import ScriptedUser
from hango.simulate.workspace import SessionWorkspace
from hango.store.repository import SessionInfo
from hango.wiring.agent import Agent, build_agent, open_store
from hango.wiring.history import history_from_settings

TurnCallback = Callable[[int, TurnResult], None]


@dataclass(frozen=True)
class SimulationOutcome:
    """What a finished simulation leaves behind, for the report."""

    session_id: str
    turns: tuple[TurnResult, ...]
    session: SessionInfo
    stored_messages: int
    history_path: str  # the virtual path inside the history backend
    history_file: Path | None  # the real file, for the local backend
    history_written: bool

    @property
    def compactions(self) -> tuple[CompactionRecord, ...]:
        return tuple(record for turn in self.turns for record in turn.compactions)

    @property
    def model_calls(self) -> int:
        return sum(turn.model_calls for turn in self.turns)

    @property
    def tool_calls(self) -> int:
        return sum(turn.tool_calls for turn in self.turns)


@dataclass
class Simulation:
    agent: Agent
    user: ScriptedUser
    session_id: str
    model: ScriptedCodingModel | None  # None when a real provider answers
    history: HistoryBackend  # the configured backend (the agent sees its session's view)

    def run(self, turns: int, on_turn: TurnCallback | None = None) -> SimulationOutcome:
        results: list[TurnResult] = []
        last_reply: str | None = None
        for number in range(1, turns + 1):
            message = self.user.next_message(number, last_reply)
            result = self.agent.loop.run_turn(self.session_id, message)
            results.append(result)
            last_reply = result.response.as_message().text() if result.response else None
            if on_turn is not None:
                on_turn(number, result)
        return self._outcome(tuple(results))

    def _outcome(self, turns: tuple[TurnResult, ...]) -> SimulationOutcome:
        store = self.agent.store
        session = store.session(self.session_id)
        assert session is not None  # run_turn created it
        virtual = conversation_history_path(self.session_id)
        history = self.history
        real = history.root / virtual.lstrip("/") if isinstance(history, LocalHistory) else None
        return SimulationOutcome(
            session_id=self.session_id,
            turns=turns,
            session=session,
            stored_messages=len(store.messages(self.session_id)),
            history_path=virtual,
            history_file=real,
            history_written=history.exists(virtual),
        )


SESSION_DIGITS = 8


def new_session_id(seed: int) -> str:
    """A fresh id per run, so rerunning the same seed starts a new session.

    The id is part of the summary text the requests carry; eight random digits are the
    same number of tokens whatever they are, so the figures do not move between runs.
    """
    return f"sim-{seed}-{secrets.randbelow(10**SESSION_DIGITS):0{SESSION_DIGITS}d}"


def scripted_model(
    settings: Settings, seed: int, *, model_latency: float = 0.0
) -> ScriptedCodingModel:
    """The scripted model, refusing requests over the profile's window as the API would."""
    window = Profiles.from_settings(settings).resolve(settings.model).max_input_tokens
    return ScriptedCodingModel(
        seed=seed,
        max_input_tokens=window,
        summary_latency=settings.simulated_summarizer_latency,
        model_latency=model_latency,
    )


def build_simulation(
    settings: Settings,
    *,
    seed: int,
    provider: Provider,
    summarizer_provider: Provider | None = None,
    session_id: str | None = None,
    observers: Sequence[LoopObserver] = (),
    model: ScriptedCodingModel | None = None,
    pacing: Mapping[str, Any] | None = None,
) -> Simulation:
    """The agent for a simulated session, wired as a deployment's.

    ``provider`` answers the agent (the scripted model, possibly wrapped for telemetry,
    or a real provider) and, unless ``summarizer_provider`` is given, the summarizer too:
    the summary goes through the same provider path as in a deployment. ``pacing``
    (``clock``, ``summary_seconds``) puts the pre-summaries on a simulated clock.
    """
    sid = validate_session_id(session_id) if session_id else new_session_id(seed)
    store = open_store(settings)
    configured = history_from_settings(settings, engine=store.engine)
    history = SessionWorkspace(configured, sid)
    agent = build_agent(
        settings,
        provider=provider,
        summarizer_provider=summarizer_provider or provider,
        observers=observers,
        extra_tools=(PretendShell(history, seed).tool(),),
        store=store,
        history=history,
        **(pacing or {}),
    )
    return Simulation(
        agent=agent, user=ScriptedUser(seed), session_id=sid, model=model, history=configured
    )
