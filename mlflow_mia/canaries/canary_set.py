"""A canary set: m synthetic records, each with a repetition count and an independent inclusion bit.

The auditor plants the *included* canaries in the training data (each copied as many
times as its repetition count, :func:`~mlflow_mia.canaries.insert.insert`) and keeps
the rest out. Because each bit is an independent fair coin (``p_include = 1/2``), the
included and excluded canaries are exchangeable before training, which is what the
one-run bound of Steinke, Nasr and Jagielski (2023) needs, and what an audit over the
user's own pool lacks (its membership was not randomised per record).

The set is the auditor's secret: :meth:`CanarySet.save` writes its texts, secrets and
bits to a file readable by its owner only (mode 0600); what reaches MLflow is its
counts and keyed hashes (:meth:`CanarySet.keyed_hashes`, :meth:`CanarySet.digest`).
Its secrets and inclusion bits are drawn from the operating system's cryptographic
source (:mod:`secrets`), so nothing logged (counts, settings, seeds) regenerates them;
an explicit ``seed`` draws them from ``numpy.random.default_rng(seed)`` instead, for a
demo that must be reproducible (and that anyone who knows the seed can regenerate).

References
----------
.. [1] N. Carlini, C. Liu, U. Erlingsson, J. Kos, D. Song, "The Secret Sharer: Evaluating and Testing
   Unintended Memorization in Neural Networks", USENIX Security 2019, Sec. 3-4.
.. [2] T. Steinke, M. Nasr, M. Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023, Sec. 3.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass

import numpy as np
import pandas as pd

from mlflow_mia.canaries.templates import Template, parse_templates
from mlflow_mia.hashing import keyed_hash, lookup_hash

__all__ = ["CanarySet", "make_canaries", "DEFAULT_REPETITIONS"]

DEFAULT_REPETITIONS = (1, 2, 4, 8, 16)
FILE_FORMAT = "mlflow-mia-canaries/1"


@dataclass(frozen=True, eq=False)
class CanarySet:
    """m canaries with their repetition counts and inclusion bits (the auditor's secret).

    Attributes
    ----------
    texts : tuple of str, length m
        The canary texts (unique).
    template_ids : tuple of str, length m
        The template each canary was drawn from.
    secrets : tuple of (str or None), length m
        The digit secret of a secret-format canary (None for the others).
    repetitions : ndarray of shape (m,), dtype int64
        Copies of the canary inserted when it is included (>= 1).
    included : ndarray of shape (m,), dtype bool
        The inclusion bits: True = planted in the training data.
    templates : tuple of Template
        The templates used (those of the secret-format canaries give the candidate spaces).
    seed : int or None
        The seed the set was drawn with, or None: drawn from the cryptographic source
        (:class:`CryptoRandom`), so no seed regenerates it. Kept in the secret file only.
    p_include : float
        The inclusion probability of each bit.
    """

    texts: tuple
    template_ids: tuple
    secrets: tuple
    repetitions: np.ndarray
    included: np.ndarray
    templates: tuple
    seed: int | None = None
    p_include: float = 0.5

    def __post_init__(self):
        m = len(self.texts)
        reps = np.asarray(self.repetitions, dtype=np.int64)
        bits = np.asarray(self.included, dtype=bool)
        object.__setattr__(self, "repetitions", reps)
        object.__setattr__(self, "included", bits)
        for name, got in (("template_ids", len(self.template_ids)), ("secrets", len(self.secrets)),
                          ("repetitions", reps.shape[0] if reps.ndim == 1 else -1),
                          ("included", bits.shape[0] if bits.ndim == 1 else -1)):
            if got != m:
                raise ValueError(f"canary set: {name} has {got} entries for {m} texts; give one per canary")
        if len(set(self.texts)) != m:
            raise ValueError("canary set: the canary texts must be unique")
        if m and reps.min() < 1:
            raise ValueError("canary set: every repetition count must be >= 1")
        known = {t.id for t in self.templates}
        missing = sorted(set(self.template_ids) - known)
        if missing:
            raise ValueError(f"canary set: template ids {missing} are not among the templates {sorted(known)}")

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def ids(self) -> tuple[str, ...]:
        """Canary ids ``c00000``, ... (their position in the set; safe to log)."""
        return tuple(f"c{i:05d}" for i in range(len(self)))

    def template(self, template_id: str) -> Template:
        return next(t for t in self.templates if t.id == template_id)

    @property
    def is_secret_format(self) -> np.ndarray:
        """ndarray of shape (m,), dtype bool: canaries whose exposure is defined."""
        return np.array([s is not None for s in self.secrets], dtype=bool)

    @property
    def n_copies(self) -> int:
        """Records the included canaries add to the training data (sum of their repetition counts)."""
        return int(self.repetitions[self.included].sum())

    def copies(self) -> list[str]:
        """The training records to insert: each included canary ``repetitions`` times, in canary order."""
        return [t for t, r, inc in zip(self.texts, self.repetitions, self.included) if inc for _ in range(int(r))]

    def keyed_hashes(self, key) -> list[str]:
        """``HMAC-SHA256(key, sha256(text))`` of every canary (:func:`mlflow_mia.hashing.lookup_hash`)."""
        return [lookup_hash(t, key) for t in self.texts]

    def digest(self, key) -> str:
        """16 hex characters naming this set (texts, repetitions and bits) under ``key``, without revealing it."""
        payload = json.dumps([list(self.texts), self.repetitions.tolist(), self.included.astype(int).tolist()])
        return keyed_hash(hashlib.sha256(payload.encode("utf-8")).hexdigest(), key)[:16]

    def counts(self) -> dict[str, int]:
        """Counts safe to log: canaries, included, secret-format, inserted copies, and per repetition count."""
        out = {"n_canaries": len(self), "n_included": int(self.included.sum()),
               "n_secret_format": int(self.is_secret_format.sum()), "n_copies": self.n_copies}
        for r in sorted(set(self.repetitions.tolist())):
            sel = self.repetitions == r
            out[f"r{r}/n_canaries"] = int(sel.sum())
            out[f"r{r}/n_included"] = int((sel & self.included).sum())
        return out

    def id_frame(self):
        """A DataFrame safe to hand to MLflow: ``canary_id``, ``template``, ``repetitions`` (no text, secret or bit).

        The ``data`` of ``mlflow.models.evaluate(..., evaluator_config={"mia": {"method": "canaries", ...}})``.
        """
        return pd.DataFrame({"canary_id": self.ids, "template": self.template_ids, "repetitions": self.repetitions})

    def to_dict(self) -> dict:
        return {"format": FILE_FORMAT, "seed": self.seed, "p_include": self.p_include,
                "templates": [{"id": t.id, "text": t.text} for t in self.templates],
                "canaries": [{"text": t, "template": tid, "secret": s, "repetitions": int(r), "included": bool(b)}
                             for t, tid, s, r, b in zip(self.texts, self.template_ids, self.secrets,
                                                        self.repetitions, self.included)]}

    @classmethod
    def from_dict(cls, data: dict) -> "CanarySet":
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        ValueError
            Not a canary file of this format.
        """
        if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
            raise ValueError(f"not a canary set file (expected format {FILE_FORMAT!r})")
        rows = data["canaries"]
        return cls(texts=tuple(r["text"] for r in rows), template_ids=tuple(r["template"] for r in rows),
                   secrets=tuple(r["secret"] for r in rows), repetitions=np.array([r["repetitions"] for r in rows]),
                   included=np.array([r["included"] for r in rows], dtype=bool),
                   templates=parse_templates(data["templates"]),
                   seed=None if data.get("seed") is None else int(data["seed"]), p_include=float(data["p_include"]))

    def save(self, path) -> str:
        """Write the auditor's secret file (JSON, mode 0600: owner read/write only); returns the path.

        An existing file is replaced (its mode is set to 0600 first).
        """
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        if os.path.exists(path):
            os.chmod(path, 0o600)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh)
        os.chmod(path, 0o600)
        return path

    @classmethod
    def load(cls, path) -> "CanarySet":
        """Read a file written by :meth:`save`.

        Raises
        ------
        FileNotFoundError
            No such file.
        ValueError
            Not a canary set file.
        """
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"canary set file {path!r} does not exist")
        with open(path, encoding="utf-8") as fh:
            try:
                data = json.load(fh)
            except json.JSONDecodeError:
                raise ValueError(f"{path!r} is not a canary set file (not JSON)") from None
        return cls.from_dict(data)


