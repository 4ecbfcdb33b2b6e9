"""The worker system's logic without services: waiting, fallback, configuration, summarizer.

Redis is replaced by :class:`FakeJobs`, a small in-memory model of a job's keys (result,
error, lease, enqueue mark with TTLs) on a fake clock, so the caller's single-flight loop
is tested step by step: what it publishes, when it re-publishes, when it gives up.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import pickle
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from hango.compaction.extractive import ExtractiveSummarizer
from hango.compaction.jobs import OffloadJob, SummaryJob, SummaryResult
from hango.core.errors import (
    ConfigError,
    InvalidRequestError,
    LeaseBusyError,
    MissingRangeError,
    TransientProviderError,
)
from hango.core.messages import Message, Request, Response, StoredMessage
from hango.core.settings import load_settings
from hango.providers.scripted import ScriptedProvider, text_reply
from hango.queue.celery_config import (
    OFFLOAD_QUEUE,
    OFFLOAD_TASK,
    RETRY_BACKOFF_MAX,
    SUMMARIZE_QUEUE,
    SUMMARIZE_TASK,
    celery_config,
    check_time_limits,
    transient_countdown,
)
from hango.queue.keys import JobKey, range_fingerprint
from hango.queue.queued import QueuedOffloader, QueuedSummarizer, offload_payload
from hango.queue.results import JobState
from hango.queue.waiting import (
    JobFailedError,
    PublishError,
    QueueDeadlineError,
    WaitPolicy,
    await_job,
)
from hango.simulate.model import ScriptedCodingModel
from hango.summarizers.llm import LLMSummarizer
from hango.summarizers.offload import InlineOffloader
from hango_worker.summarizer import (
    check_worker_summarizer,
    load_provider_factory,
    worker_summarizer,
)
from tests.memory_history import MemoryHistory

KEY = JobKey("summary", "s1", 3)
POLICY = WaitPolicy(deadline=10.0, enqueue_ttl=2.0, recheck=0.5)
GOOD_SUMMARY = "A briefing long enough to count as a summary for a fresh agent."


# -- a fake of the job's Redis keys ------------------------------------------------------------


@dataclass
class FakeClock:
    now: float = 0.0
    sleeps: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@dataclass
class FakeJobs:
    """One job's keys with expiry on the fake clock; ``events`` change them at given times."""

    clock: FakeClock
    result: str | None = None
    error: str | None = None
    lease_until: float = float("-inf")
    dispatch_until: float = float("-inf")
    claims: int = 0
    releases: int = 0
    waits: list[float] = field(default_factory=list)
    real_time: bool = False
    events: list[tuple[float, Callable[[FakeJobs], None]]] = field(default_factory=list)

    def _apply_events(self) -> None:
        due = [event for event in self.events if event[0] <= self.clock.now]
        self.events = [event for event in self.events if event[0] > self.clock.now]
        for _, change in due:
            change(self)

    def state(self, key: JobKey) -> JobState:
        self._apply_events()
        now = self.clock.now
        return JobState(self.result, self.error, now < self.lease_until, now < self.dispatch_until)

    def claim_dispatch(self, key: JobKey, ttl_seconds: float) -> bool:
        if self.clock.now < self.dispatch_until:
            return False
        self.dispatch_until = self.clock.now + ttl_seconds
        self.claims += 1
        return True

    def release_dispatch(self, key: JobKey) -> None:
        self.releases += 1
        self.dispatch_until = float("-inf")

    def commit(self, key: JobKey, payload: str) -> str:
        if self.result is None:
            self.result = payload
        return self.result

    def wait_for_commit(self, key: JobKey, timeout: float) -> bool:
        """Like BLPOP on the done list: wakes at the event that commits, else at the timeout."""
        if self.real_time:
            time.sleep(timeout)  # a caller on the real clock (the ports do not take a clock)
            return False
        until = self.clock.now + timeout
        self.waits.append(timeout)
        for when, _ in sorted(self.events, key=lambda event: event[0]):
            if when > until:
                break
            self.clock.now = max(self.clock.now, when)
            self._apply_events()
            if self.result is not None or self.error is not None:
                return True
        self.clock.now = until
        return False

    def at(self, when: float, change: Callable[[FakeJobs], None]) -> None:
        self.events.append((when, change))


