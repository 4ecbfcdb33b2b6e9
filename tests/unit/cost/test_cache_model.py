"""Prompt-cache simulator: hand-built request sequences whose cache outcome is known."""

from __future__ import annotations

import pytest

from hango.core.messages import (
    Message,
    Request,
    TextBlock,
    ThinkingBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from hango.core.price import Price
from hango.core.profiles import Profiles
from hango.cost.cache_model import (
    CacheBlock,
    CacheLedger,
    CacheReport,
    CacheUsage,
    PrefixCache,
    TooManyBreakpointsError,
    WireBlock,
    blocks_from_request,
    checked_breakpoints,
    format_reports,
    lookback_positions,
)

MIN = 1024


def blocks(count: int, tokens: int = 100, *, tag: str = "b") -> list[CacheBlock]:
    """``count`` distinct blocks ``tag0``, ``tag1``... of ``tokens`` tokens each."""
    return [CacheBlock(key=f"{tag}{i}", tokens=tokens) for i in range(count)]


def cache() -> PrefixCache:
    return PrefixCache(min_tokens=MIN)


# --- Reads and writes ---------------------------------------------------------------


def test_first_call_writes_and_the_next_reads_what_it_wrote() -> None:
    prefix = cache()
    first = prefix.simulate(blocks(30), [19])
    assert first == CacheUsage(read=0, write=2000, uncached=1000)
    second = prefix.simulate(blocks(35), [29])
    assert second == CacheUsage(read=2000, write=1000, uncached=500)
    assert second.prompt == 3500


def test_no_breakpoint_means_no_caching() -> None:
    assert cache().simulate(blocks(30), []) == CacheUsage(read=0, write=0, uncached=3000)


def test_a_breakpoint_on_an_already_written_prefix_writes_nothing() -> None:
    prefix = cache()
    prefix.simulate(blocks(20), [19])
    assert prefix.simulate(blocks(20), [19]) == CacheUsage(read=2000, write=0, uncached=0)


# --- Look-back ----------------------------------------------------------------------


def test_hit_within_the_20_block_look_back() -> None:
    prefix = cache()
    prefix.simulate(blocks(40), [10])
    # Position 10 is 20 positions before the breakpoint at 30.
    assert prefix.simulate(blocks(40), [30]) == CacheUsage(read=1100, write=2000, uncached=900)


def test_miss_beyond_the_look_back() -> None:
    prefix = cache()
    prefix.simulate(blocks(40), [10])
    assert prefix.simulate(blocks(40), [31]) == CacheUsage(read=0, write=3200, uncached=800)


def test_an_intermediate_breakpoint_reaches_an_entry_the_last_one_cannot() -> None:
    prefix = cache()
    prefix.simulate(blocks(40), [10])
    usage = prefix.simulate(blocks(40), [20, 31])
    assert usage == CacheUsage(read=1100, write=2100, uncached=800)
    # Both breakpoints were written: a later call hits the longer one.
    assert prefix.simulate(blocks(40), [31]).read == 3200


def test_the_longest_hit_over_all_breakpoints_is_read() -> None:
    prefix = cache()
    prefix.simulate(blocks(40), [12, 25])
    assert prefix.simulate(blocks(40), [15, 30]).read == 2600


def test_a_run_of_tool_results_counts_as_one_look_back_position() -> None:
    head = blocks(3)
    run = [CacheBlock(key=f"r{i}", tokens=100, run="tool_result") for i in range(25)]
    flat = [CacheBlock(key=f"r{i}", tokens=100) for i in range(25)]
    text = CacheBlock(key="text", tokens=100)
    assert len(list(lookback_positions([*head, *run, text], 28))) == 29
    # Block 2 is 2 positions back across the run, 26 positions back without it.
    for middle, read in ((run, 300), (flat, 0)):
        prefix = PrefixCache(min_tokens=300)
        prefix.simulate(head, [2])
        assert prefix.simulate([*head, *middle, text], [28]).read == read


def test_lookback_positions_stop_at_the_first_block() -> None:
    assert list(lookback_positions(blocks(5), 4)) == [4, 3, 2, 1, 0]
    assert list(lookback_positions(blocks(5), 4, limit=2)) == [4, 3, 2]


# --- Minimum length -----------------------------------------------------------------


def test_miss_below_the_minimum_length_and_nothing_is_written() -> None:
    prefix = cache()
    small = blocks(10, tokens=102)  # 1,020 tokens < 1,024
    assert prefix.simulate(small, [9]) == CacheUsage(read=0, write=0, uncached=1020)
    assert len(prefix) == 0
    assert prefix.simulate(small, [9]) == CacheUsage(read=0, write=0, uncached=1020)


def test_a_prefix_of_exactly_the_minimum_is_cached() -> None:
    prefix = PrefixCache(min_tokens=1000)
    assert prefix.simulate(blocks(10), [9]).write == 1000
    assert prefix.simulate(blocks(10), [9]).read == 1000


def test_only_breakpoints_above_the_minimum_are_written() -> None:
    prefix = cache()
    assert prefix.simulate(blocks(20), [5, 19]).write == 2000
    assert len(prefix) == 1  # the 600-token prefix at 5 was not written


def test_the_cache_takes_its_minimum_from_the_profile() -> None:
    assert PrefixCache.for_profile(Profiles().resolve("claude-opus-4-6")).min_tokens == 4096


# --- Identity -----------------------------------------------------------------------


def test_a_changed_early_block_invalidates_everything_after_it() -> None:
    prefix = cache()
    prefix.simulate(blocks(30), [15, 29])
    edited = blocks(30)
    edited[2] = CacheBlock(key="edited", tokens=100)
    assert prefix.simulate(edited, [15, 29]) == CacheUsage(read=0, write=3000, uncached=0)


def test_a_changed_late_block_keeps_the_prefix_before_it() -> None:
    prefix = cache()
    prefix.simulate(blocks(30), [15, 29])
    edited = blocks(30)
    edited[20] = CacheBlock(key="edited", tokens=100)
    assert prefix.simulate(edited, [15, 29]).read == 1600


# --- Breakpoint limits --------------------------------------------------------------


def test_four_breakpoints_are_accepted_and_five_rejected() -> None:
    assert checked_breakpoints(blocks(30), [29, 5, 10, 20, 29]) == (5, 10, 20, 29)
    with pytest.raises(TooManyBreakpointsError):
        cache().simulate(blocks(30), [5, 10, 15, 20, 29])


def test_marked_blocks_are_the_default_breakpoints() -> None:
    marked = [CacheBlock(key=f"b{i}", tokens=100, marked=i in {12, 19}) for i in range(25)]
    assert checked_breakpoints(marked) == (12, 19)
    assert cache().simulate(marked) == CacheUsage(read=0, write=2000, uncached=500)
    five = [CacheBlock(key=f"b{i}", tokens=100, marked=i < 5) for i in range(10)]
    with pytest.raises(TooManyBreakpointsError):
        cache().simulate(five)


def test_a_breakpoint_outside_the_blocks_is_an_error() -> None:
    with pytest.raises(ValueError, match="outside"):
        cache().simulate(blocks(3), [3])


# --- TTL ----------------------------------------------------------------------------


def test_reads_refresh_the_ttl_and_an_idle_entry_expires() -> None:
    prefix = PrefixCache(min_tokens=MIN, ttl_seconds=300.0)
    assert prefix.simulate(blocks(20), [19], now=0.0).write == 2000
    assert prefix.simulate(blocks(20), [19], now=299.0).read == 2000
    assert prefix.simulate(blocks(20), [19], now=598.0).read == 2000  # refreshed at 299
    expired = prefix.simulate(blocks(20), [19], now=898.0)  # idle for exactly 300 s
    assert expired == CacheUsage(read=0, write=2000, uncached=0)


def test_without_timestamps_entries_never_expire() -> None:
    prefix = PrefixCache(min_tokens=MIN, ttl_seconds=1.0)
    prefix.simulate(blocks(20), [19])
    assert prefix.simulate(blocks(20), [19], now=1e9).read == 2000


# --- Ledger -------------------------------------------------------------------------


PRICE = Price(base_input=4.0, cache_write_5m=5.0, cache_read=0.5, output=20.0)


def test_ledger_ratios_and_costs_are_exact() -> None:
    ledger = CacheLedger()
    ledger.add(CacheUsage(read=0, write=1_000_000, uncached=0))
    ledger.add(CacheUsage(read=3_000_000, write=0, uncached=0))
    ledger.add(CacheUsage(read=0, write=0, uncached=1_000_000))
    report = ledger.report
    assert (report.requests, report.prompt_tokens) == (3, 5_000_000)
    assert (report.read_ratio, report.write_ratio, report.uncached_ratio) == (0.6, 0.2, 0.2)
    assert report.input_cost_usd(PRICE) == 1.5 + 5.0 + 4.0
    assert report.uncached_cost_usd(PRICE) == 20.0
    assert report.relative_input_cost(PRICE) == 0.525


def test_an_empty_report_has_zero_ratios_and_relative_cost_one() -> None:
    report = CacheReport()
    assert (report.read_ratio, report.input_cost_usd(PRICE)) == (0.0, 0.0)
    assert report.relative_input_cost(PRICE) == 1.0


def test_relative_cost_follows_the_published_multipliers() -> None:
    # 0.966 read at 0.1x plus 0.034 written at 1.25x (the multipliers of Anthropic's
    # prompt-caching docs, https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching)
    # is 0.0966 + 0.0425 = 0.139 of the all-uncached cost.
    report = CacheReport(requests=1, read_tokens=966, write_tokens=34, uncached_tokens=0)
    assert report.relative_input_cost(
        Price(base_input=1.0, cache_write_5m=1.25, cache_read=0.1, output=5.0)
    ) == pytest.approx(0.139, abs=5e-4)


def test_recorded_usage_with_and_without_cache_fields() -> None:
    ledger = CacheLedger()
    ledger.add_usage(Usage(input_tokens=10, cache_read_input_tokens=80, output_tokens=7))
    ledger.add_usage(Usage(input_tokens=5, cache_creation_input_tokens=0, output_tokens=1))
    ledger.add_usage(Usage(input_tokens=30, output_tokens=2))
    assert ledger.report == CacheReport(
        requests=3, read_tokens=80, write_tokens=0, uncached_tokens=45, unreported=1
    )
    usage = Usage(input_tokens=3, cache_read_input_tokens=5, cache_creation_input_tokens=7)
    assert CacheUsage.from_usage(usage).prompt == usage.total_input_tokens() == 15


def test_recorded_and_simulated_side_by_side() -> None:
    recorded = CacheReport(requests=2, read_tokens=3_000_000, write_tokens=1_000_000)
    simulated = CacheReport(requests=2, read_tokens=2_000_000, write_tokens=2_000_000)
    table = format_reports({"recorded": recorded, "simulated": simulated}, PRICE).splitlines()
    assert len(table) == 3
    row = ["recorded", "2", "4,000,000", "0.750", "0.250", "0.0000", "6.5000", "0.406"]
    assert table[1].split() == row
    assert table[2].split()[0] == "simulated"


# --- From a wire Request ------------------------------------------------------------


def size_of(block: WireBlock) -> int:
    """Every wire block weighs 300 tokens: the sizes are not under test here."""
    return 300


def conversation(*extra: Message, system: str | tuple[TextBlock, ...] = "Be brief.") -> Request:
    return Request(
        model="claude-sonnet-4-5",
        max_tokens=100,
        tools=(
            ToolDefinition(name="read", description="Read a file."),
            ToolDefinition(name="grep", description="Search files."),
        ),
        system=system,
        messages=(Message(role="user", content="Fix the bug."), *extra),
    )


MARK = {"cache_control": {"type": "ephemeral"}}

TOOL_TURN = Message(
    role="assistant",
    content=(
        TextBlock(text="Reading both."),
        ToolUseBlock(id="t1", name="read", input={"path": "a.py"}),
        ToolUseBlock(id="t2", name="read", input={"path": "b.py"}),
    ),
)


def results(*, marked: bool) -> Message:
    last = ToolResultBlock.model_validate(
        {"type": "tool_result", "tool_use_id": "t2", "content": "b", **(MARK if marked else {})}
    )
    return Message(role="user", content=(ToolResultBlock(tool_use_id="t1", content="a"), last))


def test_blocks_follow_tools_system_messages_order() -> None:
    flat = blocks_from_request(conversation(TOOL_TURN, results(marked=True)), size_of)
    assert len(flat) == 2 + 1 + 1 + 3 + 2
    assert [b.marked for b in flat] == [False] * 8 + [True]
    assert [b.run for b in flat[4:]] == [None, "tool_use", "tool_use"] + ["tool_result"] * 2
    assert {b.tokens for b in flat} == {300}
    assert len({b.key for b in flat}) == len(flat)


def test_precomputed_sizes_must_match_the_blocks() -> None:
    request = conversation()
    assert [b.tokens for b in blocks_from_request(request, [1, 2, 3, 4])] == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="3 sizes for 4 blocks"):
        blocks_from_request(request, [1, 2, 3])


