"""The pure parts of shadow training: the target's recipe, the balanced halves, the keyed training record.

:mod:`mlflow_mia.demo.shadows` trains the shadow models; this module holds what needs
no model: :class:`ShadowRecipe` (the recipe file), :func:`balanced_halves` (LiRA's
design: with k even every candidate is IN for exactly k / 2 shadows),
:class:`ShadowRecord` (which candidate texts each shadow trained on, as keyed hashes
``HMAC-SHA256(key, sha256(text))``, never the texts) and :func:`shadow_membership` (the
``shadow_membership`` input of ``lira_online`` for an audit's texts); these two live in
:mod:`mlflow_mia.attacks.shadow_record` (an audit reads the record) and are re-exported here.

References
----------
.. [1] N. Carlini, S. Chien, M. Nasr, S. Song, A. Terzis, F. Tramer, "Membership Inference Attacks From First
   Principles", IEEE S&P 2022, Sec. IV.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np

from mlflow_mia.attacks.shadow_record import ShadowRecord, shadow_membership  # noqa: F401  (re-exported)
from mlflow_mia.config import record_digest
from mlflow_mia.demo.dp import DPConfig
from mlflow_mia.demo.train import TrainConfig

__all__: list[str] = []

#: Second entry of the seed sequence of the halves (keeps them apart from other draws of the same seed).
HALVES_SEED_OFFSET = 104729
_TRAIN_FIELDS = {f for f in TrainConfig.__dataclass_fields__ if f != "seed"}


@dataclass(frozen=True)
class ShadowRecipe:
    """The recipe the target was trained with, which every shadow model repeats.

    Attributes
    ----------
    base_model : str
        What the target was fine-tuned from: a model URI or a local folder
        (:func:`mlflow_mia.models.resolve.resolve_model`).
    train : TrainConfig
        Epochs or steps, batch size, learning rate, max length, schedule. Its ``seed``
        is the base seed: shadow i trains with seed ``train.seed + 1 + i``.
    dp : DPConfig or None
        DP-SGD settings when the target was trained with DP-SGD (opacus), else None.

    Raises
    ------
    ValueError
        An empty ``base_model``; (from the JSON form) unknown keys.
    """

    base_model: str
    train: TrainConfig = field(default_factory=TrainConfig)
    dp: DPConfig | None = None

    def __post_init__(self):
        if not isinstance(self.base_model, str) or not self.base_model.strip():
            raise ValueError("ShadowRecipe.base_model must name the model the target was fine-tuned from (a model "
                             f"URI or folder), got {self.base_model!r}")

    def to_dict(self) -> dict:
        """JSON-able form: ``{"base_model", "train": {...}, "dp": {...} or None}``."""
        return {"base_model": self.base_model, "train": asdict(self.train),
                "dp": None if self.dp is None else asdict(self.dp)}

    @classmethod
    def from_dict(cls, data: dict) -> "ShadowRecipe":
        """Inverse of :meth:`to_dict`; ``train`` and ``dp`` may leave fields out (defaults).

        Raises
        ------
        ValueError
            Unknown keys at any level (the message lists the known ones).
        """
        _known(data, {"base_model", "train", "dp"}, "recipe")
        train = dict(data.get("train") or {})
        _known(train, set(TrainConfig.__dataclass_fields__), "recipe 'train'")
        dp = data.get("dp")
        if dp is not None:
            _known(dp, set(DPConfig.__dataclass_fields__), "recipe 'dp'")
            dp = DPConfig(**{**dp, "freeze": tuple(dp.get("freeze", ()))})
        return cls(base_model=data.get("base_model"), train=TrainConfig(**train), dp=dp)

    @classmethod
    def from_json(cls, path) -> "ShadowRecipe":
        """Read a recipe file (:meth:`to_json`)."""
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(json.load(fh))

    def to_json(self, path) -> None:
        """Write the recipe file (sorted keys, indented)."""
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=2, sort_keys=True)

    @property
    def digest(self) -> str:
        """:func:`~mlflow_mia.config.record_digest` of :meth:`to_dict`."""
        return record_digest(self.to_dict())

    def params(self) -> dict:
        """Flat MLflow params ``recipe.<field>`` (``recipe.dp.<field>`` with DP-SGD)."""
        out = {"recipe.base_model": self.base_model, "recipe.digest": self.digest}
        out.update({f"recipe.{k}": v for k, v in asdict(self.train).items() if k in _TRAIN_FIELDS})
        if self.dp is not None:
            out.update({f"recipe.dp.{k}": v for k, v in asdict(self.dp).items()})
        return out


def _known(data, known: set, what: str) -> None:
    if not isinstance(data, dict):
        raise ValueError(f"the {what} must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in the {what}; known keys: {sorted(known)}")


def balanced_halves(n_units: int, k: int, *, seed: int = 0) -> np.ndarray:
    """Which units each of k shadow models trains on: the balanced design of LiRA.

    Parameters
    ----------
    n_units : int
        Candidate units (texts, or groups such as articles).
    k : int
        Shadow models, >= 1.
    seed : int

    Returns
    -------
    ndarray of shape (k, n_units), bool
        For each unit, the shadows it is IN for are a uniformly random ``floor(k / 2)``
        of the k (the ranks of k uniform draws, as the paper's code does), plus, for odd
        k, with probability 1/2 the next one. With k even every unit is IN for exactly
        k / 2 shadows; each shadow then trains on about half of the units.
        ``numpy.random.default_rng([seed, HALVES_SEED_OFFSET])``: same arguments, same matrix.

    Raises
    ------
    ValueError
        ``k < 1`` or ``n_units < 1``.

    Examples
    --------
    >>> balanced_halves(5, 4, seed=1).sum(axis=0).tolist()
    [2, 2, 2, 2, 2]
    """
    if isinstance(k, bool) or int(k) != k or k < 1 or int(n_units) != n_units or n_units < 1:
        raise ValueError(f"need k >= 1 shadow models and n_units >= 1 candidates, got k={k!r}, n_units={n_units!r}")
    rng = np.random.default_rng([int(seed), HALVES_SEED_OFFSET])
    ranks = rng.uniform(size=(k, n_units)).argsort(axis=0).argsort(axis=0)
    member = ranks < k // 2
    if k % 2:
        member |= (ranks == k // 2) & (rng.uniform(size=n_units) < 0.5)[None, :]
    return member
