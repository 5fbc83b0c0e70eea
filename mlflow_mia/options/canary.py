"""The canary audit's options beyond :class:`~mlflow_mia.canaries.config.CanaryAuditConfig`, and their parser.

Declared once, here (:func:`mlflow_mia.option.option`); the ``canary-audit`` flags,
the ``method="canaries"`` evaluator keys and the MLproject parameters derive from
these declarations (:mod:`mlflow_mia.options.schema`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from mlflow_mia.canaries.config import CanaryAuditConfig
from mlflow_mia.hashing import resolve_hash_key
from mlflow_mia.metrics.gate import check_gate_confidence
from mlflow_mia.metrics.loose import check_loose_budgets, loose_exposure
from mlflow_mia.metrics.gate_record import PLANTED_IN_PATTERN
from mlflow_mia.option import option, shared_option
from mlflow_mia.options.audit import MiaOptions, reference_uris
from mlflow_mia.options.schema import CommonOptions, build, parse_values, register_family
from mlflow_mia.options.values import mia_section
from mlflow_mia.metrics.canary_gate import CanaryGate

__all__ = ["CanaryOptions", "parse_canary_config"]


@dataclass(frozen=True)
class CanaryOptions(CommonOptions):
    """Where the canaries and models come from, the release budgets, and logging (plus :class:`CommonOptions`)."""

    canaries: Any = option(None, "the auditor's canary set file (written by CanarySet.save: texts, secrets, "
                           "repetition counts and inclusion bits; keep it private)", metavar="PATH",
                           default_doc="required, except for the built-in demo")
    reference_model: Any = shared_option(MiaOptions, "reference_model")
    max_exposure: float | None = option(None, "release budget on the mean exposure (bits) of the included "
                                        "secret-format canaries at every repetition count, the larger of the headline "
                                        "(extrapolated when candidates are sampled) and the rank-based mean: pass when "
                                        "every one-sided upper bound is within it, fail when a lower bound exceeds it, else "
                                        "inconclusive",
                                        short="release budget on the mean exposure (bits) of the included secret-format "
                                              "canaries: pass within it on the upper bounds, fail above it on a lower one",
                                        gt=0, metavar="BITS", default_doc="no budget")
    max_epsilon_lower_bound: float | None = option(None, "release budget on the record-level one-run epsilon lower "
                                                   "bound (canaries inserted once): fail when the bound exceeds it, "
                                                   "pass when it does not and the canaries could have shown more, "
                                                   "else inconclusive", gt=0, metavar="EPS", default_doc="no budget")
    planted_in: str | None = option(None, "where the canary set was planted, kept in the gate record: the training "
                                    "data digest insert(..., with_digest=True) returned (sha256:...) or the training "
                                    "run (run:<run_id>); a fail recorded with it is cleared only by an audit that "
                                    "names the same", pattern=PLANTED_IN_PATTERN,
                                    pattern_doc="of letters, digits and _.:/@+=- (at most 200)", metavar="ID",
                                    default_doc="not stated")
    allow_seeded_canaries: bool = option(False, "let a gated canary audit use a canary set drawn from an explicit "
                                         "seed (make_canaries(seed=...)), as a test: whoever knows or guesses the "
                                         "seed regenerates its secrets and inclusion bits, so the audit is recorded "
                                         "as not a release audit (gate record release 0; its pass clears nothing). "
                                         "Without it such a set is refused when a budget is set",
                                         short="let a gated audit use a seeded canary set (make_canaries(seed=...)): "
                                               "recorded as a test, not a release audit")
    allow_loose_budget: bool = shared_option(MiaOptions, "allow_loose_budget")
    tag_model_version: bool = shared_option(MiaOptions, "tag_model_version")
    clear_gate_fail: bool = shared_option(MiaOptions, "clear_gate_fail")
    trust_remote_code: bool = shared_option(MiaOptions, "trust_remote_code")

    def gate(self, canaries=None):
        """The :class:`~mlflow_mia.metrics.canary_gate.CanaryGate` of the budgets, or None without one.

        Parameters
        ----------
        canaries : CanarySet, optional
            The set to audit. With it the gate is checked against the set and carries
            what was accepted: ``release=False`` for a set drawn from an explicit seed
            (allowed by ``allow_seeded_canaries`` only), and ``loose`` for an exposure
            budget above the bits of the set's largest candidate space (allowed by
            ``allow_loose_budget`` only).

        Raises
        ------
        ValueError
            A budget out of range; with ``canaries``: a seeded set without
            ``allow_seeded_canaries``, a loose exposure budget without ``allow_loose_budget``.
        """
        if self.max_exposure is None and self.max_epsilon_lower_bound is None:
            return None
        gate = CanaryGate(max_exposure=self.max_exposure, max_epsilon=self.max_epsilon_lower_bound)
        if canaries is None:
            return gate
        if canaries.seed is not None and not self.allow_seeded_canaries:
            raise ValueError("the canary set was drawn from an explicit seed (make_canaries(seed=...)): whoever knows "
                             "or guesses the seed regenerates every secret and inclusion bit (a search over small "
                             "seeds against the logged counts finds it), so a gated audit of it cannot back a "
                             "release. Draw the set without a seed (make_canaries(m, templates): secrets from "
                             "Python's secrets module), plant it and audit that; or, for a test, give "
                             "--allow-seeded-canaries (evaluator key allow_seeded_canaries): the audit is then "
                             "recorded as not a release audit")
        bits, template = _largest_space(canaries)
        loose = check_loose_budgets(
            loose_exposure(self.max_exposure, bits), allowed=self.allow_loose_budget,
            why=f"a mean exposure budget above {bits or 0:.2f} bits, the largest candidate space of this canary set "
                f"(template {template!r}), can never be exceeded")
        return replace(gate, loose=loose, release=canaries.seed is None)


def _largest_space(canaries) -> tuple:
    """``(log2 of the largest candidate space, its template id)`` among the set's secret-format canaries, or
    ``(None, None)`` when it has none: no canary's exposure can exceed those bits."""
    used = {tid for tid, secret in zip(canaries.template_ids, canaries.secrets) if secret is not None}
    spaces = [(math.log2(t.space_size), t.id) for t in canaries.templates if t.is_secret_format and t.id in used]
    return max(spaces) if spaces else (None, None)


