"""Telegram forum-topic bindings: which topic of a chat belongs to which session."""

from __future__ import annotations

from hermes.state.face import AsyncFace, StoreFace


class TopicBindings(StoreFace):
    pass


class AsyncTopicBindings(AsyncFace):
    pass
