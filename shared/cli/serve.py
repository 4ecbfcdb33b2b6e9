"""``hango serve``: the Anthropic Messages API gateway (``pip install 'hango-context[gateway]'``).

Point any client at it (``export ANTHROPIC_BASE_URL=http://127.0.0.1:8788``): Claude
Code, the SDKs in any language. Each request is forwarded to ``--upstream`` as the
library would send it: the session's history kept in the store, compacted under the
window, every header and field hango does not manage passed through. See docs/gateway.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from hango.cli.parsing import add_store_options, positive_int, summary
from hango.cli.wiring import require_worker, settings_with, telemetry

DEFAULT_PORT = 8788
log = logging.getLogger(__name__)


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "serve", help=summary("serve"), description=__doc__.split("\n\n")[1] if __doc__ else None
    )
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    parser.add_argument("--port", type=positive_int, default=DEFAULT_PORT, help="the port")
    parser.add_argument(
        "--upstream",
        default=os.environ.get("HANGO_UPSTREAM_URL"),
        help="the Messages API to forward to (default: HANGO_UPSTREAM_URL, else the Anthropic API)",
    )
    parser.add_argument(
        "--max-input-tokens",
        type=positive_int,
        metavar="N",
        help="treat every model's window as N tokens (to see compaction on short sessions)",
    )
    parser.add_argument(
        "--queue",
        action="store_true",
        help="summaries and offloads through Celery (HANGO_REDIS_URL), as the library does",
    )
    add_store_options(parser, history=True, migrate=True)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from hango.gateway.app import Upstream, create_app
    from hango.gateway.build import (
        DEFAULT_UPSTREAM,
        GATEWAY_TRIGGER_FRAC,
        GatewayOptions,
        build_gateway,
        summaries_note,
    )
    from hango.gateway.identity import gateway_secret

    settings = settings_with(
        database_url=args.database_url,
        history_root=args.history_root,
        auto_migrate=True if args.migrate else None,
    )
    if not args.queue:
        settings = settings.model_copy(update={"redis_url": None})
    else:
        require_worker(settings)
    upstream = args.upstream or DEFAULT_UPSTREAM
    options = GatewayOptions(
        upstream=upstream,
        max_input_tokens=args.max_input_tokens,
        # The operator's trigger when set; else the gateway's, below Claude Code's own.
        trigger_frac=None if "HANGO_CONTEXT_TRIGGER_FRAC" in os.environ else GATEWAY_TRIGGER_FRAC,
    )
    secret = gateway_secret(os.environ.get("HANGO_GATEWAY_SECRET"), settings.home)
    with telemetry(instrument_celery=args.queue):
        gateway = build_gateway(settings, options)
        app = create_app(gateway, Upstream(upstream, secret))
        print(f"hango serve: http://{args.host}:{args.port} -> {upstream}", file=sys.stderr)
        print(f"hango serve: {summaries_note(settings)}", file=sys.stderr)
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0
