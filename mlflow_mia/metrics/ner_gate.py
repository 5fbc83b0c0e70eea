"""The release gate of a NER prompt audit: a budget on the TPR at FPR alpha of member names against non-member names.

The NER audit (Xia et al. 2025, :mod:`mlflow_mia.audits.ner`) scores each entity name of
its detection set by how confidently the tagger recognises it in prompts. The gate reads,
per entity type, one score of the names:

- with a reference tagger (a model trained on similar data without the audited names, in the
  WNUT demo the *control*: the tagger of the other half), the **ratio score** ``ratio_avg``:
  the mean over prompts of ``log C(e; target) - log C(e; reference)``
  (:func:`~mlflow_mia.metrics.prompts.ratio_scores`). No choice is made on the labels, so
  every name of the type counts. A name set that is merely easier to tag lifts both
  taggers and cancels in the ratio, which the target's confidence alone cannot tell from
  memorization;
- without one, the target's confidence under the **best prompt** ``best_prompt``, chosen on
  the dev names (highest M-MEM) and read on the test names only (the choice made on dev
  names would bias a bound read on them).

A budget ``ALPHA:MAX`` is then decided exactly as the membership gate decides it
(:class:`~mlflow_mia.metrics.gate.Gate`, the same code): the one-sided bounds of the TPR at
FPR alpha are Clopper-Pearson bounds that include the threshold's noise
(:func:`~mlflow_mia.metrics.binomial.tpr_bounds_at_fpr`), **the unit is the name**;
``pass`` when every type's upper bound is within the budget, ``fail`` when some lower bound
exceeds it, ``inconclusive`` otherwise (also when a type has fewer than ``ceil(1 / alpha)``
non-member names: its TPR at alpha cannot be read). The worst type decides.

The metrics it decides on (``ner/{type}/{score}/tpr_at_fpr_{alpha}``, its
``_upper_binomial`` / ``_lower_binomial`` / ``_upper_at_tpr`` and the type's
``ner/{type}/{score}/n_members`` / ``n_non_members``) are logged with the audit; the
verdict is a :class:`~mlflow_mia.metrics.gate.GateResult` and its registry record a
:class:`~mlflow_mia.metrics.gate_record.GateRecord` whose attacks are the gated scores
(``ner/{type}/{score}``).

References
----------
.. [1] Y. Xia et al., "Exploring prompts to elicit memorization in masked language model-based named entity
   recognition", PLoS One 20(9), 2025.
.. [2] C. J. Clopper and E. S. Pearson, "The use of confidence or fiducial limits illustrated in the case of the
   binomial", Biometrika 26(4), 1934.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

import numpy as np

from mlflow_mia.metrics.binomial import tpr_bounds_at_fpr
from mlflow_mia.metrics.gate import Gate, GateResult, check_gate_confidence
from mlflow_mia.metrics.gate_record import GateRecord
from mlflow_mia.metrics.roc import tpr_at_fpr
from mlflow_mia.metrics.thresholds import min_population_size
from mlflow_mia.naming import fmt_alpha

__all__ = ["NerGate", "ner_gate_record", "gate_point_metrics"]

#: The gated scores: with a reference tagger (a column of ``NerAuditResult.names``), and without one.
RATIO, BEST_PROMPT = "ratio_avg", "best_prompt"
_COLUMN = {RATIO: "ratio_avg", BEST_PROMPT: "c_best"}


def gated_score(names) -> str:
    """:data:`RATIO` when ``names`` (``NerAuditResult.names``) holds the ratio score, else :data:`BEST_PROMPT`."""
    return RATIO if "ratio_avg" in names else BEST_PROMPT


def ner_gate_metrics(names, *, alphas, confidence: float) -> dict[str, float]:
    """The flat metrics the NER gate decides on, from the per-name scores of a NER audit.

    Parameters
    ----------
    names : pandas.DataFrame
        ``NerAuditResult.names``: ``entity_type``, ``is_member`` (0/1), ``split`` (``dev`` / ``test``),
        ``c_best`` (float in [0, 1], the target's confidence under the dev-best prompt) and, with a
        reference tagger, ``ratio_avg`` (float, the mean log confidence ratio).
    alphas : iterable of float in (0, 1)
        The budgets' FPRs.
    confidence : float in (0, 1)
        One-sided level of each bound.

    Returns
    -------
    dict of str to float
        Per type ``t`` and the gated score ``s`` (:func:`gated_score`): ``ner/t/s/n_members``,
        ``ner/t/s/n_non_members`` (names read: every name of the type for the ratio score, the test
        names for the best prompt); per alpha ``ner/t/s/tpr_at_fpr_{alpha}`` (the pool's TPR at FPR
        alpha, :func:`~mlflow_mia.metrics.roc.tpr_at_fpr`; nan with fewer than ``ceil(1 / alpha)``
        non-member names), ``..._upper_binomial``, ``..._lower_binomial`` and ``..._upper_at_tpr``
        (:func:`~mlflow_mia.metrics.binomial.tpr_bounds_at_fpr`). Also ``n_members`` / ``n_non_members``:
        the names of every type (the audit's pool size, kept in the gate record).

    Raises
    ------
    ValueError
        A type whose names read are all of one class (no TPR to bound), or a missing column.
    """
    score = gated_score(names)
    missing = {"entity_type", "is_member", "split", _COLUMN[score]} - set(names.columns)
    if missing:
        raise ValueError(f"the NER gate needs the names table's columns {sorted(missing)} (NerAuditResult.names)")
    out = {"n_members": float((names["is_member"] == 1).sum()), "n_non_members": float((names["is_member"] == 0).sum())}
    for kind in dict.fromkeys(names["entity_type"]):
        rows = names[names["entity_type"] == kind]
        if score == BEST_PROMPT:  # the prompt was chosen on the dev names: bound it on the others
            rows = rows[rows["split"] == "test"]
        y = rows["is_member"].to_numpy(dtype=np.int64)
        s = rows[_COLUMN[score]].to_numpy(dtype=np.float64)
        n1, n0 = int(y.sum()), int(y.size - y.sum())
        if n1 == 0 or n0 == 0:
            raise ValueError(f"the NER gate cannot read entity type {kind!r}: its {'test ' if score == BEST_PROMPT else ''}"
                             f"names hold {n1} member and {n0} non-member names; give both classes")
        scope = f"ner/{kind}/{score}"
        out[f"{scope}/n_members"], out[f"{scope}/n_non_members"] = float(n1), float(n0)
        for alpha in alphas:
            key = f"{scope}/tpr_at_fpr_{fmt_alpha(alpha)}"
            b = tpr_bounds_at_fpr(y, s, alpha=alpha, confidence=confidence)
            out[key] = tpr_at_fpr(y, s, alpha=alpha) if n0 >= min_population_size(alpha) else math.nan
            out[f"{key}_upper_binomial"], out[f"{key}_lower_binomial"] = b.upper, b.lower
            out[f"{key}_upper_at_tpr"] = b.upper_tpr
    return out


def ner_signal_digest(result) -> str:
    """16 hex characters naming what decides the gated scores of a NER audit: the split (seed, dev share), the
    subword rule and the prompts of each type. A pass lifts a blocking NER verdict only with the same digest."""
    cfg = result.config
    spec = {"kind": "ner_prompts", "subword": cfg.subword, "seed": cfg.seed, "dev_fraction": cfg.dev_fraction,
            "prompts": sorted(zip(result.prompts_table["entity_type"], result.prompts_table["prompt"]))}
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class NerGate:
    """A NER release gate (:class:`~mlflow_mia.metrics.verdicts.ReleaseGate`): budgets on the TPR at FPR alpha of
    member names against non-member names, per entity type (module docstring).

    Attributes
    ----------
    budgets : Gate
        The ``ALPHA:MAX`` budgets (``max_tpr_at_fpr``, parsed by :meth:`Gate.parse`; its loose budgets are this
        gate's).
    confidence : float in [0.95, 1)
        One-sided level of the bounds.

    Raises
    ------
    ValueError
        ``confidence`` out of [0.95, 1) (:func:`~mlflow_mia.metrics.gate.check_gate_confidence`).
    TypeError
        ``budgets`` is not a :class:`~mlflow_mia.metrics.gate.Gate`.
    """

    budgets: Gate
    confidence: float = 0.95

    def __post_init__(self):
        if not isinstance(self.budgets, Gate):
            raise TypeError(f"NerGate(budgets=...) takes a Gate (Gate.parse('0.1:0.3')), not {self.budgets!r}")
        object.__setattr__(self, "confidence", check_gate_confidence(self.confidence))

    @property
    def loose(self) -> tuple:
        return self.budgets.loose

    def metrics(self, result) -> dict[str, float]:
        """:func:`ner_gate_metrics` of ``result`` (a ``NerAuditResult``) at this gate's FPRs and confidence."""
        return ner_gate_metrics(result.names, alphas=self.budgets.alphas, confidence=self.confidence)

    def check(self, result) -> GateResult:
        """Decide the budgets on a finished NER audit (``NerAuditResult``: its ``names`` table), with
        :meth:`Gate.check` on :meth:`metrics`.

        Raises
        ------
        ValueError
            As :func:`ner_gate_metrics`.
        """
        return self.budgets.check(self.metrics(result), confidence=self.confidence)


def ner_gate_record(verdict: GateResult, result) -> GateRecord:
    """The registry record of a NER gate's ``verdict`` on ``result`` (a ``NerAuditResult``).

    Its attacks are the gated scores (``ner/{type}/{score}``), its pool sizes the member and non-member
    names of every type, its signal settings :func:`ner_signal_digest`, its references the reference
    tagger's weights (``sha256:`` and 16 hex characters): a blocking NER verdict is lifted only by a NER
    audit at least as strong on the same names, prompts and split.
    """
    attacks = tuple(dict.fromkeys(p["metric"].rpartition("/tpr_at_fpr_")[0] for c in verdict.checks
                                  for p in c["points"]))
    names = result.names
    counts = {"n_members": int((names["is_member"] == 1).sum()), "n_non_members": int((names["is_member"] == 0).sum())}
    weights = getattr(result, "reference_weights", None)
    return GateRecord.of(verdict, attacks, counts, signal=ner_signal_digest(result),
                         references=(weights[:23],) if weights else ())


def gate_point_metrics(verdict: GateResult) -> dict[str, float]:
    """The finite values and bounds of every point a NER gate checked, as run metrics: ``{metric}``,
    ``{metric}_upper_binomial``, ``{metric}_lower_binomial`` (``ner/{type}/{score}/tpr_at_fpr_{alpha}``)."""
    out = {}
    for c in verdict.checks:
        for p in c["points"]:
            for key, value in ((p["metric"], p["value"]), (f"{p['metric']}_upper_binomial", p["upper"]),
                               (f"{p['metric']}_lower_binomial", p["lower"])):
                if value is not None and math.isfinite(value):
                    out[key] = float(value)
    return out
