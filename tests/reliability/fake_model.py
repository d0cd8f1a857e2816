"""A model endpoint that answers by rule, for the security trials: a tool call (to a tool that
does not exist, so the agent records the error as the tool's result and asks again), then a
plain answer, and every ``fail_every``-th request an HTTP 500. ``auth_headers`` records each
request's ``Authorization`` header, so a test can show which key reached it.
"""

from __future__ import annotations

from typing import Any

from support.fake_openai import FakeOpenAI, Reply, tool_call


class FakeModel(FakeOpenAI):
    def __init__(self, fail_every: int = 0) -> None:
        super().__init__()
        self.fail_every = fail_every

    def next_reply(self, body: dict[str, Any]) -> Reply:
        count = len(self.requests)
        if self.fail_every and count % self.fail_every == 0:
            return Reply(status=500, error="scripted outage")
        if body["messages"][-1].get("role") == "user":
            return Reply(tool_calls=[tool_call(f"call_{count}", "lookup", {})])
        return Reply(content=f"answer {count}")
