"""The shadow models' keyed training record, bound to the shadows and the pool, and the input it gives.

:class:`ShadowRecord` says which candidate texts each shadow model trained on, as keyed
hashes ``HMAC-SHA256(key, sha256(text))`` (never the texts); :func:`shadow_membership`
turns it into the ``shadow_membership`` input (:mod:`mlflow_mia.attacks.lira_online`) for
an audit's texts. :func:`mlflow_mia.demo.shadows.train_shadows` writes the record; an
audit reads it (the option ``shadow_record``) to give stage 1 that input.

The record decides ``lira_online`` and which shadows count as OUT for ``lira_offline`` and
``rmia``, so it is never taken as given:

- :func:`check_shadow_record`: it is bound to the sha256 weights digest of each shadow
  (``weights_id`` of the loaded models, in the references' order) and to the keyed digest
  of the pool it was made for (:func:`mlflow_mia.tracking.gate_history.pool_digest`);
  a record that names neither (written before the binding) is refused with how to re-create it.
- :func:`check_shadow_direction`: on the population rows, the IN shadows' statistic must not
  be resolved below the OUT shadows' one (a record with IN and OUT swapped).
- :func:`shadow_record_digest`: what the audit logs, so the run and the gate record say
  which record decided.

References
----------
.. [1] N. Carlini, S. Chien, M. Nasr, S. Song, A. Terzis, F. Tramer, "Membership Inference Attacks From First
   Principles", IEEE S&P 2022, Sec. IV.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np
from scipy import stats

from mlflow_mia.config import record_digest
from mlflow_mia.data import text_hash
from mlflow_mia.hashing import HashKey, keyed_hash

__all__ = ["ShadowRecord", "check_shadow_direction", "check_shadow_record", "shadow_membership"]

#: Format of the record's JSON: 2 binds it to the shadows' weights and the pool (format 1 did neither).
RECORD_FORMAT = 2
#: Confidence of the one-sided interval of the direction check (a correct record of shadows that learned
#: nothing is refused with probability 1 - this).
DIRECTION_CONFIDENCE = 0.999
#: How to re-create a record: in each refusal that asks for one.
_RECREATE = ("re-create the record with mlflow-mia train-shadows (the same --recipe, --candidates, --count, --name "
             "and --halves-seed, plus --pool POOL, the audited pool; registered shadows are not retrained, only the "
             "record is rewritten) or mlflow_mia.demo.shadows.train_shadows(..., pools=[pool])")


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
    weights : tuple of str, length k
        ``sha256:<hex>`` weights digest of each shadow (``weights_id`` of the loaded model,
        :func:`mlflow_mia.signals.identity.weights_digest`), in order. Empty in a record
        written before format 2: such a record cannot be checked and is refused.
    pools : tuple of str
        Keyed digests (:func:`mlflow_mia.tracking.gate_history.pool_digest`, under the
        record's key) of the pools the record was made for: an audit of another pool is refused.
    """

    text_hmacs: tuple
    membership: np.ndarray
    key_check: str
    candidate_digest: str
    recipe: dict
    seed: int
    uris: tuple = ()
    weights: tuple = ()
    pools: tuple = ()

    @property
    def k(self) -> int:
        return int(self.membership.shape[0])

    @property
    def digest(self) -> str:
        """:func:`shadow_record_digest` of this record."""
        return shadow_record_digest(self)

    def to_dict(self) -> dict:
        return {"format": RECORD_FORMAT, "text_hmacs": list(self.text_hmacs),
                "membership": ["".join("1" if v else "0" for v in row) for row in self.membership],
                "key_check": self.key_check, "candidate_digest": self.candidate_digest, "recipe": self.recipe,
                "seed": self.seed, "uris": list(self.uris), "weights": list(self.weights),
                "pools": list(self.pools)}

    @classmethod
    def from_dict(cls, data: dict) -> "ShadowRecord":
        """Inverse of :meth:`to_dict`; a format-1 record (no ``weights``, ``pools``) loads with both empty.

        Raises
        ------
        ValueError
            A format newer than :data:`RECORD_FORMAT`, or a membership row of another length than ``text_hmacs``.
        """
        version = int(data.get("format", 1))
        if version > RECORD_FORMAT:
            raise ValueError(f"the shadow record has format {version}; this mlflow-mia reads formats up to "
                             f"{RECORD_FORMAT}: upgrade mlflow-mia")
        member = np.array([[c == "1" for c in row] for row in data["membership"]], dtype=bool)
        if member.ndim != 2 or member.shape[1] != len(data["text_hmacs"]):
            raise ValueError(f"the shadow record's membership has shape {member.shape}, expected (shadows, "
                             f"{len(data['text_hmacs'])} candidates)")
        return cls(tuple(data["text_hmacs"]), member, data["key_check"], data["candidate_digest"], data["recipe"],
                   int(data["seed"]), tuple(data.get("uris", ())), tuple(data.get("weights", ())),
                   tuple(data.get("pools", ())))

    def to_json(self, path) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=1)

    @classmethod
    def from_json(cls, path) -> "ShadowRecord":
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(json.load(fh))