def test_markers_do_not_change_identity() -> None:
    marked = blocks_from_request(conversation(TOOL_TURN, results(marked=True)), size_of)
    plain = blocks_from_request(conversation(TOOL_TURN, results(marked=False)), size_of)
    assert [b.key for b in marked] == [b.key for b in plain]
    nested = ToolResultBlock.model_validate(
        {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "b"}]}
    )
    nested_marked = ToolResultBlock.model_validate(
        {
            "type": "tool_result",
            "tool_use_id": "t2",
            "content": [{"type": "text", "text": "b", **MARK}],
        }
    )
    one = blocks_from_request(conversation(Message(role="user", content=(nested,))), size_of)
    two = blocks_from_request(conversation(Message(role="user", content=(nested_marked,))), size_of)
    assert [b.key for b in one] == [b.key for b in two]
    assert (one[-1].marked, two[-1].marked) == (False, True)


def test_plain_strings_and_single_text_blocks_are_the_same_block() -> None:
    as_string = blocks_from_request(conversation(system="Be brief."), size_of)
    as_blocks = blocks_from_request(conversation(system=(TextBlock(text="Be brief."),)), size_of)
    assert [b.key for b in as_string] == [b.key for b in as_blocks]


def test_message_boundaries_and_json_key_order_are_part_of_identity() -> None:
    one_message = conversation(Message(role="assistant", content="a\nb"))
    split = Request(
        model="m",
        max_tokens=1,
        messages=(Message(role="user", content="x"), Message(role="user", content="y")),
    )
    joined = Request(
        model="m",
        max_tokens=1,
        messages=(Message(role="user", content=(TextBlock(text="x"), TextBlock(text="y"))),),
    )
    assert blocks_from_request(split, size_of)[1].key != blocks_from_request(joined, size_of)[1].key
    reordered = Message(
        role="assistant",
        content=(ToolUseBlock(id="t", name="grep", input={"b": 2, "a": 1}),),
    )
    ordered = Message(
        role="assistant",
        content=(ToolUseBlock(id="t", name="grep", input={"a": 1, "b": 2}),),
    )
    keys = {blocks_from_request(conversation(m), size_of)[-1].key for m in (ordered, reordered)}
    assert len(keys) == 2
    assert blocks_from_request(one_message, size_of)[-1].run is None


