"""The shadow models' keyed training record, and the ``shadow_membership`` input of ``lira_online`` read from it.

:class:`ShadowRecord` says which candidate texts each shadow model trained on, as keyed
hashes ``HMAC-SHA256(key, sha256(text))`` (never the texts); :func:`shadow_membership`
turns it into the ``shadow_membership`` input (:mod:`mlflow_mia.attacks.lira_online`) for
an audit's texts. :func:`mlflow_mia.demo.shadows.train_shadows` writes the record; an
audit reads it (the option ``shadow_record``) to give stage 1 that input.

References
----------
.. [1] N. Carlini, S. Chien, M. Nasr, S. Song, A. Terzis, F. Tramer, "Membership Inference Attacks From First
   Principles", IEEE S&P 2022, Sec. IV.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mlflow_mia.data import text_hash
from mlflow_mia.hashing import HashKey, keyed_hash

__all__ = ["ShadowRecord", "shadow_membership", "stage_membership"]


@dataclass(frozen=True)
class ShadowRecord:
    """Which candidate texts each shadow model trained on, under a keyed hash (never the texts).

    Attributes
    ----------
    text_hmacs : tuple of str, length n
        ``HMAC-SHA256(key, sha256(text))`` of each candidate text, in candidate order.
    membership : ndarray of shape (k, n), bool
        True where shadow j trained on candidate i.
    key_check : str
        :attr:`mlflow_mia.hashing.HashKey.check` of the key (identifies it, reveals nothing).
    candidate_digest : str
        Digest of the candidates' sha256 list and groups: what a resumed build checks.
    recipe : dict
        :meth:`ShadowRecipe.to_dict`.
    seed : int
        Seed of the halves.
    uris : tuple of str
        Version-pinned URI of each shadow model (``models:/<name>-<j>/<version>``), in order.
    """

    text_hmacs: tuple
    membership: np.ndarray
    key_check: str
    candidate_digest: str
    recipe: dict
    seed: int
    uris: tuple = ()

    @property
    def k(self) -> int:
        return int(self.membership.shape[0])

    def to_dict(self) -> dict:
        return {"text_hmacs": list(self.text_hmacs), "membership": ["".join("1" if v else "0" for v in row)
                                                                    for row in self.membership],
                "key_check": self.key_check, "candidate_digest": self.candidate_digest, "recipe": self.recipe,
                "seed": self.seed, "uris": list(self.uris)}

    @classmethod
    def from_dict(cls, data: dict) -> "ShadowRecord":
        member = np.array([[c == "1" for c in row] for row in data["membership"]], dtype=bool)
        return cls(tuple(data["text_hmacs"]), member, data["key_check"], data["candidate_digest"], data["recipe"],
                   int(data["seed"]), tuple(data.get("uris", ())))

    def to_json(self, path) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=1)

    @classmethod
    def from_json(cls, path) -> "ShadowRecord":
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(json.load(fh))


def shadow_membership(record: ShadowRecord, texts: Sequence[str], key) -> np.ndarray:
    """The ``shadow_membership`` input of ``lira_online`` for ``texts``: which shadow trained on each.

    Parameters
    ----------
    record : ShadowRecord or path-like
        The shadows' training record (:func:`train_shadows`).
    texts : sequence of str
        The audit's texts in its row order (pool rows, then population rows).
    key : HashKey, bytes or str
        The key the record was written under.

    Returns
    -------
    ndarray of shape (len(texts), k), bool
        Row i, column j: shadow j trained on text i. A text that is not a candidate is
        OUT for every shadow (all False): true, and ``lira_online`` will ask for it to
        be a candidate.

    Raises
    ------
    ValueError
        ``key`` is not the record's key (the message gives both checks).
    """
    if not isinstance(record, ShadowRecord):
        record = ShadowRecord.from_json(record)
    key = key if isinstance(key, HashKey) else HashKey.from_bytes(key, source="argument")
    if key.check != record.key_check:
        raise ValueError(f"the shadow record was written under the key with check {record.key_check}, not this one "
                         f"({key.check}): pass the key the shadows were trained with")
    row = {h: i for i, h in enumerate(record.text_hmacs)}
    out = np.zeros((len(texts), record.k), dtype=bool)
    for i, text in enumerate(texts):
        j = row.get(keyed_hash(text_hash(str(text)), key))
        if j is not None:
            out[i] = record.membership[:, j]
    return out


def stage_membership(stage) -> np.ndarray:
    """Stage 1's ``shadow_membership`` input: the audit models' ``shadow_membership`` reader on the stage's texts.

    Parameters
    ----------
    stage : StageOne
        ``stage.models.shadow_membership`` is ``texts -> bool (n, k)`` (e.g.
        ``functools.partial(shadow_membership, record, key=key)``), ``stage.texts`` the pool
        then the population texts.

    Returns
    -------
    ndarray of shape (len(stage.texts), k), bool

    Raises
    ------
    ValueError
        No reader (no shadow record given), or a membership whose shape is not (texts, reference models).
    """
    read = getattr(stage.models, "shadow_membership", None)
    if read is None:
        raise ValueError("lira_online needs the shadows' training record: give the shadows as the references and "
                         "their record (option shadow_record, --shadow-record PATH, written by mlflow-mia "
                         "train-shadows), or shadow_membership=mlflow_mia.attacks.shadow_record.shadow_membership("
                         "record, texts, key) with the signals (stage_one(..., given=...))")
    member = np.asarray(read(list(stage.texts)), dtype=bool)
    shape = (len(stage.texts), len(stage.models.references))
    if member.shape != shape:
        raise ValueError(f"the shadow record gives a membership of shape {member.shape}, expected {shape} (texts, "
                         "reference models): give the record's shadows as the references, in its order")
    return member
