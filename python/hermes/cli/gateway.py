"""``hermes gateway run``: serve the OpenAI-compatible api_server until interrupted."""

from __future__ import annotations

import argparse

from hermes.cli.arguments import Commands, add_model_flags
from hermes.cli.configuration import gateway_config, settings
from hermes.cli.output import stderr_console
from hermes.paths import shown_location


def add_commands(commands: Commands) -> None:
    gateway = commands.add_parser("gateway", help="run the gateway")
    gateway.set_defaults(help_parser=gateway)
    gateway_commands = gateway.add_subparsers(title="commands", metavar="COMMAND")
    run = gateway_commands.add_parser(
        "run", help="serve the OpenAI-compatible api_server until interrupted",
        description="Serve POST /v1/chat/completions, GET /v1/models and GET /health. "
                    "Without a configured model endpoint the agent runs offline (echo).")
    run.add_argument("--host", help="address to listen on (default 127.0.0.1; any other "
                                    "needs api_server.key)")
    run.add_argument("--port", type=int, help="port to listen on (default 8642)")
    add_model_flags(run)
    run.set_defaults(handler=run_gateway)


def run_gateway(args: argparse.Namespace) -> int:
    import asyncio

    from rich.text import Text

    from hermes.gateway.platforms.api_auth import check_bind_allowed
    from hermes.gateway.run import GatewayRunner

    extra = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    config = settings(args, {f"api_server.{k}": v for k, v in extra.items()})
    api_server = config.api_server
    check_bind_allowed(api_server)  # fail before anything starts, with the reason
    runner = GatewayRunner(gateway_config(config, "api_server", extra, only=False))
    endpoint = config.model.base_url or ("api.openai.com" if config.model.is_remote
                                         else "offline: replies are echoes")
    stderr_console().print(Text(
        f"hermes gateway: http://{api_server.host}:{api_server.port}/v1  model "
        f"{config.model.resolved_name()} ({endpoint})  db {shown_location(config.store_location)}"))
    return asyncio.run(runner.run())
