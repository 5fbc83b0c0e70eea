"""On-disk caches: SQLite files, rows keyed by a spec digest and a text hash.

The spec digest covers everything that decides a signal's value: a digest of the
model's weights (not its URI: two tracking servers may both have a
``models:/tgt/2``), of its ``config.json`` architecture settings and class
(:attr:`~mlflow_mia.signals.identity.ModelIdentity.config_id`), the tokenizer, and
the value-relevant settings. Each key stores its spec, which is checked on read.
Rows are committed chunk by chunk, so an audit killed halfway resumes from what it
had computed. Raw texts are never stored: only their sha256.

A cache is a file on a shared disk, so it is read with suspicion: the file's
structure is checked when it is opened (``PRAGMA quick_check``), and every row
carries ``HMAC-SHA256`` of its table, key, text hash and values under a secret kept
outside the cache folder (:mod:`mlflow_mia.signals.store_key`). A row whose MAC
does not verify (changed by someone without the key, or written under another key)
is dropped and recomputed, never used. A file SQLite cannot read raises
:class:`CacheCorruptError` naming the file and the fix. A full disk (SQLite's
``database or disk is full``, an ``OSError`` ENOSPC or EDQUOT, a write I/O error with no
space left) raises :class:`CacheDiskFullError` instead: the file is healthy, and the fix
is to free space, never to delete the cache.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import shutil
import sqlite3
import stat
import threading
from typing import Iterable, Mapping, Sequence

import numpy as np

from mlflow_mia.config import record_digest
from mlflow_mia.signals.store_key import derive_key, load_store_key, mac_matches, row_mac

__all__ = ["SignalCache", "CacheCorruptError", "CacheDiskFullError", "default_cache_dir", "check_cache_dir"]

log = logging.getLogger(__name__)


def default_cache_dir() -> str:
    """``$MLFLOW_MIA_CACHE`` or ``~/.cache/mlflow_mia``."""
    return os.environ.get("MLFLOW_MIA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mlflow_mia")


def _kind(path: str) -> str:
    """What is at ``path`` when it is not a folder, in words."""
    mode = os.stat(path).st_mode
    return "a file" if stat.S_ISREG(mode) else "a device, pipe or socket"


def check_cache_dir(path, *, what: str = "cache_dir") -> str:
    """``path`` when a cache folder can be there, checked before anything is computed.

    It must be a folder this process can write, or not exist yet below a folder it can write
    (it is created on first use).

    Parameters
    ----------
    path : str or os.PathLike
    what : str
        The option named in messages.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        ``path`` (or its nearest existing parent) is a file, a device such as ``/dev/null``,
        a pipe or a socket, or a folder this process cannot write; the message names
        ``what`` and the path.
    """
    path = os.fspath(path)
    full = os.path.abspath(os.path.expanduser(path))
    if os.path.exists(full):
        if not os.path.isdir(full):
            raise ValueError(f"{what} {path!r} is not a folder (it is {_kind(full)}); give a folder for the "
                             "cache (created when missing), or leave it unset for $MLFLOW_MIA_CACHE or "
                             "~/.cache/mlflow_mia")
        if not os.access(full, os.W_OK | os.X_OK):
            raise ValueError(f"{what} {path!r} is a folder this user cannot write; give a folder you can write")
        return path
    parent = os.path.dirname(full)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ValueError(f"{what} {path!r} cannot be created: {parent!r} is not a folder (it is {_kind(parent)})")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {path!r} cannot be created: this user cannot write {parent!r}")
    return path


def make_cache_dir(path: str) -> None:
    """``os.makedirs(path)``, with an error that names the cache folder instead of a bare ``OSError``."""
    check_cache_dir(path, what="cache folder")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        if _disk_full(exc, path):
            raise CacheDiskFullError(_full_message(f"the cache folder {path}", path, exc)) from None
        raise ValueError(f"cache folder {path!r} cannot be created ({exc.strerror}); set --cache-dir / cache_dir "
                         "(or $MLFLOW_MIA_CACHE) to a folder you can write") from None


class CacheCorruptError(RuntimeError):
    """A cache file that SQLite cannot read, or that holds another spec under a key."""


class CacheDiskFullError(RuntimeError):
    """The disk (or quota) holding a cache file is full: the file is healthy; free space, never delete it."""


#: Free bytes under which a write I/O error is taken for a full disk.
_LOW_SPACE = 1 << 20

#: Rows of a stored ``token_stats`` array: ``mu``, ``sigma``, ``top1`` (the columns of
#: :data:`mlflow_mia.signals.token_stats.STATS_COLUMNS` after the log-prob).
N_TOKEN_STATS = 3


def _free_bytes(path: str) -> int | None:
    """Free bytes on the disk holding ``path`` (or its nearest existing parent); None when unknown."""
    folder = os.path.abspath(path)
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _disk_full(exc: BaseException, path: str) -> bool:
    """``exc`` says that the disk or quota is full: ENOSPC / EDQUOT, SQLite's SQLITE_FULL, or an SQLite I/O
    error while under 1 MiB is free on the disk holding ``path``."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_FULL or "database or disk is full" in str(exc):
        return True
    io_error = (code is not None and code & 0xFF == sqlite3.SQLITE_IOERR) or "disk I/O error" in str(exc)
    free = _free_bytes(path) if io_error else None
    return free is not None and free < _LOW_SPACE