def publishes(clock: FakeClock) -> tuple[list[float], Callable[[float], None]]:
    """A publish function recording when it was called."""
    times: list[float] = []

    def publish(remaining: float) -> None:
        times.append(clock.now)

    return times, publish


def wait(jobs: FakeJobs, clock: FakeClock, publish: Callable[[float], object]) -> str:
    return await_job(jobs, KEY, publish, POLICY, clock=clock)


def committed(text: str) -> Callable[[FakeJobs], None]:
    def change(jobs: FakeJobs) -> None:
        jobs.result = text

    return change


def leased_for(seconds: float) -> Callable[[FakeJobs], None]:
    def change(jobs: FakeJobs) -> None:
        jobs.lease_until = jobs.clock.now + seconds

    return change


# -- the caller's single-flight wait -----------------------------------------------------------


def test_a_committed_result_is_returned_without_publishing() -> None:
    clock = FakeClock()
    jobs = FakeJobs(clock, result="cached")
    times, publish = publishes(clock)
    assert wait(jobs, clock, publish) == "cached"
    assert times == []
    assert jobs.waits == []


def test_publishes_once_then_wakes_the_moment_the_worker_commits() -> None:
    clock = FakeClock()
    jobs = FakeJobs(clock)
    jobs.at(0.05, leased_for(100))  # the worker picks it up and keeps its lease alive
    jobs.at(3.01, committed("from the worker"))
    times, publish = publishes(clock)

    assert wait(jobs, clock, publish) == "from the worker"
    assert times == [0.0]
    # Woken by the commit itself, not at the next poll; blocked at most `recheck` at a time.
    assert clock.now == pytest.approx(3.01)
    assert max(jobs.waits) == pytest.approx(POLICY.recheck)


def test_republishes_when_the_lease_holder_died_and_the_enqueue_mark_expired() -> None:
    clock = FakeClock()
    jobs = FakeJobs(clock)
    jobs.at(0.05, leased_for(1.5))  # the worker dies: its lease is never extended
    times, publish = publishes(clock)
    jobs.at(6.0, committed("second try"))

    assert wait(jobs, clock, publish) == "second try"
    # Lease gone at 1.55, enqueue mark (2 s) gone at 2.0: the next poll publishes again,
    # and again every 2 s while nobody takes the job.
    assert len(times) >= 2
    assert times[1] >= 2.0
    assert all(later - earlier >= 2.0 for earlier, later in itertools.pairwise(times))


def test_never_republishes_while_a_live_worker_holds_the_lease() -> None:
    clock = FakeClock()
    jobs = FakeJobs(clock)
    jobs.at(0.05, leased_for(100))
    jobs.at(9.0, committed("slow but alive"))
    times, publish = publishes(clock)
    assert wait(jobs, clock, publish) == "slow but alive"
    assert times == [0.0]


def test_gives_up_at_the_deadline_without_sleeping_past_it() -> None:
    clock = FakeClock()
    jobs = FakeJobs(clock)
    jobs.at(0.05, leased_for(100))
    _, publish = publishes(clock)
    with pytest.raises(QueueDeadlineError, match="no result within 10 s"):
        wait(jobs, clock, publish)
    assert clock.now == pytest.approx(POLICY.deadline)


def test_a_failure_recorded_by_the_worker_ends_the_wait_at_once() -> None:
    clock = FakeClock()
    jobs = FakeJobs(clock)
    jobs.at(0.3, lambda j: setattr(j, "error", "MissingRangeError: gone"))
    _, publish = publishes(clock)
    with pytest.raises(JobFailedError, match="MissingRangeError: gone"):
        wait(jobs, clock, publish)
    assert clock.now < 1


def test_a_failed_publish_releases_the_enqueue_mark() -> None:
    clock = FakeClock()
    jobs = FakeJobs(clock)

    def broken(remaining: float) -> None:
        raise ConnectionRefusedError("broker down")

    with pytest.raises(PublishError, match="broker down"):
        wait(jobs, clock, broken)
    assert jobs.claims == 1
    assert jobs.releases == 1
    assert not jobs.state(KEY).dispatched


# -- the queued ports fall back, and agree on one result ---------------------------------------