def test_automatic_caching_marks_the_last_cacheable_block() -> None:
    body = conversation(
        Message(role="assistant", content=(TextBlock(text="Done."), ThinkingBlock(thinking="t")))
    ).to_api()
    request = Request.model_validate({**body, "cache_control": {"type": "ephemeral"}})
    flat = blocks_from_request(request, size_of)
    assert [i for i, b in enumerate(flat) if b.marked] == [len(flat) - 2]


def test_automatic_caching_needs_a_free_slot() -> None:
    tools = tuple(
        ToolDefinition.model_validate({"name": f"t{i}", "input_schema": {}, **MARK})
        for i in range(4)
    )
    body = conversation().model_copy(update={"tools": tools}).to_api()
    four = Request.model_validate(body)
    assert sum(b.marked for b in blocks_from_request(four, size_of)) == 4
    with pytest.raises(TooManyBreakpointsError, match="free slot"):
        blocks_from_request(Request.model_validate({**body, **MARK}), size_of)


def test_a_growing_conversation_reads_what_the_previous_turn_wrote() -> None:
    prefix = PrefixCache.for_profile(Profiles().resolve("claude-sonnet-4-5-20250929"))
    first = conversation(TOOL_TURN, results(marked=True))
    assert prefix.simulate(blocks_from_request(first, size_of)) == CacheUsage(0, 2700, 0)
    answer = Message(role="assistant", content="Fixed.")
    thanks = Message.model_validate(
        {"role": "user", "content": [{"type": "text", "text": "Thanks", **MARK}]}
    )
    second = conversation(TOOL_TURN, results(marked=False), answer, thanks)
    assert prefix.simulate(blocks_from_request(second, size_of)) == CacheUsage(2700, 600, 0)
