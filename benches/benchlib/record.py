"""The record of one run of a stand-alone benchmark (``scale.py``, ``store_ops.py``, ``cli.py``,
``migrate.py``, ``flush_ab.py``): its header (what ran, where, on which code) and the results
file it ends in."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

from benchlib import paths
from benchlib.machine import code_identity, loadavg, machine


def start(bench: str, quick: bool, scratch: Path) -> dict[str, Any]:
    """The header of a run of ``bench``, measured now: command, time, machine, code, load."""
    return {
        "bench": bench,
        "kind": "quick" if quick else "full",
        "command": " ".join(["python", f"benches/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
        "utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(scratch),
        "code": code_identity(sys.executable),
        "loadavg_start": loadavg(),
    }


def finish(doc: dict[str, Any], started: float, *, quick: bool, out: Path | None, publish: bool,
           stem: str) -> Path:
    """Closes the record (load, wall time) and writes it: to ``out``, else ``<stem>[-quick].json``
    in the published or the untracked results folder. Returns the file."""
    doc["loadavg_end"] = loadavg()
    doc["wall_s"] = round(time.monotonic() - started, 1)
    name = f"{stem}{'-quick' if quick else ''}.json"
    path = (out or paths.results_dir(publish) / name).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    doc["results_file"] = paths.shown(path)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def conclude(doc: dict[str, Any], started: float, args: argparse.Namespace, stem: str,
             render: Callable[[dict[str, Any]], str]) -> int:
    """The end of a run with the usual ``--quick``/``--out``/``--publish`` options: the record
    written (``finish``), its rendering on stdout, where it went on stderr. Returns exit code 0."""
    out = finish(doc, started, quick=args.quick, out=args.out, publish=args.publish, stem=stem)
    print(render(doc))
    print(f"\n{doc['bench']}: wrote {out} ({doc['wall_s']} s)", file=sys.stderr)
    return 0