def _full_message(what: str, path: str, exc: BaseException) -> str:
    """What to do when the disk holding ``path`` (``what``, in words) is full: free space, keep the cache."""
    free = _free_bytes(path)
    room = "" if free is None else f", {free / 2 ** 20:.1f} MiB free"
    return (f"the disk holding {what} is full ({exc}{room}): free space on it, or set --cache-dir / cache_dir "
            "(or $MLFLOW_MIA_CACHE) to a folder on a disk with room, and run again. The cache is not damaged: "
            "keep it (what it holds is reused; rows are committed chunk by chunk, so nothing computed before is "
            "lost)")


def _stored(value):
    """What SQLite gives back for ``value``: NaN is stored as NULL."""
    return None if isinstance(value, float) and math.isnan(value) else value


class SqliteSpecStore:
    """A SQLite file with a ``specs`` table and one rows table: the base of the on-disk caches.

    Subclasses name their rows table and its value columns (``table``,
    ``columns``: SQL declarations after ``key`` and ``text_hash``). Columns added
    in a later release are listed, last, in ``added_columns`` too: a file made
    before them gets them on open (``ALTER TABLE ... ADD COLUMN``, NULL in its old
    rows), and an old row, whose MAC covers only the columns it was written with,
    verifies with its added columns NULL and reads with them as None. Rows are keyed
    by the digest of a spec (:func:`~mlflow_mia.config.record_digest`, 32 hex);
    :meth:`register` checks that the spec stored under a key is the one asked for.
    :meth:`get_rows` and :meth:`put_rows` read and write value tuples, each with its
    MAC (the ``checksum`` column: hex ``HMAC-SHA256`` under a key derived from the
    store key and the table name, :func:`~mlflow_mia.signals.store_key.row_mac`).

    Raises
    ------
    CacheCorruptError
        On open, when the file is not a readable SQLite database.
    ValueError
        On open, when the store key file is unusable
        (:func:`~mlflow_mia.signals.store_key.load_store_key`).
    """

    table = ""
    columns: tuple = ()
    added_columns: tuple = ()

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._conn = None
        try:
            store_key = load_store_key(store_dir=os.path.dirname(os.path.abspath(path)))
        except OSError as exc:  # creating the store key on a full disk
            if _disk_full(exc, path):
                raise CacheDiskFullError(_full_message(f"the cache file {path}", path, exc)) from None
            raise
        self._mac_key = derive_key(store_key, f"sqlite/{self.table}")
        with self._guard():
            self._conn = sqlite3.connect(path, check_same_thread=False, timeout=60)
            self._conn.execute("PRAGMA journal_mode=WAL")
            check = self._conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(check)
            self._conn.execute("CREATE TABLE IF NOT EXISTS specs (key TEXT PRIMARY KEY, spec TEXT NOT NULL)")
            cols = "".join(f", {c}" for c in self.columns)
            self._conn.execute(f"CREATE TABLE IF NOT EXISTS {self.table} (key TEXT NOT NULL, "
                               f"text_hash TEXT NOT NULL{cols}, checksum TEXT NOT NULL, PRIMARY KEY (key, text_hash))")
            have = {row[1] for row in self._conn.execute(f"PRAGMA table_info({self.table})")}
            for column in self.added_columns:
                if column.split()[0] not in have:
                    self._conn.execute(f"ALTER TABLE {self.table} ADD COLUMN {column}")
            self._conn.commit()

    @contextlib.contextmanager
    def _guard(self):
        """Turn SQLite's errors (not a busy lock) into :class:`CacheDiskFullError` when the disk is full (free
        space; the file is healthy), else :class:`CacheCorruptError` naming the file."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            if "locked" in str(exc):
                raise
            if _disk_full(exc, self.path):
                raise CacheDiskFullError(_full_message(f"the cache file {self.path}", self.path, exc)) from None
            raise CacheCorruptError(
                f"the cache file {self.path} is damaged ({exc}); delete it (what it held is recomputed) or use "
                "another --cache-dir / cache_dir") from None
        except OSError as exc:
            if _disk_full(exc, self.path):
                raise CacheDiskFullError(_full_message(f"the cache file {self.path}", self.path, exc)) from None
            raise

    def register(self, spec: Mapping) -> str:
        """Store ``spec`` under its key (atomically: concurrent first uses agree) and return the key.

        Raises
        ------
        CacheCorruptError
            A different spec is stored under the same key, or the file is damaged.
        """
        key = record_digest(dict(spec), length=32)
        text = json.dumps(dict(spec), sort_keys=True)
        with self._lock, self._guard():
            self._conn.execute("INSERT OR IGNORE INTO specs VALUES (?, ?)", (key, text))
            self._conn.commit()
            stored = self._conn.execute("SELECT spec FROM specs WHERE key = ?", (key,)).fetchone()[0]
        if stored != text:
            raise CacheCorruptError(f"cache {self.path} holds another spec under key {key}; delete the file")
        return key

    def get_rows(self, key: str, text_hashes: Iterable[str]) -> dict[str, tuple]:
        """Stored value tuples of ``text_hashes`` under ``key``; missing rows and rows failing their MAC are absent."""
        hashes = list(dict.fromkeys(text_hashes))
        names = ", ".join(c.split()[0] for c in self.columns)
        out, damaged = {}, 0
        with self._lock, self._guard():
            for start in range(0, len(hashes), 500):
                part = hashes[start:start + 500]
                rows = self._conn.execute(
                    f"SELECT text_hash, {names}, checksum FROM {self.table} "
                    f"WHERE key = ? AND text_hash IN ({','.join('?' * len(part))})", [key, *part]).fetchall()
                for h, *values, mac in rows:
                    if self._verifies(mac, key, h, values):
                        out[h] = tuple(values)
                    else:
                        damaged += 1
        if damaged:
            log.warning("cache %s: %d row(s) failed their MAC (changed by someone without the store key, written "
                        "under another key, or damaged) and are recomputed; if this repeats, delete the file",
                        self.path, damaged)
        return out

    def _mac(self, key: str, text_hash: str, values: Sequence) -> str:
        return row_mac(self._mac_key, [self.table, key, text_hash, *values])

    def _verifies(self, mac: str, key: str, text_hash: str, values: Sequence) -> bool:
        """The row's MAC over all its values, or (a row written before ``added_columns``) over the older ones."""
        if mac_matches(mac, self._mac(key, text_hash, values)):
            return True
        n_added = len(self.added_columns)
        return bool(n_added) and all(v is None for v in values[-n_added:]) and mac_matches(
            mac, self._mac(key, text_hash, values[:-n_added]))

    def put_rows(self, key: str, rows: Mapping[str, Sequence]) -> None:
        """Store ``text_hash -> value tuple`` (in ``columns`` order) in one transaction."""
        payload = []
        for h, values in rows.items():
            values = [_stored(v) for v in values]
            payload.append((key, h, *values, self._mac(key, h, values)))
        marks = ",".join("?" * (len(self.columns) + 3))
        # columns by name: in a file from before added_columns they sit after the checksum
        names = ", ".join(["key", "text_hash", *(c.split()[0] for c in self.columns), "checksum"])
        with self._lock, self._guard():
            self._conn.executemany(f"INSERT OR REPLACE INTO {self.table} ({names}) VALUES ({marks})", payload)
            self._conn.commit()

    def count(self, key: str | None = None) -> int:
        """Rows stored (under ``key``, or in all)."""
        with self._lock, self._guard():
            if key is None:
                return self._conn.execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()[0]
            return self._conn.execute(f"SELECT COUNT(*) FROM {self.table} WHERE key = ?", (key,)).fetchone()[0]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()


