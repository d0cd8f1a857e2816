"""``apply_wal_with_fallback`` on real files through the caller's own ``sqlite3`` connection.

Run in a child process: this test process has SQLite loaded through hermes, and a second
SQLite copy in one process must not touch a file hermes could open (README, "Limits").
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_SCRIPT = """
import sqlite3, sys
from hermes.state import apply_wal_with_fallback
first = sqlite3.connect(sys.argv[1])
print(apply_wal_with_fallback(first))
second = sqlite3.connect(sys.argv[1])
print(apply_wal_with_fallback(second, db_label="again"))
print(second.execute("PRAGMA journal_mode").fetchone()[0])
"""


def test_a_fresh_file_is_put_in_wal_and_a_wal_file_is_left_so(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path / "own.db")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["wal", "wal", "wal"]
