"""Who may use the api_server, and who is asking.

* **Binding.** Without a key the server only starts on a loopback address: anyone who can
  reach a non-loopback port could otherwise drive the agent and its tools.
* **The key.** With ``api_server.key`` set, every route but ``/health`` (and ``/v1/health``) needs
  ``Authorization: Bearer <key>``, compared in constant time.
* **The caller.** Which key authenticated, as a SHA-256 hash (the key itself is never kept),
  or ``"anonymous"`` when no key is configured (``Caller.of_key``: a request that reached a
  route has passed the key check). Together with a request's ``user`` field it is the
  identity conversations belong to (``hermes.gateway.client_turn``).
* **Continuity.** Continuing a stored conversation with ``X-Hermes-Session-Id`` exposes its
  history, so, as in hermes-agent, it needs a configured key (403 without one; ``require_key``),
  and so does the sessions API, which serves stored transcripts. Ids are 1-128 letters, digits
  or ``._:@-`` (400 otherwise; ``check_session_id``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Middleware

from hermes.config import ApiServerConfig
from hermes.errors import ConfigError
from hermes.gateway.platforms.api_http import Handler, RequestError, header

ANONYMOUS = "anonymous"
SESSION_HEADER = "X-Hermes-Session-Id"
MAX_SESSION_ID_CHARS = 128
_SESSION_ID = re.compile(r"[A-Za-z0-9._:@-]+")
_OPEN_PATHS = frozenset({"/health", "/v1/health"})


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name other than localhost may resolve anywhere
        return False


def check_bind_allowed(settings: ApiServerConfig) -> None:
    """Refuse a keyless server on a non-loopback address (raises ``ConfigError``)."""
    if not settings.key and not is_loopback(settings.host):
        raise ConfigError(
            f"refusing to serve the api_server on {settings.host}:{settings.port} without a "
            "key: anyone reaching that address could drive the agent and its tools. Set "
            "api_server.key in $HERMES_HOME/config.yaml (or API_SERVER_KEY), or bind to "
            "127.0.0.1"
        )


@dataclass(frozen=True)
class Caller:
    """Who sent a request: ``identity`` is ``"anonymous"`` or ``"key:"`` and the hex SHA-256
    of the key that authenticated it."""

    identity: str

    @classmethod
    def of_key(cls, key: str | None) -> Caller:
        """The caller of every request a server with ``key`` lets through."""
        return cls(f"key:{hashlib.sha256(key.encode()).hexdigest()}" if key else ANONYMOUS)

    @property
    def authenticated(self) -> bool:
        return self.identity != ANONYMOUS


def authenticate(key: str | None) -> Middleware:
    """The middleware that lets a request through only with the key, when one is set."""

    @web.middleware
    async def _authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if key and request.path not in _OPEN_PATHS:
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            # Bytes on both sides: compare_digest refuses non-ASCII str, and the header is
            # whatever the client sent (its non-UTF-8 bytes kept as surrogate escapes).
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode("utf-8", "surrogateescape"), key.encode("utf-8")
            ):
                raise RequestError(
                    401,
                    "missing or invalid API key: send 'Authorization: Bearer <api_server.key>'",
                    code="invalid_api_key",
                    kind="authentication_error",
                )
        return await handler(request)

    return _authenticate


def requested_session_id(request: web.Request, caller: Caller) -> str | None:
    """The stored conversation the request asks to continue (``X-Hermes-Session-Id``), or
    ``None``; refuses a malformed id (400) and continuity for an unauthenticated caller
    (403)."""
    session_id = header(request, SESSION_HEADER)
    if not session_id:
        return None
    check_session_id(session_id, SESSION_HEADER)
    require_key(caller, f"continuing a stored conversation with {SESSION_HEADER}",
                SESSION_HEADER, "without one, send the whole conversation in 'messages'")
    return session_id


def check_session_id(session_id: str, where: str) -> str:
    """``session_id`` if it is 1-128 letters, digits or ``._:@-``; a 400 naming ``where``
    otherwise."""
    if len(session_id) > MAX_SESSION_ID_CHARS:
        raise RequestError(400, f"the session id in {where} is too long ({len(session_id)} "
                           f"characters; at most {MAX_SESSION_ID_CHARS})", param=where,
                           code="invalid_session_id")
    if not _SESSION_ID.fullmatch(session_id):
        raise RequestError(400, f"the session id in {where} must be letters, digits or "
                           f"._:@- (got {session_id[:40]!r})", param=where,
                           code="invalid_session_id")
    return session_id


def require_key(caller: Caller, what: str, param: str | None, otherwise: str = "") -> None:
    """A 403 for ``what`` unless the server has a key (stored conversations are reachable
    only by an authenticated caller)."""
    if not caller.authenticated:
        raise RequestError(
            403, f"{what} needs a gateway key: set api_server.key in $HERMES_HOME/config.yaml "
            f"(or API_SERVER_KEY) and send it as 'Authorization: Bearer <key>'"
            + (f"; {otherwise}" if otherwise else ""), param=param,
            code="session_continuity_needs_key", kind="permission_error")