class SignalCache(SqliteSpecStore):
    """A persistent map ``(signal spec, text hash) -> per-sample signal``.

    Parameters
    ----------
    path : str or os.PathLike
        A directory (the file ``signals.sqlite`` is created in it) or a ``.sqlite`` file.

    Notes
    -----
    A stored row holds ``energy`` (float64), ``n_tokens`` (int), ``truncated``
    (bool), the masked-token log-probs (float32 bytes) and ``token_stats``:
    Min-K%++'s ``mu``, then ``sigma``, then EZ-MIA's ``top1`` flag (1.0 where the
    token is the model's argmax) of each scored token (float32 bytes, three times as
    long as the log-probs). Rows of caches written before ``token_stats`` existed, or
    with only ``mu`` and ``sigma`` (before ``top1``), read with it None (the signal
    functions recompute them when the statistics are asked for). Extra per-sample arrays (e.g. neighbour energies) use the same table
    under their own spec.
    """

    table = "signal_rows"
    added_columns = ("token_stats BLOB",)
    columns = ("energy REAL", "n_tokens INTEGER", "truncated INTEGER", "logprobs BLOB", *added_columns)

    def __init__(self, path: str | os.PathLike | None = None):
        path = os.fspath(path or default_cache_dir())
        if not path.endswith(".sqlite"):
            make_cache_dir(path)
            path = os.path.join(path, "signals.sqlite")
        else:
            make_cache_dir(os.path.dirname(os.path.abspath(path)))
        super().__init__(path)

    def __repr__(self) -> str:
        return f"SignalCache({self.path!r})"

    def get_many(self, key: str, text_hashes: Iterable[str]) -> dict[str, tuple]:
        """Cached rows of ``text_hashes`` under ``key`` (missing or damaged hashes are absent).

        Each row is ``(energy, n_tokens, truncated, logprobs, token_stats)``:
        ``logprobs`` float32 of shape (n,), ``token_stats`` float32 of shape
        (:data:`N_TOKEN_STATS`, n) (Min-K%++'s ``mu`` and ``sigma`` and the ``top1`` flag
        per token), or None in a row written before it was stored in full.
        """
        out = {}
        for h, (energy, n_tokens, truncated, blob, stats) in self.get_rows(key, text_hashes).items():
            logprobs = np.frombuffer(blob, dtype=np.float32).copy()
            if stats is not None:
                stats = np.frombuffer(stats, dtype=np.float32).copy()
                stats = stats.reshape(N_TOKEN_STATS, len(logprobs)) if stats.size == N_TOKEN_STATS * len(
                    logprobs) else None  # (2, n): mu and sigma only, from before top1
            out[h] = (float("nan") if energy is None else energy, int(n_tokens), bool(truncated), logprobs, stats)
        return out

    def put_many(self, key: str, rows: Mapping[str, tuple]) -> None:
        """Store rows ``text_hash -> (energy, n_tokens, truncated, logprobs[, token_stats])`` in one transaction.

        Raises
        ------
        ValueError
            ``token_stats`` not of shape (N_TOKEN_STATS, len(logprobs)).
        """
        payload = {}
        for h, (e, n, t, lp, *rest) in rows.items():
            lp = np.asarray(lp, dtype=np.float32)
            stats = rest[0] if rest else None
            if stats is not None:
                stats = np.asarray(stats, dtype=np.float32)
                if stats.shape != (N_TOKEN_STATS, lp.size):
                    raise ValueError(f"token_stats of {h} has shape {stats.shape}, expected ({N_TOKEN_STATS}, "
                                     f"{lp.size}): mu, sigma and top1 of each scored token")
                stats = stats.tobytes()
            payload[h] = (float(e), int(n), int(bool(t)), lp.tobytes(), stats)
        self.put_rows(key, payload)
