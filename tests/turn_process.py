"""An agent process for tests that run several of them on one session.

    python -m tests.turn_process DATABASE_URL SESSION TURNS [resume]

builds the agent as a deployment does (``build_agent``: the session lease included, the
queued ports when ``HANGO_REDIS_URL`` is set), with a scripted model that answers each
user message with one ``ls`` tool call and then a text, and runs TURNS turns on SESSION
(after ``resume``: first finishes the turn a dead process left). It prints the turn
numbers it ran, one per line.
"""

from __future__ import annotations

import itertools
import os
import sys

from hango.compaction.extractive import ExtractiveSummarizer
from hango.core.messages import Request, Response, TextBlock, ToolUseBlock, Usage
from hango.core.settings import load_settings
from hango.providers.scripted import ScriptedProvider, text_reply
from hango.wiring.agent import build_agent


def answer(request: Request) -> Response:
    """A tool call for a new user message, a text once the tool's result is in."""
    last = request.messages[-1]
    if any(last.tool_results()):
        return text_reply("listed the root")
    # Ids unique across the processes sharing the session, as a real API's are.
    use = ToolUseBlock(id=f"toolu_{os.getpid()}_{next(_ids)}", name="ls", input={"path": "/"})
    return Response(
        id=f"msg_{os.getpid()}_{next(_ids)}",
        model=request.model,
        content=(TextBlock(text="looking"), use),
        stop_reason="tool_use",
        usage=Usage(input_tokens=0, output_tokens=10),
    )


_ids = itertools.count(1)


def main(argv: list[str]) -> int:
    database_url, session_id, turns = argv[0], argv[1], int(argv[2])
    settings = load_settings(database_url=database_url, estimator="heuristic")
    agent = build_agent(
        settings, provider=ScriptedProvider(fallback=answer), summarizer=ExtractiveSummarizer()
    )
    if argv[3:] == ["resume"]:
        resumed = agent.loop.resume(session_id)
        print(resumed.turn if resumed else "nothing", flush=True)
    for number in range(turns):
        result = agent.loop.run_turn(session_id, f"task {number} from this process")
        print(result.turn, flush=True)
    agent.store.engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
