"""Request bodies read incrementally: only what the session's previous body did not send
is parsed, and the result is always what parsing the whole body gives."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hango.compaction import outgoing
from hango.compaction.outgoing import OutgoingCopy
from hango.core import messages as messages_module
from hango.core.messages import Message, Request, StoredMessage, message_json
from hango.gateway.body import Bodies, BodyError
from hango.gateway.upstream import upstream_body
from tests.properties import examples


def history(count: int, text: str = "step") -> list[dict[str, Any]]:
    roles = ("user", "assistant")
    return [
        {"role": roles[i % 2], "content": [{"type": "text", "text": f"{text} {i}"}]}
        for i in range(count)
    ]


def marked(message: dict[str, Any]) -> dict[str, Any]:
    block = {**message["content"][-1], "cache_control": {"type": "ephemeral"}}
    return {**message, "content": [*message["content"][:-1], block]}


def encoded(messages: list[Any], **fields: Any) -> bytes:
    body = {"model": "m", "messages": messages, "system": "be brief", **fields}
    return json.dumps(body).encode()


def test_a_repeated_history_is_not_parsed_again_and_a_moved_marker_is() -> None:
    bodies = Bodies()
    first = [*history(5)[:-1], marked(history(5)[-1])]
    before = bodies.read(encoded(first), "s")
    # Claude Code's next call: the marker moves from the old last message to the new one.
    newest = {"role": "assistant", "content": [{"type": "text", "text": "é"}]}
    second = [*history(5), marked(newest)]

    after = bodies.read(encoded(second, stream=True), "s")

    assert after.raw == json.loads(encoded(second, stream=True))
    kept = after.raw["messages"]
    assert all(kept[i] is before.raw["messages"][i] for i in range(4))  # the very objects
    assert kept[4] is not before.raw["messages"][4]  # its marker moved: parsed again
    for (start, end), message in zip(after.spans, second, strict=True):
        assert json.loads(after.data[start:end]) == message
    frame = after.frame()
    assert frame is not None
    assert frame[0] == b'{"model": "m", "messages": ['
    assert frame[1] == b'], "system": "be brief", "stream": true}'


def test_an_edit_early_in_the_history_or_another_session_reads_the_body_whole() -> None:
    bodies = Bodies()
    before = bodies.read(encoded(history(40)), "s")
    edited = history(40)
    edited[3] = {"role": "assistant", "content": "rewound"}

    again = bodies.read(encoded(edited), "s")
    other = bodies.read(encoded(history(3, "other")), "s")

    assert again.raw == json.loads(encoded(edited))
    # Found by bisection: the three messages before the edit are the objects read before.
    reused = [again.raw["messages"][i] is before.raw["messages"][i] for i in range(4)]
    assert reused == [True, True, True, False]
    assert other.raw == json.loads(encoded(history(3, "other")))
    assert len(other.spans) == 3


def test_a_messages_key_inside_another_field_is_not_taken_for_the_list() -> None:
    data = json.dumps(
        {"metadata": {"messages": [{"role": "user", "content": "x"}]}, "messages": []}
    ).encode()

    body = Bodies().read(data, "s")

    assert body.raw == json.loads(data)
    assert body.raw["messages"] == []


@pytest.mark.parametrize(
    ("data", "problem"),
    [(b"[1, 2]", "not an object"), (b"{nope", "not JSON"), (b'{"messages": [1,}', "not JSON")],
)
def test_a_body_that_is_no_json_object_is_refused_naming_why(data: bytes, problem: str) -> None:
    with pytest.raises(BodyError, match=problem):
        Bodies().read(data, "s")


def test_unnamed_conversations_of_one_tenant_keep_a_body_each() -> None:
    bodies = Bodies()
    one, two = history(30, "one"), history(30, "two")
    first = {
        name: bodies.read(encoded(h), "tenant", unnamed=True)
        for name, h in [("one", one), ("two", two)]
    }

    # The two conversations take turns, each re-sending its history with a message added.
    for n in range(3):
        for name, conversation in (("one", one), ("two", two)):
            conversation.append({"role": "user", "content": [{"type": "text", "text": f"{n}"}]})
            body = bodies.read(encoded(conversation), "tenant", unnamed=True)
            assert body.raw == json.loads(encoded(conversation))
            # Compared with its own conversation's previous body: the history not parsed again.
            assert body.raw["messages"][0] is first[name].raw["messages"][0]
    # A third conversation of the tenant is read whole, and forgets neither.
    third = bodies.read(encoded(history(30, "three")), "tenant", unnamed=True)
    assert third.raw["messages"][0] is not first["one"].raw["messages"][0]
    again = bodies.read(encoded(one), "tenant", unnamed=True)
    assert again.raw["messages"][0] is first["one"].raw["messages"][0]


def test_the_bodies_remembered_are_bounded() -> None:
    bodies = Bodies(remembered=2)
    first = bodies.read(encoded(history(3)), "a")
    bodies.read(encoded(history(3)), "b")
    bodies.read(encoded(history(3)), "c")  # "a" is forgotten: read whole again

    again = bodies.read(encoded(history(3)), "a")

    assert again.raw == first.raw
    assert again.raw["messages"][0] is not first.raw["messages"][0]


messages_st = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=12)}
    ),
    max_size=6,
)


@settings(max_examples=examples(200))
@given(
    first=messages_st,
    keep=st.integers(min_value=0, max_value=6),
    more=messages_st,
    indent=st.sampled_from([None, 1]),
    ascii_only=st.booleans(),
)
def test_properties_any_second_body_reads_as_json_loads_reads_it(
    first: list[Any], keep: int, more: list[Any], indent: int | None, ascii_only: bool
) -> None:
    bodies = Bodies()
    second = first[:keep] + more

    def dumped(messages: list[Any]) -> bytes:
        body = {"model": "m", "messages": messages, "max_tokens": 5}
        return json.dumps(body, indent=indent, ensure_ascii=ascii_only).encode()

    bodies.read(dumped(first), "s")
    body = bodies.read(dumped(second), "s")

    assert body.raw == json.loads(dumped(second))
    for (start, end), message in zip(body.spans, second, strict=True):
        assert json.loads(body.data[start:end]) == message


def test_the_upstream_body_keeps_the_clients_bytes_around_the_pipelines_messages() -> None:
    data = b'{"model":"m",  "messages": [{"role":"user","content":"hi"}], "x": {"b":1, "a":2}}'
    body = Bodies().read(data, "s")
    sent = (Message(role="user", content="hi"), Message(role="assistant", content="yes"))
    request = Request(model="m", max_tokens=5, messages=sent)

    out = upstream_body(body.raw, request, body.frame())

    assert out.startswith(b'{"model":"m",  "messages": [{"role":"user","content":"hi"},')
    assert out.endswith(b'], "x": {"b":1, "a":2}}')
    assert json.loads(out)["messages"] == [m.to_api() for m in sent]
    # Without the frame (a body whose list was not found) the fields are encoded again.
    assert json.loads(upstream_body(body.raw, request)) == json.loads(out)


def test_from_the_outgoing_copy_only_the_changed_messages_are_serialized(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = Request(model="m", max_tokens=5, messages=())
    copy = OutgoingCopy()
    stored = [
        StoredMessage(seq=i + 1, turn=1, message=Message(role=role, content=f"m{i}"))
        for i, role in zip(range(50), itertools.cycle(("user", "assistant")), strict=False)
    ]
    # As the loop makes its requests: the copy's messages.
    first, _ = copy.update(stored)
    upstream_body({"model": "m"}, base.model_copy(update={"messages": first}))
    serialized: list[Message] = []

    def counted(message: Message) -> bytes:
        serialized.append(message)
        return message_json(message)

    # Wherever a message is serialized: by the copy, or by the body for what it did not make.
    monkeypatch.setattr(outgoing, "message_json", counted)
    monkeypatch.setattr(messages_module, "message_json", counted)
    newest = Message(role="user", content="new")
    second, _ = copy.update([*stored, StoredMessage(seq=51, turn=2, message=newest)])

    out = upstream_body({"model": "m"}, base.model_copy(update={"messages": second}))

    assert serialized == [newest]
    assert [m["content"] for m in json.loads(out)["messages"]] == [
        *(f"m{i}" for i in range(50)),
        "new",
    ]


@settings(max_examples=examples(200))
@given(
    first=messages_st,
    keep=st.integers(min_value=0, max_value=6),
    more=messages_st,
    cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=8),
)
def test_properties_a_body_arriving_in_chunks_reads_as_it_reads_whole(
    first: list[Any], keep: int, more: list[Any], cuts: list[int]
) -> None:
    chunked, whole = Bodies(), Bodies()
    second = first[:keep] + more
    data = encoded(second)
    before = chunked.read(encoded(first), "s")
    whole.read(encoded(first), "s")
    arrival = chunked.arrival("s")
    at = 0
    for cut in sorted(cuts):
        arrival.add(data[at:cut])
        at = max(at, cut)
    arrival.add(data[at:])

    body = chunked.received(arrival)

    expected = whole.read(data, "s")
    assert body.raw == expected.raw == json.loads(data)
    assert body.spans == expected.spans
    # The leading messages it repeats byte for byte are the objects parsed before.
    pairs = enumerate(zip(first, second, strict=False))
    kept = next((i for i, (a, b) in pairs if json.dumps(a) != json.dumps(b)), None)
    kept = min(len(first), len(second)) if kept is None else kept
    assert all(body.raw["messages"][i] is before.raw["messages"][i] for i in range(kept))


def test_chunks_that_repeat_the_previous_body_are_not_compared_again() -> None:
    bodies = Bodies()
    before = bodies.read(encoded(history(30)), "s")
    longer = encoded([*history(30), {"role": "user", "content": "new"}])
    arrival = bodies.arrival("s")
    for at in range(0, len(longer), 64):
        arrival.add(longer[at : at + 64])

    body = bodies.received(arrival)

    # Compared as it came, up to the chunk where the previous list ended.
    assert before.spans[-1][1] - 64 < arrival.equal <= before.spans[-1][1]
    assert body.raw["messages"][:30] == before.raw["messages"]
    assert all(a is b for a, b in zip(body.raw["messages"], before.raw["messages"], strict=False))