class CryptoRandom:
    """The draws :func:`make_canaries` and :meth:`Template.fill` need, from the cryptographic source.

    Backed by :class:`secrets.SystemRandom` (``os.urandom``): its output cannot be
    predicted from earlier output, and there is no seed to search for. It offers the two
    methods of ``numpy.random.Generator`` used here.

    References
    ----------
    .. [1] Python documentation, "secrets: Generate secure random numbers for managing secrets",
       https://docs.python.org/3/library/secrets.html

    Examples
    --------
    >>> rng = CryptoRandom()
    >>> digits = rng.integers(0, 10, size=6)
    >>> digits.shape, bool(((digits >= 0) & (digits < 10)).all()), 0 <= rng.integers(3) < 3
    ((6,), True, True)
    >>> u = rng.random(4)
    >>> u.shape, bool(((u >= 0) & (u < 1)).all())
    ((4,), True)
    """

    def __init__(self):
        self._source = secrets.SystemRandom()

    def integers(self, low: int, high: int | None = None, size: int | None = None):
        """Uniform integers in ``[low, high)`` (``[0, low)`` when ``high`` is None): one, or an array of ``size``."""
        low, high = (0, int(low)) if high is None else (int(low), int(high))
        if size is None:
            return low + secrets.randbelow(high - low)
        return np.array([low + secrets.randbelow(high - low) for _ in range(int(size))], dtype=np.int64)

    def random(self, size: int | None = None):
        """Uniform floats in ``[0, 1)`` (53 random bits each); one float, or an array of ``size``."""
        if size is None:
            return self._source.random()
        return np.array([self._source.random() for _ in range(int(size))], dtype=np.float64)


