"""The benchmark workload: one transcript shape shared by every system.

Pure standard library, so the same module runs in our interpreter and in the
peer venv. A transcript cycles through three ~600-byte messages, as an agent
doing tool work produces them:

* ``user``: a request in prose;
* ``assistant`` with one tool call: a short reasoning sentence plus a
  ``function`` call whose JSON arguments carry the rest of the bytes;
* ``tool``: the tool's result, with ``tool_call_id`` and ``tool_name``.

The text is deterministic (seeded), English-like words from a vocabulary
big enough for the full-text index to do real work; one message in ten also
carries CJK (two-character words and a three-character one, which the trigram
index finds), accented letters and emoji. Message ``i`` is the same dict
content in every process.
"""

from __future__ import annotations

import json
import random
from typing import Any

__all__ = ["MESSAGE_BYTES", "message", "messages", "transcript_bytes"]

MESSAGE_BYTES = 600

_VOCAB = (
    "agent gateway session transcript message tool result search files repository branch "
    "commit build test failure latency durable flush sqlite index query token model prompt "
    "cache reply user assistant config deploy server client request response error retry "
    "timeout queue worker thread process memory disk write read load parse encode decode "
    "schema column table row count invariant checkpoint journal page lock writer reader "
    "telegram discord slack matrix signal email webhook cron schedule report summary "
    "python rust module package import export function method class struct trait field"
).split()

#: Every NON_ASCII_EVERY-th message carries non-ASCII text (CJK, accents,
#: emoji), as in a transcript that is mostly English and code.
NON_ASCII_EVERY = 10
_NON_ASCII = "北京 東京 서울 数据库 café naïve résumé Zürich 🚀 ✅"


def _text(rng: random.Random, size: int) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        w = rng.choice(_VOCAB)
        words.append(w)
        length += len(w.encode()) + 1
    return " ".join(words)[:size].strip()


#: Texts repeat with this period (message i and i + PERIOD share text but
#: not ids); keeps generating 100k messages cheap.
PERIOD = 3000
_texts: dict[int, tuple[str, str]] = {}


def _texts_for(i: int) -> tuple[str, str]:
    slot = i % PERIOD
    if slot not in _texts:
        rng = random.Random(slot * 7919 + 17)
        size = 250 if slot % 3 == 1 else 530
        text = _text(rng, size)
        if slot % NON_ASCII_EVERY == 0:
            text = text[: size - len(_NON_ASCII.encode()) - 1] + " " + _NON_ASCII
        _texts[slot] = (text, _text(rng, 190) if slot % 3 == 1 else "")
    return _texts[slot]


def message(i: int) -> dict[str, Any]:
    """Message ``i`` of the benchmark transcript (a fresh dict each call)."""
    kind = i % 3
    call_id = f"call_{i // 3:08d}"
    text, extra = _texts_for(i)
    if kind == 0:
        return {"role": "user", "content": text}
    if kind == 1:
        args = {"path": f"src/module_{i % 97}.py", "pattern": extra, "max_results": 50}
        return {
            "role": "assistant",
            "content": text,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "search_files", "arguments": json.dumps(args)},
                }
            ],
        }
    return {
        "role": "tool",
        "content": text,
        "tool_call_id": call_id,
        "tool_name": "search_files",
    }


def messages(start: int, stop: int) -> list[dict[str, Any]]:
    """Messages ``start`` .. ``stop - 1``, fresh dicts."""
    return [message(i) for i in range(start, stop)]


def transcript_bytes(msgs: list[dict[str, Any]]) -> int:
    """Bytes of JSON for ``msgs`` (what ~600 B per message refers to)."""
    return sum(len(json.dumps(m, ensure_ascii=False).encode()) for m in msgs)


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 2:  # the first N messages as one JSON list (the floor reads them)
        json.dump(messages(0, int(sys.argv[1])), sys.stdout)
    else:  # a look at the shape
        sample = messages(0, 3000)
        print(json.dumps(sample[:3], ensure_ascii=False, indent=1))
        print("bytes/message:", transcript_bytes(sample) / len(sample))
