"""The agent: a conversation loop whose transcript is flushed after every round.

``AIAgent`` combines :class:`~hermes.agent.persistence.TranscriptPersistence`
(the identity-deduplicated flush and the agent's lifecycle) with
:class:`~hermes.agent.conversation.ConversationLoop` (model, tools, rounds).
"""

from __future__ import annotations

from typing import Any

from hermes.agent.backends import ModelBackend
from hermes.agent.conversation import ConversationLoop
from hermes.agent.persistence import TranscriptPersistence
from hermes.agent.tools import Tool, ToolRegistry
from hermes.state import SessionDB

__all__ = ["AIAgent"]


class AIAgent(TranscriptPersistence, ConversationLoop):
    """One conversation's agent.

    With ``session_db`` set, every message of every turn is written to it
    exactly once, after each model response and each tool result. With no
    ``backend``, an OpenAI-compatible endpoint is used when a base URL or key
    is configured, and the offline backend otherwise.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        session_id: str | None = None,
        session_db: SessionDB | None = None,
        platform: str = "local",
        backend: ModelBackend | None = None,
        tools: ToolRegistry | list[Tool] | None = None,
        system_prompt: str | None = None,
        max_iterations: int = 20,
        api_key: str | None = None,
        base_url: str | None = None,
        **extra: Any,
    ) -> None:
        self.session_id = session_id
        self._session_db = session_db
        self.platform = platform
        self._session_messages = []
        self._init_conversation(
            model=model,
            backend=backend,
            tools=tools,
            system_prompt=system_prompt,
            max_iterations=max_iterations,
            api_key=api_key,
            base_url=base_url,
            **extra,
        )
