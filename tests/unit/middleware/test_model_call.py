"""ModelCall.evolve: a copy with the given fields changed and every other field kept."""

from __future__ import annotations

import dataclasses

from hango.compaction.record import RunState
from hango.core.messages import Message, Request
from hango.middleware.base import Assembly, ModelCall, Overflow, StateHolder


def test_evolve_changes_the_given_fields_and_keeps_every_other_one() -> None:
    request = Request(model="m", max_tokens=5, messages=(Message(role="user", content="hi"),))
    call = ModelCall(
        session_id="s",
        turn=3,
        request=request,
        seqs=(1,),
        state=StateHolder(RunState()),
        stored=(),
        force="overflow",
        assembly=Assembly(),
        overflow=Overflow(measured=10, tokens=12, maximum=11),
        changed_from=0,
    )
    other = request.model_copy(update={"max_tokens": 6})
    evolved = call.evolve(request=other, changed_from=None)
    assert evolved == dataclasses.replace(call, request=other, changed_from=None)
    assert evolved.request is other and evolved.changed_from is None
    for field in dataclasses.fields(ModelCall):
        if field.name not in ("request", "changed_from"):
            assert getattr(evolved, field.name) is getattr(call, field.name)
    assert call.request is request  # the original is untouched
