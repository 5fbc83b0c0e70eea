"""On-disk signal cache: one SQLite file, rows keyed by signal key and text hash.

The signal key is a digest of everything that decides a signal's value: the
model identity, the tokenizer, and the value-relevant signal settings. Each key
stores its spec, which is checked on read. Rows are committed chunk by chunk,
so an audit killed halfway resumes from what it had computed. Raw texts are
never stored: only their sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from typing import Iterable, Mapping

import numpy as np

__all__ = ["SignalCache", "SqliteSpecStore", "signal_key", "default_cache_dir"]


def default_cache_dir() -> str:
    """``$MLFLOW_MIA_CACHE`` or ``~/.cache/mlflow_mia``."""
    return os.environ.get("MLFLOW_MIA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mlflow_mia")


def signal_key(spec: Mapping) -> str:
    """Digest of a JSON-able signal spec (model id, tokenizer id, settings)."""
    return hashlib.sha256(json.dumps(dict(spec), sort_keys=True).encode()).hexdigest()[:32]


class SqliteSpecStore:
    """A SQLite file with a ``specs`` table: the shared base of the on-disk caches.

    Each cache adds its own rows table (``table_sql``); rows are keyed by the digest
    of a spec (:func:`signal_key`), and :meth:`register` checks that the spec
    stored under a key is the one asked for.
    """

    table_sql = ""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, timeout=60)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("CREATE TABLE IF NOT EXISTS specs (key TEXT PRIMARY KEY, spec TEXT NOT NULL)")
        self._conn.execute(self.table_sql)
        self._conn.commit()

    def register(self, spec: Mapping) -> str:
        """Store ``spec`` under its key and return the key.

        Raises
        ------
        RuntimeError
            A different spec is stored under the same key (a corrupt cache file).
        """
        key = signal_key(spec)
        text = json.dumps(dict(spec), sort_keys=True)
        with self._lock:
            row = self._conn.execute("SELECT spec FROM specs WHERE key = ?", (key,)).fetchone()
            if row is None:
                self._conn.execute("INSERT INTO specs VALUES (?, ?)", (key, text))
                self._conn.commit()
            elif row[0] != text:
                raise RuntimeError(f"cache {self.path} holds another spec under key {key}; delete the file")
        return key

    def close(self) -> None:
        with self._lock:
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
    (bool) and the masked-token log-probs (float32 bytes). Extra per-sample arrays
    (e.g. neighbour energies) use the same table under their own spec.
    """

    table_sql = ("CREATE TABLE IF NOT EXISTS signals (key TEXT NOT NULL, text_hash TEXT NOT NULL, energy REAL,"
                 " n_tokens INTEGER, truncated INTEGER, logprobs BLOB, PRIMARY KEY (key, text_hash))")

    def __init__(self, path: str | os.PathLike | None = None):
        path = os.fspath(path or default_cache_dir())
        if not path.endswith(".sqlite"):
            os.makedirs(path, exist_ok=True)
            path = os.path.join(path, "signals.sqlite")
        else:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        super().__init__(path)

    def __repr__(self) -> str:
        return f"SignalCache({self.path!r})"

    def get_many(self, key: str, text_hashes: Iterable[str]) -> dict[str, tuple[float, int, bool, np.ndarray]]:
        """Cached rows of ``text_hashes`` under ``key`` (missing hashes are absent)."""
        hashes = list(dict.fromkeys(text_hashes))
        out = {}
        with self._lock:
            for start in range(0, len(hashes), 500):
                part = hashes[start:start + 500]
                marks = ",".join("?" * len(part))
                rows = self._conn.execute(
                    f"SELECT text_hash, energy, n_tokens, truncated, logprobs FROM signals "
                    f"WHERE key = ? AND text_hash IN ({marks})", [key, *part]).fetchall()
                for h, energy, n_tokens, truncated, blob in rows:
                    out[h] = (float("nan") if energy is None else energy, int(n_tokens), bool(truncated),
                              np.frombuffer(blob, dtype=np.float32).copy())
        return out

    def put_many(self, key: str, rows: Mapping[str, tuple[float, int, bool, np.ndarray]]) -> None:
        """Store rows ``text_hash -> (energy, n_tokens, truncated, logprobs)`` in one transaction."""
        payload = [(key, h, float(e), int(n), int(bool(t)), np.asarray(lp, dtype=np.float32).tobytes())
                   for h, (e, n, t, lp) in rows.items()]
        with self._lock:
            self._conn.executemany("INSERT OR REPLACE INTO signals VALUES (?, ?, ?, ?, ?, ?)", payload)
            self._conn.commit()

    def count(self, key: str | None = None) -> int:
        with self._lock:
            if key is None:
                return self._conn.execute("SELECT COUNT(*) FROM signals").fetchone()[0]
            return self._conn.execute("SELECT COUNT(*) FROM signals WHERE key = ?", (key,)).fetchone()[0]