def stored(count: int = 4) -> tuple[StoredMessage, ...]:
    roles = ("user", "assistant")
    return tuple(
        StoredMessage(seq=i + 1, turn=1, message=Message(role=roles[i % 2], content=f"message {i}"))
        for i in range(count)
    )


def summary_job() -> SummaryJob:
    evicted = stored()
    return SummaryJob(
        session_id="s1",
        turn=3,
        from_seq=1,
        to_seq=4,
        previous_summary=None,
        evicted=evicted,
        model="m",
    )


@dataclass
class RecordingDispatcher:
    sent: list[tuple[str, dict[str, object], float]] = field(default_factory=list)

    def dispatch(self, task: str, kwargs: dict[str, object], *, expires: float) -> str:
        self.sent.append((task, kwargs, expires))
        return f"id-{len(self.sent)}"


class DownJobs:
    """Redis refusing every connection."""

    def state(self, key: JobKey) -> JobState:
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    def commit(self, key: JobKey, payload: str) -> str:
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    def claim_dispatch(self, key: JobKey, ttl_seconds: float) -> bool:
        raise AssertionError("never reached")

    def release_dispatch(self, key: JobKey) -> None:
        raise AssertionError("never reached")

    def wait_for_commit(self, key: JobKey, timeout: float) -> bool:
        raise AssertionError("never reached")


def queued_summarizer(jobs: object, fallback_text: str = GOOD_SUMMARY) -> QueuedSummarizer:
    inline = LLMSummarizer(ScriptedProvider(fallback=lambda r: text_reply(fallback_text)))
    return QueuedSummarizer(
        cache=jobs,  # type: ignore[arg-type]
        dispatcher=RecordingDispatcher(),
        policy=WaitPolicy(deadline=0.05, enqueue_ttl=1.0, recheck=0.01),
        fallback=inline,
    )


def test_redis_down_falls_back_inline_and_records_why() -> None:
    result = queued_summarizer(DownJobs()).summarize(summary_job())
    assert result.text == GOOD_SUMMARY
    assert result.summarizer == "llm"
    assert result.fallback_reason is not None
    assert result.fallback_reason.startswith("redis_unavailable: ")
    assert "Connection refused" in result.fallback_reason


def test_the_inline_fallback_of_the_fallback_keeps_both_reasons() -> None:
    result = queued_summarizer(DownJobs(), fallback_text="").summarize(summary_job())
    assert result.summarizer == "extractive"
    assert result.fallback_reason is not None
    assert result.fallback_reason.startswith("redis_unavailable: ")
    assert result.fallback_reason.endswith("; empty summary")


def test_after_a_deadline_the_fallback_summary_is_committed_for_the_whole_turn() -> None:
    jobs = FakeJobs(FakeClock(), real_time=True)
    summarizer = queued_summarizer(jobs)
    first = summarizer.summarize(summary_job())
    assert first.fallback_reason is not None
    assert first.fallback_reason.startswith("queue_deadline: ")
    assert jobs.result is not None
    assert SummaryResult.model_validate_json(jobs.result) == first

    sent = summarizer.dispatcher.sent  # type: ignore[attr-defined]
    assert [(task, kwargs) for task, kwargs, _ in sent] == [
        (
            SUMMARIZE_TASK,
            {
                "session_id": "s1",
                "turn": 3,
                "from_seq": 1,
                "to_seq": 4,
                "previous_digest": "",
                "model": "m",
                "fingerprint": range_fingerprint(summary_job().evicted),
            },
        )
    ]
    # The arguments are ids and a digest, never the transcript itself.
    assert len(json.dumps(sent[0][1])) < 300


def test_a_budgeted_summary_goes_to_the_workers_with_its_budget() -> None:
    """A briefing's length budget is a number in the task's arguments (and its key), so
    every summary still runs on the worker pool; only a hard cap is asked in-process."""
    jobs = FakeJobs(FakeClock(), real_time=True)
    summarizer = queued_summarizer(jobs)
    summarizer.summarize(summary_job().model_copy(update={"budget": 700}))

    ((task, kwargs, _),) = summarizer.dispatcher.sent  # type: ignore[attr-defined]
    assert task == SUMMARIZE_TASK
    assert kwargs["budget"] == 700


