"""``hermes sessions export --format trace --upload``: one session's trace sent to the user's
Hugging Face dataset ``{user}/hermes-traces`` as ``sessions/<id>.jsonl``, as hermes-agent
0.19.0 sends it: the dataset is created private unless ``--public``, the token comes from
``HF_TOKEN`` (or the other names hermes-agent reads), and the Hub is ``HF_ENDPOINT`` when set
(``huggingface_hub`` reads it). ``huggingface_hub`` is the optional extra
``hermes-gateway[upload]``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from hermes.cli.failures import CommandError

DATASET = "hermes-traces"
#: Where the token is looked for, in this order (hermes-agent's names).
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGINGFACE_HUB_TOKEN", "HUGGING_FACE_HUB_TOKEN",
                   "HUGGINGFACE_TOKEN")


def hub_token() -> str:
    """The Hugging Face token from the environment, or a ``CommandError`` saying how to set
    one; checked before anything is read, so a missing token costs nothing."""
    for name in TOKEN_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    raise CommandError("no Hugging Face token to upload with: create one with write access at "
                       "https://huggingface.co/settings/tokens and set HF_TOKEN to it")


def check_client() -> None:
    """A ``CommandError`` naming the extra to install when ``huggingface_hub`` is missing."""
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        raise CommandError("uploading a trace needs huggingface_hub: pip install "
                           "'hermes-gateway[upload]'") from None


def upload_trace(trace: str, *, file_name: str, session_id: str, token: str,
                 private: bool) -> str:
    """Sends ``trace`` as ``sessions/<file_name>.jsonl`` and returns the file's address."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    who = _ask(api.endpoint, "check the token", api.whoami)
    user = who.get("name")
    if not isinstance(user, str) or not user:
        raise CommandError("the Hugging Face Hub did not say whose token this is; check "
                           "HF_TOKEN")
    repo = f"{user}/{DATASET}"
    path = f"sessions/{file_name}.jsonl"
    _ask(api.endpoint, f"create the dataset {repo}", lambda: api.create_repo(
        repo_id=repo, repo_type="dataset", private=private, exist_ok=True))
    _ask(api.endpoint, f"upload to the dataset {repo}", lambda: api.upload_file(
        path_or_fileobj=trace.encode("utf-8"), path_in_repo=path, repo_id=repo,
        repo_type="dataset", commit_message=f"Add the trace of session {session_id}"))
    return f"{api.endpoint}/datasets/{repo}/blob/main/{path}"


_Answer = TypeVar("_Answer")


def _ask(endpoint: str, doing: str, call: Callable[[], _Answer]) -> _Answer:
    """``call()``, its failure as one line: the Hub's refusal with its status, or the Hub out
    of reach."""
    from huggingface_hub.errors import HfHubHTTPError

    try:
        return call()
    except HfHubHTTPError as exc:
        status = getattr(exc.response, "status_code", None)
        reason = (str(exc).splitlines() or [""])[0]
        advice = ("check that HF_TOKEN holds a token with write access that has not expired"
                  if status in (401, 403) else "try again later")
        raise CommandError(f"cannot {doing}: the Hugging Face Hub answered {status} "
                           f"({reason}); {advice}") from None
    except Exception as exc:  # the client's transport errors (httpx's, or requests') share no base
        raise CommandError(f"cannot {doing}: the Hugging Face Hub at {endpoint} is out of "
                           f"reach ({exc}); check the network, or HF_ENDPOINT") from None