def shadow_record_digest(record) -> str:
    """The digest of a shadow record: sha256 of its canonical JSON, 32 hex characters.

    What an audit logs (param ``shadow_record.digest``, ``AuditResult.models["shadow_record"]``)
    and a gate record keeps, so that a verdict names the record that decided ``lira_online`` and
    the OUT shadows of ``lira_offline`` and ``rmia``.

    Parameters
    ----------
    record : ShadowRecord, dict or path-like
        A record, its :meth:`ShadowRecord.to_dict`, or its JSON file.

    Returns
    -------
    str
        :func:`~mlflow_mia.config.record_digest` (sorted-key JSON) of :meth:`ShadowRecord.to_dict`,
        32 hex characters (128 bits: two records with the same digest cannot be made on purpose).
        Every field counts (membership, keyed hashes, weights, pools, URIs, recipe, seed); the JSON
        file's layout does not.

    Examples
    --------
    >>> r = ShadowRecord(("h1", "h2"), np.array([[True, False], [False, True]]), "c", "d", {}, 0)
    >>> len(shadow_record_digest(r)), shadow_record_digest(r) == shadow_record_digest(r.to_dict())
    (32, True)
    """
    if isinstance(record, dict):
        record = ShadowRecord.from_dict(record)
    elif not isinstance(record, ShadowRecord):
        record = ShadowRecord.from_json(record)
    return record_digest(record.to_dict(), length=32)


def _short(digest: str) -> str:
    return str(digest)[:19]  # "sha256:" and 12 hex