def test_a_worker_result_committed_first_wins_over_the_fallback() -> None:
    worker = SummaryResult(text="worker text", summarizer="worker:llm")

    class LateWorker(FakeJobs):
        def commit(self, key: JobKey, payload: str) -> str:
            self.result = self.result or worker.model_dump_json()  # landed just before us
            return super().commit(key, payload)

    result = queued_summarizer(LateWorker(FakeClock())).summarize(summary_job())
    assert result == worker


def test_offloader_falls_back_when_the_worker_wrote_where_this_host_cannot_read() -> None:
    history = MemoryHistory()
    jobs = FakeJobs(FakeClock(), result=offload_payload("/conversation_history/s1.md"))
    offloader = QueuedOffloader(
        cache=jobs,
        dispatcher=RecordingDispatcher(),
        policy=POLICY,
        fallback=InlineOffloader(history),
        history=history,
    )
    evicted = stored()
    job = OffloadJob(session_id="s1", turn=3, from_seq=1, to_seq=4, evicted=evicted)

    path = offloader.offload(job)

    assert path == "/conversation_history/s1.md"
    assert "message 3" in history.read(path)  # written here, by the fallback


def test_offloader_trusts_a_visible_worker_result_without_writing() -> None:
    history = MemoryHistory()
    history.write("/conversation_history/s1.md", "written by the worker\n")
    jobs = FakeJobs(FakeClock(), result=offload_payload("/conversation_history/s1.md"))
    offloader = QueuedOffloader(
        cache=jobs,
        dispatcher=RecordingDispatcher(),
        policy=POLICY,
        fallback=InlineOffloader(history),
        history=history,
    )
    job = OffloadJob(session_id="s1", turn=3, from_seq=1, to_seq=4, evicted=stored())
    assert offloader.offload(job) == "/conversation_history/s1.md"
    assert history.read("/conversation_history/s1.md") == "written by the worker\n"


# -- configuration ------------------------------------------------------------------------------