def is_canary_config(config) -> bool:
    """True when ``evaluator_config`` selects ``method="canaries"``."""
    return mia_section(config).get("method") == "canaries"


def parse_canary_config(config: Mapping[str, Any] | None, *, targets: str | None = None) -> tuple:
    """``(CanaryAuditConfig, CanaryOptions)`` from a flat ``evaluator_config["mia"]`` or the ``canary-audit`` flags.

    Every value is read and checked before any model loads (the gate too); the hash
    key is resolved here (``hash_key_file``, else ``$MLFLOW_MIA_HASH_KEY``, else random).

    Raises
    ------
    ValueError
        Unknown keys, invalid values, or a budget the gate refuses.
    FileNotFoundError
        ``hash_key_file`` does not exist.
    """
    values = parse_values("canaries", mia_section(config))
    references = reference_uris(values.get("reference_model"))
    if len(references) > 1:
        raise ValueError(f"the canary audit takes one reference model, got {len(references)}: {list(references)}")
    cfg = build(CanaryAuditConfig, values)
    options = build(CanaryOptions, values, label_column=values.get("label_column") or targets or "included",
                    hash_key=values.get("hash_key_file") or resolve_hash_key())
    if options.gate() is not None:  # a bad budget or confidence fails here, before anything loads
        check_gate_confidence(cfg.confidence, option="confidence")
    return cfg, options


register_family("canary", (CanaryAuditConfig, CanaryOptions), frozenset({"canary-audit", "canaries"}))