def check_shadow_record(record: ShadowRecord, *, weights: Sequence[str], pool_digest: str, where: str = "") -> None:
    """Refuse a shadow record that is not the loaded shadows' or was made for another pool.

    Parameters
    ----------
    record : ShadowRecord
    weights : sequence of str, length k
        ``weights_id`` (``sha256:<hex>``) of each loaded reference model, in the references' order.
    pool_digest : str
        Keyed digest of the audited pool (:func:`mlflow_mia.tracking.gate_history.pool_digest` of its text
        hashes and labels under the record's key).
    where : str
        The record's path, named in the messages.

    Raises
    ------
    ValueError
        A record without weights or pools (format 1, written before the binding: it cannot be
        checked; the message says how to re-create it); another number of references than the
        record has shadows; a reference whose weights are not the record's shadow's at its
        position (each mismatch named); an audited pool that is not one the record was made for.

    Examples
    --------
    >>> r = ShadowRecord(("h",), np.array([[True], [False]]), "c", "d", {}, 0, weights=("sha256:a", "sha256:b"),
    ...                  pools=("p1",))
    >>> check_shadow_record(r, weights=["sha256:a", "sha256:b"], pool_digest="p1")
    >>> check_shadow_record(r, weights=["sha256:b", "sha256:a"], pool_digest="p1")
    Traceback (most recent call last):
    ...
    ValueError: the shadow record's shadows are not the audit's reference models: reference 1 has weights sha256:b, ...
    """
    name = f"the shadow record {where}" if where else "the shadow record"
    if not record.weights or not record.pools:
        missing = " and ".join(w for w, v in (("its shadows' weights digests", record.weights),
                                              ("the pool it was made for", record.pools)) if not v)
        raise ValueError(f"{name} does not name {missing} (written before records were bound to them), so it "
                         f"cannot be checked: {_RECREATE}")
    if len(record.weights) != record.k:
        raise ValueError(f"{name} has {record.k} shadows but {len(record.weights)} weights digests: {_RECREATE}")
    weights = [str(w) for w in weights]
    if len(weights) != record.k:
        raise ValueError(f"{name} has {record.k} shadows, but the audit has {len(weights)} reference models: give "
                         "the record's shadows as the references, in its order")
    wrong = [j for j, (w, r) in enumerate(zip(weights, record.weights)) if w != r]
    if wrong:
        pairs = "; ".join(f"reference {j + 1} has weights {_short(weights[j])}, the record's shadow {j + 1} "
                          f"{_short(record.weights[j])}" for j in wrong)
        raise ValueError(f"{name}'s shadows are not the audit's reference models: {pairs}. Give the record's "
                         "shadows as the references, in its order, or re-create the record for these shadows "
                         "(mlflow-mia train-shadows)")
    if pool_digest not in record.pools:
        raise ValueError(f"{name} was made for the pool(s) {', '.join(record.pools)} (keyed digests), not the "
                         f"audited pool ({pool_digest}): audit the pool the record was made for, or bind the record "
                         "to this pool (every pool text must be one of the shadows' candidates): " + _RECREATE)


class DirectionCheck(NamedTuple):
    """The shadow record IN/OUT direction check (:func:`check_shadow_direction`) on the population rows.

    Attributes
    ----------
    mean_difference : float
        Mean over units of (mean IN statistic - mean OUT statistic), in the signal's unit (nats, or
        nats/token); > 0 when training on a text makes the shadows fit it better.
    upper : float
        One-sided upper confidence bound of the mean at ``confidence`` (Student t); nan when unresolvable.
    p_value : float
        One-sided p-value of "the mean is below 0" (t-test); nan when unresolvable.
    n_units : int
        Population units with an IN and an OUT shadow (texts, or groups when the population has them).
    unit : str
        ``"text"`` or ``"group"``.
    confidence : float
    """

    mean_difference: float
    upper: float
    p_value: float
    n_units: int
    unit: str
    confidence: float

    @property
    def reversed(self) -> bool:
        """The IN statistic is resolved below the OUT one (``upper < 0``)."""
        return bool(np.isfinite(self.upper) and self.upper < 0)

    def to_dict(self) -> dict:
        out = {name: getattr(self, name) for name in self._fields}
        return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in out.items()}


