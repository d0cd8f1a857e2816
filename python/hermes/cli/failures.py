"""How a command fails: one line on stderr saying what went wrong and what to do, and an
exit status. ``hermes.cli.main`` sends every exception here; commands only raise.

Exit status: 0 done, 1 failed, 2 bad usage, 130 interrupted (Ctrl-C), 141 the reader of our
output went away (``hermes sessions export ID | head``), as for a Unix tool that SIGPIPE
ended; that one prints nothing.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys

from hermes.errors import HermesError

logger = logging.getLogger("hermes")

FAILED = 1
USAGE = 2
INTERRUPTED = 128 + signal.SIGINT
CLOSED_PIPE = 128 + signal.SIGPIPE

# What to do about an operating-system error, by errno.
_OS_ADVICE = {
    errno.ENOENT: "check the path; its directory must exist",
    errno.ENOTDIR: "check the path; a part of it is not a directory",
    errno.EISDIR: "name a file, not a directory",
    errno.EACCES: "check the permissions, or choose another path",
    errno.EPERM: "check the permissions, or choose another path",
    errno.EROFS: "choose a path on a writable file system",
    errno.ENOSPC: "free some space, or choose another path",
    errno.EDQUOT: "free some space, or choose another path",
}


class CommandError(Exception):
    """A failure a command found itself; the message is the whole line to print."""

    exit_status = FAILED


class UsageError(CommandError):
    """The command line itself is wrong (an unknown option, a missing argument)."""

    exit_status = USAGE


def describe_os_error(exc: OSError, doing: str) -> str:
    """``exc`` as one line: what was being done to which file, why it failed, what to do."""
    target = f" {exc.filename}" if exc.filename else ""
    reason = exc.strerror or str(exc)
    advice = _OS_ADVICE.get(exc.errno or 0)
    return f"cannot {doing}{target}: {reason}" + (f"; {advice}" if advice else "")


def report(exc: BaseException) -> int:
    """Print ``exc`` as one line on stderr (nothing for a closed pipe or Ctrl-C) and return
    the exit status for it."""
    if isinstance(exc, BrokenPipeError):
        _discard_stdout()
        return CLOSED_PIPE
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED
    if isinstance(exc, CommandError):
        _print(str(exc))
        return exc.exit_status
    if isinstance(exc, (HermesError, ValueError)):
        _print(str(exc))
        return FAILED
    if isinstance(exc, OSError):
        _print(describe_os_error(exc, "use"))
        return FAILED
    # A bug: still one line, with the way to see more.
    logger.info("unexpected failure", exc_info=exc)  # shown with -v
    _print(f"unexpected {type(exc).__name__}: {exc} (run with -v for the traceback, and "
           "please report it)")
    return FAILED


def _print(message: str) -> None:
    from rich.console import Console
    from rich.text import Text

    line = " ".join(message.split())  # one line, whatever the message held
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        Text(f"hermes: {line}", style="red"))


def _discard_stdout() -> None:
    """Point stdout at /dev/null: the reader is gone, and the interpreter's flush at exit
    must not fail (and print a traceback) on what is still buffered."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout already closed or not a file: nothing to flush
        pass