def make_canaries(m: int, templates=None, *, repetitions=DEFAULT_REPETITIONS, p_include: float = 0.5,
                  seed: int | None = None) -> CanarySet:
    """Draw m canaries: texts from ``templates``, repetition counts, and independent inclusion bits.

    Canary ``i`` uses template ``i mod len(templates)`` and repetition count
    ``repetitions[(i // len(templates)) mod len(repetitions)]``, so every repetition
    count gets every template in (nearly) equal numbers; the slots are filled at random
    and each inclusion bit is an independent Bernoulli(``p_include``) draw. Texts are
    unique (a collision is drawn again).

    The secrets and bits come from the cryptographic source (:class:`CryptoRandom`,
    Python's :mod:`secrets`) unless ``seed`` is given: then from
    ``numpy.random.default_rng(seed)``, reproducible by anyone who knows or can guess the
    seed (a search over small seeds against the logged counts finds it), so a seeded set
    is for a demo or a test, never for an audit whose canaries must stay secret: a gated
    canary audit refuses it unless ``allow_seeded_canaries``, which records it as not a
    release audit (:meth:`mlflow_mia.options.canary.CanaryOptions.gate`).

    Parameters
    ----------
    m : int
        Number of canaries (>= 2).
    templates : sequence of Template, str or dict, optional
        See :func:`~mlflow_mia.canaries.templates.parse_templates`; default
        :data:`~mlflow_mia.canaries.templates.DEFAULT_TEMPLATES`.
    repetitions : sequence of int
        Copies of an included canary in the training data (default 1, 2, 4, 8, 16).
    p_include : float in (0, 1)
        Inclusion probability (1/2 for the one-run bound, Steinke et al. 2023 Sec. 3).
    seed : int >= 0, optional
        Draw a reproducible set from this seed (a demo); default: the cryptographic source.

    Returns
    -------
    CanarySet

    Raises
    ------
    ValueError
        ``m < 2``, a repetition count < 1, ``p_include`` outside (0, 1), a ``seed`` that
        is not an int >= 0, or a secret space too small for the canaries of its template.

    Examples
    --------
    >>> cs = make_canaries(10, ["my pin is {digits:4}"], repetitions=(1, 4))
    >>> len(cs), sorted(set(cs.repetitions.tolist())), cs.texts[0].startswith("my pin is "), cs.seed
    (10, [1, 4], True, None)
    >>> demo = make_canaries(10, ["my pin is {digits:4}"], seed=0)  # reproducible: a demo only
    >>> make_canaries(10, ["my pin is {digits:4}"], seed=0).texts == demo.texts
    True
    """
    if not isinstance(m, (int, np.integer)) or m < 2:
        raise ValueError(f"m must be an int >= 2 (canaries), got {m!r}")
    reps = tuple(int(r) for r in repetitions)
    if not reps or min(reps) < 1:
        raise ValueError(f"repetitions must be a non-empty list of counts >= 1, got {repetitions!r}")
    if not 0.0 < float(p_include) < 1.0:
        raise ValueError(f"p_include must be in (0, 1), got {p_include!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ValueError(f"seed must be an int >= 0 (a reproducible demo set) or None (secrets drawn from the "
                         f"cryptographic source), got {seed!r}")
    templates = parse_templates(templates)
    for t in templates:
        need = -(-m // len(templates))
        if t.is_secret_format and need > t.space_size // 2:
            raise ValueError(f"template {t.id!r} has {t.space_size} secrets, too few for {need} canaries (unique "
                             "secrets, at most half the space); use more digits or fewer canaries")
    rng = CryptoRandom() if seed is None else np.random.default_rng(seed)
    texts, tids, secrets_, seen = [], [], [], set()
    for i in range(m):
        t = templates[i % len(templates)]
        for _ in range(1000):
            text, secret = t.fill(rng)
            if text not in seen:
                break
        else:  # pragma: no cover - needs a near-full space
            raise ValueError(f"template {t.id!r}: could not draw a new unique canary")
        seen.add(text)
        texts.append(text)
        tids.append(t.id)
        secrets_.append(secret)
    rep = np.array([reps[(i // len(templates)) % len(reps)] for i in range(m)], dtype=np.int64)
    included = rng.random(m) < p_include
    return CanarySet(texts=tuple(texts), template_ids=tuple(tids), secrets=tuple(secrets_), repetitions=rep,
                     included=included, templates=templates, seed=None if seed is None else int(seed),
                     p_include=float(p_include))
