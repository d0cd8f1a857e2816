"""``GatewayRunner`` is every host of ``hermes.gateway.seams``, and the hosts are narrow.

``scripts/test`` type-checks this file with ``mypy --strict``: ``_as_hosts`` fails that check
when a runner member drifts from the signature its module is typed against, and each
``# type: ignore[attr-defined]`` in ``_hosts_do_not_reach_the_dicts`` fails it (as an unused
ignore) once a host lets its module reach that private dict again. pytest checks what mypy
cannot see: that a runner really has, at run time, every member its hosts declare (an
attribute that is only annotated on the class satisfies mypy and raises ``AttributeError``).
"""

from __future__ import annotations

from typing import Any

from typing_extensions import get_protocol_members

from hermes.gateway.config import GatewayConfig
from hermes.gateway.run import GatewayRunner
from hermes.gateway.seams import AgentHost, CommandHost, ShutdownHost, TurnHost

HOSTS: tuple[type[Any], ...] = (CommandHost, TurnHost, AgentHost, ShutdownHost)


def _as_hosts(runner: GatewayRunner) -> tuple[CommandHost, TurnHost, AgentHost, ShutdownHost]:
    return runner, runner, runner, runner


def _hosts_do_not_reach_the_dicts(commands: CommandHost, turn: TurnHost, agents: AgentHost,
                                  shutdown: ShutdownHost) -> None:
    """Checked by mypy only: the running slots, queues and cache go through their views."""
    commands._running_agents  # type: ignore[attr-defined]
    turn._running_agents  # type: ignore[attr-defined]
    turn._pending_messages  # type: ignore[attr-defined]
    turn._agent_cache  # type: ignore[attr-defined]
    agents._running_agents  # type: ignore[attr-defined]
    agents._session_db  # type: ignore[attr-defined]
    # An agent's turn only checks whether it was disowned; disowning is for commands and turns.
    agents._begin_session_run_generation  # type: ignore[attr-defined]
    shutdown._running_agents  # type: ignore[attr-defined]
    shutdown._running_agents_ts  # type: ignore[attr-defined]
    shutdown._running_sources  # type: ignore[attr-defined]


def test_a_runner_has_every_member_its_hosts_declare() -> None:
    runner = GatewayRunner(GatewayConfig())
    for host, view in zip(HOSTS, _as_hosts(runner), strict=True):
        missing = sorted(name for name in get_protocol_members(host) if not hasattr(view, name))
        assert missing == [], f"{host.__name__} declares members a runner lacks: {missing}"