def test_celery_config_is_reliable_json_only_and_routes_each_task_to_its_queue() -> None:
    conf = celery_config(load_settings(redis_url="redis://127.0.0.1:6379/3"))
    assert conf["broker_url"] == conf["result_backend"] == "redis://127.0.0.1:6379/3"
    assert conf["accept_content"] == ["json"]
    assert conf["task_serializer"] == conf["result_serializer"] == "json"
    assert conf["task_acks_late"] and conf["task_reject_on_worker_lost"]
    assert conf["task_acks_on_failure"] and conf["task_acks_on_timeout"]
    assert conf["worker_prefetch_multiplier"] == 1
    # Cancelled on a lost connection, a task was acked as revoked: its job was dropped.
    assert conf["worker_cancel_long_running_tasks_on_connection_loss"] is False
    assert conf["worker_send_task_events"] and not conf["task_send_sent_event"]
    visibility = conf["visibility_timeout"]
    assert conf["broker_transport_options"]["visibility_timeout"] == visibility
    assert conf["result_backend_transport_options"]["visibility_timeout"] == visibility
    # A sweep's lock left by a killed worker holds redelivery back one interval, not 300 s.
    restore = conf["broker_transport_options"]
    assert restore["unacked_mutex_expire"] == restore["unacked_restore_interval"]
    assert conf["task_soft_time_limit"] < conf["task_time_limit"] < visibility
    assert conf["task_routes"][SUMMARIZE_TASK] == {"queue": SUMMARIZE_QUEUE}
    assert conf["task_routes"][OFFLOAD_TASK] == {"queue": OFFLOAD_QUEUE}
    queues = {queue.name: queue for queue in conf["task_queues"]}
    assert queues[SUMMARIZE_QUEUE].exchange.name != queues[OFFLOAD_QUEUE].exchange.name
    assert queues[OFFLOAD_QUEUE].routing_key == OFFLOAD_QUEUE


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"summarizer_timeout": 95.0}, "HANGO_SUMMARIZER_TIMEOUT"),
        ({"worker_soft_time_limit": 130.0}, "HANGO_WORKER_SOFT_TIME_LIMIT"),
        ({"worker_time_limit": 700.0}, "HANGO_WORKER_TIME_LIMIT"),
        ({"queue_lease_ttl": 600.0}, "HANGO_QUEUE_LEASE_TTL"),
    ],
)
def test_limits_that_do_not_nest_fail_naming_the_variable(
    overrides: dict[str, float], variable: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        check_time_limits(load_settings(**overrides))
    assert caught.value.variable == variable
    assert variable in str(caught.value)


def test_the_queue_needs_a_redis_url() -> None:
    with pytest.raises(ConfigError, match="HANGO_REDIS_URL"):
        celery_config(load_settings(redis_url=None))


def test_embedded_default_never_imports_the_queue(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from hango.wiring.agent import build_agent\n"
        "from hango.core.settings import load_settings\n"
        "from hango.providers.scripted import ScriptedProvider\n"
        f"settings = load_settings(database_url='sqlite:///{tmp_path}/h.db', "
        f"history_root='{tmp_path}/history', redis_url=None, estimator='heuristic')\n"
        "build_agent(settings, provider=ScriptedProvider())\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('celery', 'kombu', 'redis')"
        " or m.startswith('hango.queue')]\n"
        "assert not loaded, loaded\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, completed.stderr


# -- the worker's summarizer -----------------------------------------------------------------


def test_worker_summarizer_choices() -> None:
    assert isinstance(
        worker_summarizer(load_settings(worker_summarizer="extractive")), ExtractiveSummarizer
    )
    chosen = worker_summarizer(
        load_settings(worker_summarizer="tests.unit.queue.test_queue:scripted_summary_provider")
    )
    assert isinstance(chosen, LLMSummarizer)
    assert chosen.summarize(summary_job()).text == GOOD_SUMMARY


def test_the_simulated_worker_summarizer_is_the_simulations_scripted_one() -> None:
    summarizer = worker_summarizer(load_settings(worker_summarizer="simulated"))
    assert isinstance(summarizer, LLMSummarizer)

    result = summarizer.summarize(summary_job())

    assert result.fallback_reason is None and result.summarizer == "llm"
    # The same text the simulation's scripted model writes in-process for that job.
    in_process = LLMSummarizer(ScriptedCodingModel()).summarize(summary_job())
    assert result.text == in_process.text and "## Next step" in result.text


def test_a_worker_without_the_key_its_summarizer_needs_refuses_to_start() -> None:
    settings = load_settings(worker_summarizer="anthropic", anthropic_api_key=None)
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY") as caught:
        check_worker_summarizer(settings)
    assert caught.value.variable == "ANTHROPIC_API_KEY"
    # Choices that need no key pass; a bad factory fails like the summarizer itself.
    check_worker_summarizer(load_settings(worker_summarizer="simulated"))
    check_worker_summarizer(load_settings(worker_summarizer="extractive"))
    check_worker_summarizer(load_settings(worker_summarizer="anthropic", anthropic_api_key="k"))
    with pytest.raises(ConfigError, match="cannot load"):
        check_worker_summarizer(load_settings(worker_summarizer="nowhere_at_all:make"))


def test_the_worker_process_exits_with_one_line_naming_the_variable(tmp_path: Path) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("HANGO_") and key != "ANTHROPIC_API_KEY"
    }
    env.update(
        HANGO_REDIS_URL="redis://127.0.0.1:1/0",  # never contacted: it exits before
        HANGO_WORKER_SUMMARIZER="anthropic",
        HANGO_QUEUE_SECRET="x" * 32,
        PYTHONPATH=str(Path(__file__).resolve().parents[3]),
    )

    def start(queues: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "celery", "-A", "hango_worker", "worker", "-Q", queues],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
            cwd=tmp_path,
        )

    refused = start("summarize,offload")

    assert refused.returncode == 78 and "Traceback" not in refused.stderr
    named = [line for line in refused.stderr.splitlines() if "HANGO_WORKER_SUMMARIZER" in line]
    assert len(named) == 1 and "ANTHROPIC_API_KEY" in named[0], refused.stderr
    assert named[0] == refused.stderr.strip().splitlines()[-1]


def scripted_summary_provider(settings: object) -> ScriptedProvider:
    return ScriptedProvider(fallback=lambda request: text_reply(GOOD_SUMMARY))


