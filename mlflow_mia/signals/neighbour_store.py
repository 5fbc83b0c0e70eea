"""Neighbour edits cached beside the signal cache (``neighbours.sqlite``)."""

from __future__ import annotations

import json
import os

from mlflow_mia.signals.cache import SignalCache, SqliteSpecStore

__all__: list[str] = []


class NeighbourStore(SqliteSpecStore):
    """Neighbour edits cached beside a :class:`SignalCache` (``neighbours.sqlite``): spans and vocabulary words only."""

    table = "neighbour_rows"
    columns = ("edits TEXT",)

    def __init__(self, cache: SignalCache):
        super().__init__(os.path.join(os.path.dirname(os.path.abspath(cache.path)), "neighbours.sqlite"))

    def get_many(self, key: str, hashes) -> dict:
        """Stored neighbour edits of ``hashes`` under ``key`` (missing or damaged rows are absent)."""
        return {h: [tuple(tuple(e) for e in nb) for nb in json.loads(edits)]
                for h, (edits,) in self.get_rows(key, hashes).items()}

    def put_many(self, key: str, rows: dict) -> None:
        """Store ``text_hash -> edits`` in one transaction."""
        self.put_rows(key, {h: (json.dumps(edits),) for h, edits in rows.items()})
