"""Parse the flat ``evaluator_config["mia"]`` dict once, at the boundary.

The same flat keys drive the ``mia`` evaluator plugin, the ``mlflow-mia`` CLI
and the MLproject entry points: each front end turns its input into this dict,
and :func:`parse_options` turns the dict into an :class:`~mlflow_mia.config.AuditConfig`
(what the audit computes) and :class:`MiaOptions` (where the data comes from and
what gets logged). Every key is declared once, on the field that holds it
(:mod:`mlflow_mia.integrations.options`); unknown keys are an error that lists the valid ones.

The release gate (:class:`Gate`) lives here too: a budget on the TPR at a fixed
FPR, checked against the metrics of a finished audit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from mlflow_mia.config import AuditConfig, MetricConfig, NeighbourhoodConfig, SignalConfig
from mlflow_mia.integrations.options import CommonOptions
from mlflow_mia.integrations.values import mia_section
from mlflow_mia.naming import fmt_alpha, is_nan
from mlflow_mia.option import option

__all__ = ["CONFIG_KEYS", "MiaOptions", "Gate", "GateResult", "parse_options", "with_fprs"]


def __getattr__(name):
    if name == "CONFIG_KEYS":  # derived from the declarations, on demand (they import this module)
        from mlflow_mia.integrations.options import options_for

        return {key: e.field.option.help for key, e in options_for("mia").items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

@dataclass(frozen=True)
class GateResult:
    """Verdict of a release gate.

    Attributes
    ----------
    passed : bool
    checks : tuple of dict
        One per budget: ``alpha``, ``max_tpr``, ``metric`` (the worst metric key),
        ``value`` (its TPR, nan when undefined) and ``passed``.
    """

    passed: bool
    checks: tuple

    @property
    def status(self) -> str:
        """``"pass"`` or ``"fail"`` (the value of the ``mia.gate`` tag)."""
        return "pass" if self.passed else "fail"

    def verdict(self) -> str:
        """One line for a terminal or a CI log."""
        parts = []
        for c in self.checks:
            value = "undefined" if is_nan(c["value"]) else f"{c['value']:.3f}"
            mark = "ok" if c["passed"] else "OVER BUDGET"
            parts.append(f"{c['metric']} = {value} (budget {c['max_tpr']:g}) {mark}")
        return f"mia.gate={self.status}: " + "; ".join(parts)

    def to_dict(self) -> dict:
        return {"status": self.status,
                "checks": [{**c, "value": None if is_nan(c["value"]) else c["value"]} for c in self.checks]}


@dataclass(frozen=True)
class Gate:
    """Release budget: the TPR at FPR ``alpha`` may not exceed ``max_tpr``.

    Every attack is checked, at sample level and (when groups are given) at user
    level; the worst one decides. An undefined TPR (nan) fails the gate: the
    audit could not show that the budget holds.

    Attributes
    ----------
    budgets : tuple of (float, float)
        ``(alpha, max_tpr)`` pairs, alpha in (0, 1), max_tpr in [0, 1].
    """

    budgets: tuple

    def __post_init__(self):
        if not self.budgets:
            raise ValueError("a gate needs at least one ALPHA:MAX budget, e.g. '0.01:0.05'")
        clean = []
        for alpha, max_tpr in self.budgets:
            alpha, max_tpr = float(alpha), float(max_tpr)
            if not 0.0 < alpha < 1.0:
                raise ValueError(f"gate FPR alpha must be in (0, 1), got {alpha}")
            if not 0.0 <= max_tpr <= 1.0:
                raise ValueError(f"gate budget (maximum TPR) must be in [0, 1], got {max_tpr}")
            clean.append((alpha, max_tpr))
        object.__setattr__(self, "budgets", tuple(sorted(set(clean), reverse=True)))

    @property
    def alphas(self) -> tuple[float, ...]:
        return tuple(a for a, _ in self.budgets)

    @classmethod
    def parse(cls, spec) -> "Gate | None":
        """Build a gate from ``"0.01:0.05"``, ``"0.01:0.05,0.001:0.01"``, a list of those,
        a dict ``{alpha: max}`` or ``(alpha, max)`` pairs; None or empty gives None.

        Raises
        ------
        ValueError
            A budget is not of the form ``ALPHA:MAX`` or out of range.
        """
        if spec is None or spec == "" or spec == [] or spec == ():
            return None
        if isinstance(spec, Gate):
            return spec
        if isinstance(spec, Mapping):
            return cls(tuple(spec.items()))
        if isinstance(spec, str):
            spec = [s for s in spec.split(",") if s.strip()]
        budgets = []
        for item in spec:
            if isinstance(item, str):
                alpha, sep, max_tpr = item.strip().partition(":")
                if not sep:
                    raise ValueError(f"gate budget {item!r} must look like ALPHA:MAX, e.g. 0.01:0.05 (the TPR "
                                     "at FPR 0.01 may be at most 0.05)")
                try:
                    budgets.append((float(alpha), float(max_tpr)))
                except ValueError:
                    raise ValueError(f"gate budget {item!r}: ALPHA and MAX must be numbers") from None
            else:
                alpha, max_tpr = item
                budgets.append((alpha, max_tpr))
        return cls(tuple(budgets)) if budgets else None

    def to_spec(self) -> str:
        return ",".join(f"{a:g}:{m:g}" for a, m in self.budgets)

    def check(self, metrics: Mapping[str, float]) -> GateResult:
        """Compare the budgets with an audit's flat metrics (``AuditResult.metrics``).

        Raises
        ------
        ValueError
            No ``tpr_at_fpr_<alpha>`` metric exists for a budget's alpha.
        """
        checks = []
        for alpha, max_tpr in self.budgets:
            suffix = f"/tpr_at_fpr_{fmt_alpha(alpha)}"
            found = {k: float(v) for k, v in metrics.items() if k.endswith(suffix)}
            if not found:
                raise ValueError(f"no metric ends with {suffix!r}: the audit did not report FPR {fmt_alpha(alpha)}")
            # nan sorts as the worst value: it cannot show that the budget holds.
            metric = max(found, key=lambda k: math.inf if math.isnan(found[k]) else found[k])
            value = found[metric]
            checks.append({"alpha": alpha, "max_tpr": max_tpr, "metric": metric, "value": value,
                           "passed": (not math.isnan(value)) and value <= max_tpr})
        return GateResult(passed=all(c["passed"] for c in checks), checks=tuple(checks))


_MODEL_FORMS = "models:/name/version, models:/name@alias, runs:/<run_id>/<path> or a local folder"


@dataclass(frozen=True)
class MiaOptions(CommonOptions):
    """Everything in ``evaluator_config["mia"]`` that is not part of :class:`AuditConfig`.

    Each field is an option (its help is its documentation; see :data:`CONFIG_KEYS`),
    plus those of :class:`~mlflow_mia.integrations.options.CommonOptions`.
    """

    reference_model: Any = option(None, f"reference model: {_MODEL_FORMS}. Needed by likelihood_ratio: a model "
                                  "trained on similar data, disjoint from the target's training data; compare "
                                  "takes several, comma-separated, and audits every version against each",
                                  flags=("--reference",), metavar="URI[,URI]",
                                  default_doc="the demo's models:/bbc-reference@champion, else none")
    population_data: Any = option(None, "population set: texts from the same distribution as the members, "
                                  "disjoint from the pool, only used to set thresholds; a DataFrame or a "
                                  ".csv/.jsonl/.json/.parquet path", flags=("--population",), metavar="PATH",
                                  default_doc="required; the demo's without --data")
    text_column: str = option("text", "text column of the pool", metavar="NAME")
    id_column: str | None = option(None, "sample id column written to the per-sample table", metavar="NAME",
                                   default_doc="row number")
    group_column: str | None = option(None, "user id column (one id per user: a patient, an author, an article); "
                                      "adds user-level metrics user/<attack>/...", metavar="NAME",
                                      default_doc="the demo's article_id, else none")
    population_text_column: str | None = option(None, "text column of the population set", metavar="NAME",
                                                default_doc="text_column")
    population_group_column: str | None = option(None, "user id column of the population set; needed for "
                                                 "user-level thresholds", metavar="NAME", default_doc="group_column")
    gate: Gate | None = option(None, "release gate, budget(s) ALPHA:MAX (a string, a list or a dict {alpha: "
                               "max}; repeatable on the command line): the run is tagged mia.gate=fail, and the "
                               "command exits with 3, when any attack's TPR at FPR ALPHA, at sample or user level, "
                               "exceeds MAX. Each ALPHA is added to fprs", key="max_tpr_at_fpr", parse=Gate.parse,
                               repeat=True, metavar="ALPHA:MAX")
    tag_model_version: bool = option(True, "tag the audited registry version with mia.* headline numbers (a failing "
                                     "gate verdict is written regardless)", flags=("--no-tag-model-version",),
                                     invert=True, mlproject=False,
                                     flag_help="do not tag the audited registry version with mia.* headline numbers "
                                               "(a failing gate verdict is still written)")
    clear_gate_fail: bool = option(False, "let a passing gate replace an earlier mia.gate=fail on the registry "
                                   "version (else a fail stays until cleared explicitly)", mlproject=False)
    trust_remote_code: bool = option(False, "let a model whose classes are not part of transformers run the Python "
                                     "code shipped with it (else such a model is refused; see docs/security.md)",
                                     mlproject=False)
    engine: str = option("local", "where the signals are computed: local, or spark (on Apache Spark, scored on "
                         "the driver; pip install 'mlflow-mia[spark]')", choices=("local", "spark"))
    spark_master: str | None = option(None, "Spark master of the spark engine, e.g. local[2]", metavar="URL",
                                      default_doc="the active session, else Spark's default")
    spark_store: str | None = option(None, "Parquet signal store of the spark engine (any path Spark writes); a "
                                     "re-run computes only the texts missing there", metavar="PATH")

    def require_population(self) -> None:
        """Raise the error that explains how to provide a population set.

        Raises
        ------
        ValueError
            ``population_data`` is missing.
        """
        if self.population_data is None or (isinstance(self.population_data, str) and not self.population_data):
            raise ValueError(
                "a population set is required: texts from the same distribution as the members, disjoint from "
                "the audited pool; the attack thresholds are its score quantiles (Mireshghallah et al. 2022, "
                "Sec. 2.4). Provide it as evaluator_config={'mia': {'population_data': <DataFrame or "
                ".csv/.jsonl/.parquet path>, ...}} or, on the command line, --population PATH")


def parse_options(config: Mapping[str, Any] | None, *, targets: str | None = None
                  ) -> tuple[AuditConfig, MiaOptions]:
    """Parse a flat ``evaluator_config["mia"]`` dict into ``(AuditConfig, MiaOptions)``.

    Every value is read and checked by its declaration (:mod:`mlflow_mia.integrations.options`)
    before anything is computed; the hash key is resolved here, once per audit
    (``hash_key_file``, else ``$MLFLOW_MIA_HASH_KEY``, else a random key).

    Parameters
    ----------
    config : mapping or None
        Flat keys, see :data:`CONFIG_KEYS`. A nested ``{"mia": {...}}`` is unwrapped.
    targets : str, optional
        Name of the label column given to ``mlflow.models.evaluate(targets=...)``;
        the default of ``label_column``.

    Returns
    -------
    (AuditConfig, MiaOptions)

    Raises
    ------
    ValueError
        Unknown keys (the message lists the valid ones) or invalid values (the message
        names the key and the expected form).
    FileNotFoundError
        ``hash_key_file`` does not exist.
    """
    from mlflow_mia.attacks import check_attack_names
    from mlflow_mia.hashing import resolve_hash_key
    from mlflow_mia.integrations.options import build, parse_values

    values = parse_values("mia", mia_section(config))
    if values.get("method", "mia") != "mia":
        raise ValueError(f"method {values['method']!r} is not read by parse_options (it reads method 'mia'); "
                         "use mlflow_mia.integrations.ner_evaluator.parse_ner_config")
    if "attacks" in values:
        values["attacks"] = check_attack_names(values["attacks"])
    gate = values.get("max_tpr_at_fpr")
    if gate is not None:  # every gate alpha is reported
        values["fprs"] = tuple(sorted(set(values.get("fprs", MetricConfig.fprs)) | set(gate.alphas), reverse=True))
    audit_config = build(AuditConfig, values, signal=build(SignalConfig, values),
                         metrics=build(MetricConfig, values), neighbourhood=build(NeighbourhoodConfig, values))
    text_column = values.get("text_column", MiaOptions.text_column)
    group_column = values.get("group_column")
    options = build(MiaOptions, values, label_column=values.get("label_column") or targets,
                    population_text_column=values.get("population_text_column") or text_column,
                    population_group_column=values.get("population_group_column") or group_column,
                    hash_key=values.get("hash_key_file") or resolve_hash_key())
    return audit_config, options


def with_fprs(config: AuditConfig, fprs, gate: "Gate | None" = None) -> AuditConfig:
    """``config`` with other false-positive rates (the gate's alphas kept), without parsing anything again."""
    from dataclasses import replace

    fprs = set(fprs) | set(gate.alphas if gate is not None else ())
    return replace(config, metrics=replace(config.metrics, fprs=tuple(sorted(fprs, reverse=True))))