@pytest.mark.parametrize(
    ("spec", "detail"),
    [
        ("openai", "expected 'anthropic', 'extractive', 'simulated' or 'package.module:factory'"),
        ("no_such_module_here:make", "cannot load"),
        ("tests.unit.queue.test_queue:missing", "cannot load"),
        ("tests.unit.queue.test_queue:GOOD_SUMMARY", "is not callable"),
    ],
)
def test_a_bad_worker_summarizer_fails_naming_the_variable(spec: str, detail: str) -> None:
    with pytest.raises(ConfigError, match=detail) as caught:
        load_provider_factory(spec)
    assert caught.value.variable == "HANGO_WORKER_SUMMARIZER"


def replying(*replies: Response | BaseException) -> LLMSummarizer:
    return LLMSummarizer(ScriptedProvider(list(replies)), retry_transient=True)


def test_task_summarizer_raises_transient_errors_for_the_task_to_retry() -> None:
    with pytest.raises(TransientProviderError):
        replying(TransientProviderError("overloaded", status=529)).summarize(summary_job())


def test_task_summarizer_falls_back_to_extractive_on_what_a_retry_cannot_fix() -> None:
    permanent = replying(InvalidRequestError("bad", status=400)).summarize(summary_job())
    assert permanent.summarizer == "extractive"
    assert permanent.fallback_reason is not None
    assert "InvalidRequestError" in permanent.fallback_reason

    short = replying(text_reply("ok")).summarize(summary_job())
    assert short.summarizer == "extractive"
    assert short.fallback_reason == "summary too short (2 characters)"

    good = LLMSummarizer(ScriptedProvider([text_reply(GOOD_SUMMARY)]), retry_transient=True)
    result = good.summarize(summary_job())
    assert (result.text, result.summarizer, result.fallback_reason) == (GOOD_SUMMARY, "llm", None)
    sent: Request = good.provider.requests[0]  # type: ignore[attr-defined]
    assert sent.model == "m"


# -- small contracts -----------------------------------------------------------------------------


def test_job_keys_share_the_session_hash_tag_and_differ_by_kind_and_turn() -> None:
    summary = JobKey("summary", "s1", 3)
    assert summary.result == "hango:summary:{s1}:3:result"
    assert {summary.lease, summary.enqueue, summary.error} == {
        "hango:summary:{s1}:3:lease",
        "hango:summary:{s1}:3:enqueue",
        "hango:summary:{s1}:3:error",
    }
    assert JobKey("offload", "s1", 3).result != summary.result
    assert JobKey("summary", "s1", 4).result != summary.result


@pytest.mark.parametrize(
    "error",
    [
        LeaseBusyError("hango:summary:{s1}:3:lease"),
        QueueDeadlineError("no result"),
        JobFailedError("failed"),
        PublishError("broker down"),
        MissingRangeError("missing"),
    ],
)
def test_queue_errors_pickle_with_their_fields(error: Exception) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)


def test_a_worker_refuses_a_range_that_differs_from_the_one_the_agent_evicted(
    tmp_path: Path,
) -> None:
    from hango.core.errors import HangoError
    from hango.core.messages import Message
    from hango.store import Store
    from hango_worker.execution import load_checked_range

    store = Store.from_url(f"sqlite:///{tmp_path / 'worker.db'}")
    store.migrate()
    store.ensure_session("reused", "m")
    store.append_message("reused", 1, Message(role="user", content="a different conversation"))
    theirs = tuple(store.messages("reused", 1, 1))
    agent_side = (dataclasses.replace(theirs[0], message=Message(role="user", content="mine")),)

    assert load_checked_range(store, "reused", 1, 1, range_fingerprint(theirs)) == theirs
    with pytest.raises(HangoError, match="differ from the ones the agent evicted"):
        load_checked_range(store, "reused", 1, 1, range_fingerprint(agent_side))
    assert (
        JobKey("summary", "reused", 1, (1, 1), range_fingerprint(theirs)).result
        != JobKey("summary", "reused", 1, (1, 1), range_fingerprint(agent_side)).result
    )


def test_transient_back_off_doubles_keeps_at_least_half_and_stays_under_the_cap() -> None:
    rng = random.Random(5)
    for retries in range(8):
        ceiling = min(RETRY_BACKOFF_MAX, 2 * 2**retries)
        countdowns = [transient_countdown(retries, rng) for _ in range(200)]
        assert ceiling / 2 <= min(countdowns) and max(countdowns) <= ceiling
