"""Content-addressed SQLite cache of LLM calls: one row per request key, committed per call."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from pipeline.errors import redact
from pipeline.llm.errors import CacheError
from pipeline.llm.notices import notice

KEY_SCHEME = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    spec TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    request TEXT NOT NULL,
    raw TEXT,
    output TEXT,
    finish_reason TEXT,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    latency_s REAL NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    created_at REAL NOT NULL,
    tag TEXT
)
"""
# Not part of the key: which persona asked (`pipeline.run.jobs.persona_tag`), so a Dask driver can ship a
# persona's earlier calls to whichever worker runs it next. Caches made before it get the column on open.
TAG_COLUMN = "ALTER TABLE calls ADD COLUMN tag TEXT"
TAG_INDEX = "CREATE INDEX IF NOT EXISTS calls_by_tag ON calls (tag)"


class CacheKey(BaseModel):
    """Everything that affects a model's answer, and nothing operational."""

    scheme: int = KEY_SCHEME
    provider: str
    model: str
    messages: list[dict[str, str]]
    output_schema: dict
    temperature: float
    top_p: float
    max_tokens: int
    seed: int
    sample_index: int
    template_fingerprint: str
    # The decoding engine, where it can word a reply differently from another engine on the same model (the
    # embedded model's batched decoding); empty for the others, and then left out of the digest.
    engine: str = ""

    def digest(self) -> str:
        """sha256 of the canonical JSON of the key."""
        data = self.model_dump(mode="json")
        if not data["engine"]:
            del data["engine"]
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def _reason(exc: BaseException) -> str:
    """The first line of an sqlite3 or OS error, with what sqlite means by its vaguest messages."""
    text = (getattr(exc, "strerror", None) or str(exc)).splitlines()[0]
    hints = {"unable to open database file": "is it a folder, or in a missing or unreadable one?",
             "file is not a database": "the file holds something else",
             "attempt to write a readonly database": "the file or its folder is read-only",
             "database disk image is malformed": "the file is damaged; move it aside to start a new cache",
             "database or disk is full": "the disk under the cache is full; free space, then rerun"}
    return f"{text}: {hints[text]}" if text in hints else text


# The first failure of each cache path in this process (a full disk mid-run): a run whose calls then count as
# unanswered says the cache is at fault, not the server.
STORE_FAILURES: dict[str, str] = {}


class CallRecord(BaseModel):
    """One stored call: a success (raw + parsed output) or a failure (error)."""

    key: str
    status: Literal["ok", "failed"]
    spec: str
    provider: str
    model: str
    request: str
    raw: str | None = None
    output: str | None = None
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    attempts: int = 0
    error: str | None = None
    created_at: float = 0.0
    tag: str | None = None


_FIELDS = list(CallRecord.model_fields)
# Text a server or a request may carry a secret in: redacted before it is stored (a key a server reflects).
_TEXTS = ("request", "raw", "output", "error")
# A failure never overwrites a success another thread or process stored meanwhile.
_UPSERT = (f"INSERT INTO calls ({', '.join(_FIELDS)}) VALUES ({', '.join('?' for _ in _FIELDS)}) "
           f"ON CONFLICT(key) DO UPDATE SET {', '.join(f'{n} = excluded.{n}' for n in _FIELDS if n != 'key')} "
           "WHERE calls.status != 'ok' OR excluded.status = 'ok'")


