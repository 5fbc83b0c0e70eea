"""Neighbour edits cached beside the signal cache (``neighbours.sqlite``)."""

from __future__ import annotations

import json
import os

from mlflow_mia.signals.cache import SignalCache, SqliteSpecStore

__all__ = ["NeighbourStore"]


class NeighbourStore(SqliteSpecStore):
    """Neighbour edits cached beside a :class:`SignalCache` (``neighbours.sqlite``): spans and vocabulary words only."""

    table_sql = ("CREATE TABLE IF NOT EXISTS neighbours (key TEXT NOT NULL, text_hash TEXT NOT NULL,"
                 " edits TEXT NOT NULL, PRIMARY KEY (key, text_hash))")

    def __init__(self, cache: SignalCache):
        super().__init__(os.path.join(os.path.dirname(os.path.abspath(cache.path)), "neighbours.sqlite"))

    def get_many(self, key: str, hashes) -> dict:
        hashes, out = list(dict.fromkeys(hashes)), {}
        with self._lock:
            for start in range(0, len(hashes), 500):
                part = hashes[start:start + 500]
                rows = self._conn.execute(
                    f"SELECT text_hash, edits FROM neighbours WHERE key = ? AND text_hash IN ({','.join('?' * len(part))})",
                    [key, *part]).fetchall()
                out.update({h: [tuple(tuple(e) for e in nb) for nb in json.loads(edits)] for h, edits in rows})
        return out

    def put_many(self, key: str, rows: dict) -> None:
        with self._lock:
            self._conn.executemany("INSERT OR REPLACE INTO neighbours VALUES (?, ?, ?)",
                                   [(key, h, json.dumps(edits)) for h, edits in rows.items()])
            self._conn.commit()
