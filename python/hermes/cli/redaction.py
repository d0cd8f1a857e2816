"""Secrets taken out of exported transcripts (``hermes sessions export --redact``, and every
``--format trace`` unless ``--no-redact``).

What is recognised, each replaced by ``[REDACTED]`` (a known prefix is kept, so a reader
still sees what kind of secret stood there):

* private key blocks (``-----BEGIN ... PRIVATE KEY-----`` to its ``END`` line);
* tokens of a known shape: OpenAI and Anthropic (``sk-``), GitHub (``ghp_``, ``github_pat_``,
  ...), GitLab (``glpat-``), Slack (``xoxb-``, ``xapp-``), AWS access key ids (``AKIA``,
  ``ASIA``), Google API keys (``AIza``), Hugging Face (``hf_``), Stripe (``sk_live_``, ...),
  npm, PyPI, SendGrid, Telegram bot tokens, and JSON Web Tokens;
* the credential of an ``Authorization:`` header (any scheme) and of a URL
  (``scheme://user:password@host``);
* the value given to a key named for a secret (``api_key``, ``OPENAI_API_KEY``, ``token``,
  ``auth_token``, ``secret``, ``password``, ``db.password``, ``credentials``, ``private_key``,
  ``access_key``, ...; not ``max_tokens`` or ``author``) in ``key=value``, ``key: value``,
  ``"key": "value"`` and ``--key value`` forms, and in URL queries (``?token=...``).

It is a pattern list, not a proof: a secret of no known shape under an innocent name stays.
"""

from __future__ import annotations

import re
from typing import Any

MARK = "[REDACTED]"

_PRIVATE_KEY = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?-----END [A-Z0-9 ]*PRIVATE KEY"
    r"(?: BLOCK)?-----", re.DOTALL)

# (kept prefix, the rest of the token): the prefix says what it was, the rest is the secret.
_TOKENS = re.compile("|".join(f"(?:{pattern})" for pattern in (
    r"\b(?P<p1>sk-(?:ant-|proj-|or-v1-)?)[A-Za-z0-9_\-]{16,}",
    r"\b(?P<p2>(?:ghp|gho|ghu|ghs|ghr)_)[A-Za-z0-9]{20,}",
    r"\b(?P<p3>github_pat_)[A-Za-z0-9_]{20,}",
    r"\b(?P<p4>glpat-)[A-Za-z0-9_\-]{20,}",
    r"\b(?P<p5>xox[abposr]-|xapp-)[A-Za-z0-9\-]{10,}",
    r"\b(?P<p6>AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\b(?P<p7>AIza)[0-9A-Za-z_\-]{35}",
    r"\b(?P<p8>hf_)[A-Za-z0-9]{30,}",
    r"\b(?P<p9>(?:sk|rk|pk)_(?:live|test)_)[A-Za-z0-9]{16,}",
    r"\b(?P<p10>npm_)[A-Za-z0-9]{30,}",
    r"\b(?P<p11>pypi-)[A-Za-z0-9_\-]{50,}",
    r"\b(?P<p12>SG\.)[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}",
    r"\b(?P<p13>\d{8,10}:)AA[A-Za-z0-9_\-]{33}\b",
    r"\b(?P<p14>eyJ)[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
)))

_AUTHORIZATION = re.compile(
    r"(?P<head>\b(?:proxy-)?authorization\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|digest)\s+)?)"
    r"(?P<secret>[^\s\"',;]+)", re.IGNORECASE)

_URL_PASSWORD = re.compile(r"(?P<head>\b[a-z][a-z0-9+.\-]*://[^\s:/@]+:)(?P<secret>[^\s@/]+)(?=@)",
                           re.IGNORECASE)

# A key named for a secret (``password``, ``OPENAI_API_KEY``, ``db.password``, ``auth_token``),
# not one that only contains such a word (``max_tokens``, ``token_count``, ``author``).
_SECRET_NAME = (r"(?:[A-Za-z0-9_.\-]*[_.\-])?(?:api[_\-]?key|apikey|access[_\-]?key"
                r"|secret(?:[_\-]?key)?|token|passw(?:or)?d|pwd|credentials?|private[_\-]?key"
                r"|auth)(?![A-Za-z0-9_])")
_QUOTED_VALUE = re.compile(
    rf"(?P<head>[\"'](?:{_SECRET_NAME})[\"']\s*:\s*[\"'])(?P<secret>[^\"']+)(?=[\"'])",
    re.IGNORECASE)
_ASSIGNED_VALUE = re.compile(
    rf"(?P<head>(?<![A-Za-z0-9_.\-])(?:{_SECRET_NAME})\s*[=:]\s*[\"']?)"
    r"(?P<secret>[^\s\"'&,;}]+)", re.IGNORECASE)
_FLAG_VALUE = re.compile(rf"(?P<head>(?<![A-Za-z0-9_.\-])--(?:{_SECRET_NAME})[ =])"
                         r"(?P<secret>[^\s\"'-][^\s\"']*)", re.IGNORECASE)

# Words after a secret-like key that are not secrets ("token: expired", "password: none").
_NOT_SECRETS = frozenset({"", "none", "null", "true", "false", "redacted", MARK.lower()})


def redact_text(text: str) -> str:
    """``text`` with every secret it recognises replaced by ``[REDACTED]``."""
    text = _PRIVATE_KEY.sub(MARK, text)
    text = _TOKENS.sub(_keep_prefix, text)
    for pattern in (_AUTHORIZATION, _URL_PASSWORD, _QUOTED_VALUE, _ASSIGNED_VALUE,
                    _FLAG_VALUE):
        text = pattern.sub(_keep_head, text)
    return text


def redact(value: Any) -> Any:
    """``value`` (a message, a list of them, any JSON-like value) with each string in it
    redacted; keys and non-strings stay as they are."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [redact(item) for item in value]
    if isinstance(value, dict):
        return {key: redact(item) for key, item in value.items()}
    return value


def _keep_prefix(match: re.Match[str]) -> str:
    prefix = next(group for name, group in match.groupdict().items() if group is not None)
    return f"{prefix}{MARK}"


def _keep_head(match: re.Match[str]) -> str:
    if match.group("secret").strip(".").lower() in _NOT_SECRETS:
        return match.group(0)
    return f"{match.group('head')}{MARK}"
