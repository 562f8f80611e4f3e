"""Reading commands never write to the file they are given: a foreign SQLite file (another
application's, with a table named like one of ours) or a store of a newer schema is refused with one
line naming the file and why, exit 2, and stays byte-identical, with nothing created beside it. The
real command runs as a process."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from tallyspan._store._store_schema import MIGRATIONS_TABLE, connect

COMMANDS = [
    ["report"],
    ["spans"],
    ["ledger"],
    ["doctor"],
    ["prune", "--older-than", "1d", "--dry-run"],
    ["prune", "--older-than", "1d"],
    ["export", "--format", "failure-logs", "OUT"],
]


def _foreign(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE spans (id INTEGER PRIMARY KEY, what TEXT)")  # another app's "spans"
    db.execute("CREATE TABLE notes (body TEXT)")
    db.executemany("INSERT INTO notes VALUES (?)", [("keep me",), ("and me",)])
    db.commit()
    db.close()
    return path


def _newer(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = connect(path)
    db.execute(f"INSERT INTO {MIGRATIONS_TABLE} (name, applied_at) VALUES ('m999_from_the_future', 'x')")
    db.execute("PRAGMA journal_mode = DELETE")  # one file, so "nothing beside it" can be checked
    db.close()
    return path


def _run(db: Path, arguments: list[str], out_dir: Path) -> subprocess.CompletedProcess[str]:
    arguments = [str(out_dir / "out.jsonl") if argument == "OUT" else argument for argument in arguments]
    return subprocess.run(
        [sys.executable, "-m", "tallyspan", "--db", str(db), *arguments],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (_foreign, "is not a tallyspan store: an SQLite database with 2 table(s) of another application"),
        (_newer, "is a tallyspan store of a newer schema (1 migration(s) this tallyspan does not know)"),
    ],
    ids=["foreign", "newer"],
)
@pytest.mark.parametrize("arguments", COMMANDS, ids=[" ".join(command) for command in COMMANDS])
def test_a_file_that_is_not_a_store_we_can_read_is_refused_in_one_line_and_left_byte_identical(
    tmp_path: Path, make: object, why: str, arguments: list[str]
) -> None:
    folder = tmp_path / "data"
    path = make(folder / "app.db")  # type: ignore[operator]
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    listing = sorted(p.name for p in folder.iterdir())
    out_dir = tmp_path / "out"
    out_dir.mkdir()

    completed = _run(path, arguments, out_dir)

    assert completed.returncode == 2, completed.stderr
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith(f"Error: {path} {why}")
    assert lines[0].endswith("; it was left untouched")
    assert completed.stdout == ""
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in folder.iterdir()) == listing
    assert list(out_dir.iterdir()) == []


def test_a_file_that_is_not_sqlite_at_all_is_refused_the_same_way(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"not a database at all" * 200)
    completed = _run(path, ["report"], tmp_path)
    assert (completed.returncode, completed.stderr) == (
        2,
        f"Error: {path} is not a tallyspan store: it is not an SQLite database; it was left untouched\n",
    )
    assert path.read_bytes() == b"not a database at all" * 200


def test_a_store_of_an_older_schema_is_still_migrated_and_read(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = connect(path)
    db.execute(f"DELETE FROM {MIGRATIONS_TABLE} WHERE name = 'm003_self_stats'")
    db.execute("DROP TABLE self_stats")
    db.close()
    completed = _run(path, ["report"], tmp_path)
    assert completed.returncode == 0, completed.stderr
    with closing(sqlite3.connect(path)) as check:
        names = [row[0] for row in check.execute(f"SELECT name FROM {MIGRATIONS_TABLE} ORDER BY rowid")]
    assert names == ["m001_initial", "m002_run_balance_only_in_reconciliations", "m003_self_stats"]
