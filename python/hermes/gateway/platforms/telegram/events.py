"""A Telegram message as the gateway sees it: which conversation, who, what was said.

Chat types follow hermes-agent, so session keys match its own (``build_session_key``):

=================================  ===========  ===========================================
Telegram chat                      chat_type    session key
=================================  ===========  ===========================================
private chat                       ``dm``       ``agent:main:telegram:dm:<chat>``
group, or supergroup without       ``group``    ``agent:main:telegram:group:<chat>:<user>``
topics
forum topic of a supergroup        ``forum``    ``agent:main:telegram:forum:<chat>:<topic>``
channel post                       ``channel``  ``agent:main:telegram:channel:<chat>:<chat>``
=================================  ===========  ===========================================

(Group keys end in the sender unless ``group_sessions_per_user`` is off; a topic is shared by
its participants unless ``thread_sessions_per_user`` is on.) The platform message id is the
message's id, which Telegram makes unique within its chat.

Only text (or a media caption) is taken; other messages, and messages from bots (this one
included), are ignored. With ``require_mention`` a group message is only taken when it names
the bot (``@username``) or replies to one of its messages.
"""

from __future__ import annotations

from telegram import Message

from hermes.gateway.config import Platform
from hermes.gateway.platforms.base import MessageEvent
from hermes.gateway.session import SessionSource

_GROUP_TYPES = frozenset({"group", "forum"})


def chat_kind(message: Message) -> tuple[str, str | None]:
    """``(chat_type, thread_id)`` of the message's conversation."""
    chat = message.chat
    thread = message.message_thread_id
    topic = thread is not None and bool(message.is_topic_message or chat.is_forum)
    if chat.type == "private":
        # Private chats have topics only when the bot enabled them for its users.
        return "dm", str(thread) if thread is not None and message.is_topic_message else None
    if chat.type == "supergroup" and topic:
        return "forum", str(thread)
    if chat.type == "channel":
        return "channel", None
    return "group", None


def message_event(message: Message, *, bot_id: int, bot_username: str | None,
                  require_mention: bool) -> MessageEvent | None:
    """The event for ``message``, or ``None`` when the gateway should not answer it."""
    text = message.text or message.caption
    sender = message.from_user
    if not text or (sender is not None and sender.is_bot):
        return None
    chat_type, thread_id = chat_kind(message)
    if require_mention and chat_type in _GROUP_TYPES and not _addressed(
            message, text, bot_id, bot_username):
        return None
    if sender is not None:
        user_id: str | None = str(sender.id)
        user_name = sender.full_name or sender.username
    else:  # a channel post, or a group member posting as the group
        origin = message.sender_chat or message.chat
        user_id, user_name = str(origin.id), origin.title
    source = SessionSource(platform=Platform.TELEGRAM, chat_id=str(message.chat.id),
                           chat_type=chat_type, user_id=user_id, user_name=user_name,
                           thread_id=thread_id, chat_name=message.chat.title)
    return MessageEvent(text=text, source=source, message_id=str(message.message_id))


def _addressed(message: Message, text: str, bot_id: int, bot_username: str | None) -> bool:
    if bot_username and f"@{bot_username.lower()}" in text.lower():
        return True
    replied = message.reply_to_message
    return replied is not None and replied.from_user is not None and replied.from_user.id == bot_id
