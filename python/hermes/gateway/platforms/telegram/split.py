"""Splitting a reply into Telegram messages of at most 4096 UTF-16 code units.

Telegram counts a message's length in UTF-16 code units, as JavaScript does: a character
outside the Basic Multilingual Plane (most emoji) counts twice. Splitting works on Python
characters (code points), so a cut can never fall inside a surrogate pair; lengths are
measured in UTF-16 units, so no message is refused as too long.

Where a cut falls, best first: between blocks (a paragraph or a whole fenced code block,
never inside one), then at a line end inside a block too long for one message, then at a
space, then anywhere. A code block longer than one message is cut at line ends and each piece
is closed with a fence and reopened with the block's own opening line (language tag
included), so every message shows well-formed code. Whitespace at a cut is dropped and blank
lines between blocks become one; nothing else changes.
"""

from __future__ import annotations

import re

TELEGRAM_MAX_UNITS = 4096
_FENCE = "```"
#: A block boundary outside code: one or more blank lines.
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


def utf16_len(text: str) -> int:
    """``text``'s length as Telegram counts it."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def split_message(text: str, limit: int = TELEGRAM_MAX_UNITS) -> list[str]:
    """``text`` as messages of at most ``limit`` UTF-16 units each (one if it fits)."""
    if limit < 16:
        raise ValueError(f"a message limit of {limit} units leaves no room for a code fence")
    if utf16_len(text) <= limit:
        return [text]
    chunks: list[str] = []
    current = ""
    for block in _blocks(text):
        joined = f"{current}\n\n{block}" if current else block
        if utf16_len(joined) <= limit:
            current = joined
            continue
        if current:
            chunks.append(current)
        if utf16_len(block) <= limit:
            current = block
        else:
            pieces = _split_block(block, limit)
            chunks.extend(pieces[:-1])
            current = pieces[-1] if pieces else ""
    if current:
        chunks.append(current)
    return chunks


def _blocks(text: str) -> list[str]:
    """Paragraphs and whole fenced code blocks, in order, stripped of surrounding blank lines.

    A fence opened and never closed runs to the end of the text."""
    blocks: list[str] = []
    prose: list[str] = []
    code: list[str] | None = None
    for line in text.split("\n"):
        if code is not None:
            code.append(line)
            if line.strip().startswith(_FENCE):
                blocks.append("\n".join(code))
                code = None
        elif line.strip().startswith(_FENCE):
            blocks.extend(_paragraphs("\n".join(prose)))
            prose = []
            code = [line]
        else:
            prose.append(line)
    if code is not None:
        blocks.append("\n".join(code))
    blocks.extend(_paragraphs("\n".join(prose)))
    return blocks


def _paragraphs(prose: str) -> list[str]:
    return [p.strip("\n") for p in _PARAGRAPH_BREAK.split(prose) if p.strip()]


def _split_block(block: str, limit: int) -> list[str]:
    """A block longer than ``limit``, cut into pieces that each fit."""
    lines = block.split("\n")
    if not lines[0].strip().startswith(_FENCE):
        return _pack_lines(lines, limit)
    opening = lines[0]
    closed = len(lines) > 1 and lines[-1].strip().startswith(_FENCE)
    body = lines[1:-1] if closed else lines[1:]
    # Room for the fence lines every piece gets: the opening line and a closing fence.
    room = limit - utf16_len(opening) - len(_FENCE) - 2
    if room < 8:  # an opening line too long to repeat: cut the block as plain text
        return _pack_lines(lines, limit)
    return [f"{opening}\n{piece}\n{_FENCE}" for piece in _pack_lines(body, room)]


def _pack_lines(lines: list[str], limit: int) -> list[str]:
    """Lines joined into pieces of at most ``limit`` units; a line too long alone is cut."""
    pieces: list[str] = []
    current: str | None = None
    for line in lines:
        joined = line if current is None else f"{current}\n{line}"
        if utf16_len(joined) <= limit:
            current = joined
            continue
        if current is not None and current.strip():
            pieces.append(current.rstrip())
        if utf16_len(line) <= limit:
            current = line
        else:
            *whole, current = _cut_line(line, limit)
            pieces.extend(piece for piece in whole if piece.strip())
    if current is not None and current.strip():
        pieces.append(current.rstrip())
    return pieces


def _cut_line(line: str, limit: int) -> list[str]:
    """One over-long line in pieces of at most ``limit`` units, cut at a space when one lies
    in the second half of a piece, else between two characters."""
    pieces: list[str] = []
    rest = line
    while utf16_len(rest) > limit:
        end, units = 0, 0
        while end < len(rest) and units + (2 if ord(rest[end]) > 0xFFFF else 1) <= limit:
            units += 2 if ord(rest[end]) > 0xFFFF else 1
            end += 1
        space = rest.rfind(" ", 0, end)
        cut = space if space > end // 2 else end
        pieces.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    pieces.append(rest)
    return pieces