class LLMCache:
    """SQLite in WAL mode; safe across threads (one lock) and processes (busy_timeout). With a ``tag``,
    every record put without one of its own is stored under it."""

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 30_000, tag: str | None = None) -> None:
        self.path = Path(path)
        self.tag = tag
        self._said_damaged = False
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=busy_timeout_ms / 1000, check_same_thread=False,
                                       isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise CacheError(f"{self.path}: cannot open the LLM cache ({_reason(exc)})") from None
        try:
            self._open_waiting(busy_timeout_ms)
        except (CacheError, sqlite3.Error) as exc:
            self._db.close()
            if isinstance(exc, CacheError):
                raise
            raise CacheError(f"{self.path}: cannot use the LLM cache ({_reason(exc)})") from None

    def _open_waiting(self, busy_timeout_ms: int) -> None:
        """:meth:`_open`, tried again while another process holds the lock: SQLite does not wait on its busy
        timeout for every step of it (switching a new file to WAL while another process does returns "locked" at
        once), so several processes starting on one new cache would fail without this."""
        deadline = time.monotonic() + busy_timeout_ms / 1000
        while True:
            try:
                return self._open(busy_timeout_ms)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _open(self, busy_timeout_ms: int) -> None:
        """Set the connection up, refuse another program's database or a damaged one, create the table."""
        db = self._db
        db.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "calls" not in tables:
            raise CacheError(f"{self.path}: not an LLM cache (another database: tables "
                             f"{', '.join(sorted(tables)[:5])}); pass another --cache")
        if "calls" in tables:
            columns = {row[1] for row in db.execute("PRAGMA table_info(calls)")}
            if "tag" not in columns and columns >= set(CallRecord.model_fields) - {"tag"}:
                db.execute(TAG_COLUMN)
                columns.add("tag")
            missing = sorted(set(CallRecord.model_fields) - columns)
            if missing:
                raise CacheError(f"{self.path}: not an LLM cache (table calls lacks {', '.join(missing)})")
            problem = db.execute("PRAGMA quick_check").fetchone()[0]
            if problem != "ok":
                first = next(line for line in problem.splitlines() if not line.startswith("***"))
                raise CacheError(f"{self.path}: the LLM cache is damaged ({first}); move it aside to start "
                                 "a new one")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(_SCHEMA)

    def get(self, key: str) -> CallRecord | None:
        """The successful record for `key`, or None (failures are never hits)."""
        with self._lock, self._failing():
            cursor = self._db.execute("SELECT * FROM calls WHERE key = ? AND status = 'ok'", (key,))
            row = cursor.fetchone()
            names = [d[0] for d in cursor.description]
        return self._parsed(names, row) if row else None

    def _parsed(self, names: list[str], row: tuple) -> CallRecord | None:
        """The record of one row, or None for a row whose fields do not hold their types (edited or damaged by
        hand): such a row counts as a miss, said once, and is asked again (the new answer replaces it)."""
        try:
            return CallRecord(**dict(zip(names, row, strict=True)))
        except ValidationError as exc:
            if not self._said_damaged:
                self._said_damaged = True
                err = exc.errors()[0]
                notice(f"{self.path}: a cached call is damaged ({'.'.join(map(str, err['loc']))}: {err['msg']}); "
                       "such rows count as not cached (asked again, unless --cache-only)")
            return None

    def put(self, record: CallRecord) -> None:
        """Insert or replace one record and commit it at once."""
        with self._lock, self._failing():
            self._db.execute(_UPSERT, self._values(record))

    def put_many(self, records: list[CallRecord]) -> None:
        """`put` every record, in one transaction (calls answered elsewhere, merged in)."""
        with self._lock, self._failing():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(_UPSERT, [self._values(r) for r in records])
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _values(self, record: CallRecord) -> tuple:
        """The row of one record: its creation time (now, if unset) and its tag (the cache's, if unset)."""
        texts = {name: redact(value) for name in _TEXTS if (value := getattr(record, name)) is not None}
        return tuple(record.model_copy(update={"created_at": record.created_at or time.time(),
                                               "tag": record.tag or self.tag, **texts}).model_dump().values())

    def tagged(self, tag: str) -> list[CallRecord]:
        """Every successful record stored under ``tag``, oldest first (indexed on first use)."""
        with self._lock, self._failing():
            self._db.execute(TAG_INDEX)
            cursor = self._db.execute("SELECT * FROM calls WHERE tag = ? AND status = 'ok' ORDER BY created_at",
                                      (tag,))
            names = [d[0] for d in cursor.description]
            return [r for row in cursor.fetchall() if (r := self._parsed(names, row)) is not None]

    def records(self, *, exclude: set[str] = frozenset()) -> list[CallRecord]:
        """Every stored record, failures included, except those whose key is in ``exclude``."""
        with self._lock, self._failing():
            cursor = self._db.execute("SELECT * FROM calls ORDER BY created_at")
            names = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
        return [r for row in rows if (r := self._parsed(names, row)) is not None and r.key not in exclude]

    @contextlib.contextmanager
    def _failing(self):
        """A database error mid-run (a page damaged since the open, a disk gone read-only) as one line."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            message = f"{self.path}: the LLM cache failed ({_reason(exc)})"
            STORE_FAILURES.setdefault(str(self.path), message)
            raise CacheError(message) from None

    def recent(self, provider: str, model: str, limit: int = 500) -> list[tuple[float, int]]:
        """(created_at, output_tokens) of the latest calls to one model, failed ones included (their tokens
        took time too), newest first."""
        sql = ("SELECT created_at, output_tokens FROM calls WHERE provider = ? AND model = ? "
               "AND typeof(created_at) IN ('real', 'integer') AND typeof(output_tokens) = 'integer' "
               "ORDER BY created_at DESC LIMIT ?")
        with self._lock:
            return [(float(t), int(n)) for t, n in self._db.execute(sql, (provider, model, limit)).fetchall()]

    def tokens_by_spec(self, provider: str, model: str, column: str = "output_tokens") -> dict[str, tuple[int, float]]:
        """Per spec of one model: (calls, mean generated tokens per call, or of ``column``: ``input_tokens``, the
        prompt's), failed calls and re-asks included."""
        if column not in ("output_tokens", "input_tokens"):
            raise ValueError(f"no token column {column!r}")
        sql = (f"SELECT spec, COUNT(*), AVG({column}) FROM calls WHERE provider = ? AND model = ? "
               "GROUP BY spec")
        with self._lock:
            return {spec: (int(n), float(mean)) for spec, n, mean in self._db.execute(sql, (provider, model))}

    def requests_by_spec(self, provider: str, model: str, limit: int = 20_000) -> list[tuple[str, str]]:
        """(spec, request messages JSON) of the latest calls to one model, newest first."""
        sql = "SELECT spec, request FROM calls WHERE provider = ? AND model = ? ORDER BY created_at DESC LIMIT ?"
        with self._lock:
            return list(self._db.execute(sql, (provider, model, limit)))

    def count(self, status: str | None = None) -> int:
        """Number of stored records, optionally of one status."""
        sql, args = "SELECT COUNT(*) FROM calls", ()
        if status:
            sql, args = sql + " WHERE status = ?", (status,)
        with self._lock:
            return self._db.execute(sql, args).fetchone()[0]

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()