def check_shadow_direction(shadow_values, membership, *, groups=None,
                           confidence: float = DIRECTION_CONFIDENCE) -> DirectionCheck:
    """The shadow record IN/OUT direction check: refuse a record whose IN and OUT are swapped.

    The statistic is the one the attacks fit: minus the signal (minus the masked energy in
    nats, minus the PLL or the causal NLL in nats/token), higher = fits better, as
    ``lira_online`` and ``lira_offline`` use it (and ``rmia`` as its log-likelihood). A shadow
    that trained on a text fits it better, so per text ``d = mean over IN shadows - mean
    over OUT shadows`` is > 0 in expectation; a record with IN and OUT swapped makes it < 0
    (every ``d`` changes sign). Run on the population rows, non-members of the target, where
    the record alone says which shadow saw which text. The rows' ``d`` are averaged per group
    when ``groups`` are given (the unit the halves were drawn by), then a one-sided Student t
    interval of their mean at ``confidence`` (``scipy.stats.ttest_1samp``, ``alternative="less"``):
    the record is refused when its upper bound is < 0, i.e. the IN statistic is below the OUT one
    by a resolved margin. An unresolved difference (shadows that learned nothing, e.g. under
    DP-SGD) passes: the attacks are then weak, not misled.

    Parameters
    ----------
    shadow_values : ndarray of shape (k, m)
        The k shadows' signal on m population texts (energy in nats, or PLL / NLL in nats/token; lower = fits
        better).
    membership : ndarray of shape (m, k), bool
        The record's membership of those texts (True: shadow j trained on text i).
    groups : sequence of length m, optional
        Group (e.g. article) of each text.
    confidence : float
        Of the one-sided interval, default :data:`DIRECTION_CONFIDENCE` (0.999): a correct record of
        shadows that learned nothing is refused with probability 1 - confidence.

    Returns
    -------
    DirectionCheck
        With ``n_units < 2`` (or no spread) nothing is resolved: ``upper`` and ``p_value`` are nan.

    Raises
    ------
    ValueError
        Shapes that do not pair up; the direction resolved reversed (the message names the
        "shadow record IN/OUT direction check", gives the numbers and the fix).

    Notes
    -----
    The texts' ``d`` share the shadows, so they are not quite independent; with the balanced
    halves each shadow is IN for half of the texts and its own offset averages out of the
    mean. The strict default level leaves room for that. A swapped record of shadows that
    learned (the attacks' AUC then falls far below 0.5) is resolved by a wide margin.

    Examples
    --------
    >>> member = np.array([[True, False], [False, True], [True, False], [False, True]])
    >>> values = np.array([[1.0, 3.1, 1.2, 2.9], [3.0, 0.9, 3.2, 1.1]])  # IN: lower energy
    >>> check_shadow_direction(values, member).mean_difference > 0
    True
    >>> check_shadow_direction(values, ~member, confidence=0.95)
    Traceback (most recent call last):
    ...
    ValueError: shadow record IN/OUT direction check failed: on 4 population texts ... (one-sided 95% upper bound -1.81, p = 7.5e-05)... reversed ...
    """
    values = -np.atleast_2d(np.asarray(shadow_values, dtype=np.float64))  # statistic: minus the energy / NLL
    member = np.asarray(membership, dtype=bool)
    if member.shape != values.T.shape:
        raise ValueError(f"shadow membership of shape {member.shape} does not pair up with shadow values of shape "
                         f"{values.shape}: expected (n_texts, k) = {values.T.shape}")
    ins, outs = np.where(member.T, values, np.nan), np.where(member.T, np.nan, values)
    usable = (np.sum(np.isfinite(ins), axis=0) > 0) & (np.sum(np.isfinite(outs), axis=0) > 0)
    with np.errstate(invalid="ignore"):
        d = np.nanmean(ins[:, usable], axis=0) - np.nanmean(outs[:, usable], axis=0)
    unit = "text"
    if groups is not None:
        g = np.asarray(list(groups), dtype=object)[usable]
        _, inverse = np.unique(g.astype(str), return_inverse=True)
        d = np.bincount(inverse, weights=d) / np.bincount(inverse)
        unit = "group"
    d = d[np.isfinite(d)]
    mean = float(np.mean(d)) if d.size else float("nan")
    if d.size < 2 or not np.std(d) > 0:
        return DirectionCheck(mean, float("nan"), float("nan"), int(d.size), unit, float(confidence))
    test = stats.ttest_1samp(d, 0.0, alternative="less")
    upper = float(test.confidence_interval(confidence_level=confidence).high)
    check = DirectionCheck(mean, upper, float(test.pvalue), int(d.size), unit, float(confidence))
    if check.reversed:
        raise ValueError(f"shadow record IN/OUT direction check failed: on {d.size} population {unit}s the shadows "
                         "that trained on a text (IN) fit it worse than those that did not (OUT): mean IN - OUT "
                         f"statistic (minus the signal) {mean:.3g} (one-sided {100 * confidence:g}% upper bound "
                         f"{upper:.3g}, p = {check.p_value:.2g}). The record's IN and OUT are reversed (or it is "
                         "not these shadows' record): use the record train-shadows wrote for these shadows, or "
                         "re-create it")
    return check


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
