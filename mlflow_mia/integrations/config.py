"""Parse the flat ``evaluator_config["mia"]`` dict once, at the boundary.

The same flat keys drive the ``mia`` evaluator plugin, the ``mlflow-mia`` CLI
and the MLproject entry points: each front end turns its input into this dict,
and :func:`parse_options` turns the dict into an :class:`~mlflow_mia.config.AuditConfig`
(what the audit computes) and :class:`MiaOptions` (where the data comes from and
what gets logged). Unknown keys are an error that lists the valid ones.

The release gate (:class:`Gate`) lives here too: a budget on the TPR at a fixed
FPR, checked against the metrics of a finished audit.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from mlflow_mia.config import AuditConfig, MetricConfig, NeighbourhoodConfig, SignalConfig
from mlflow_mia.integrations.values import mia_section, opt_str, parse_bool, parse_float, parse_int, parse_list
from mlflow_mia.naming import fmt_alpha, is_nan

__all__ = ["CONFIG_KEYS", "MiaOptions", "Gate", "GateResult", "parse_options", "parse_list", "with_fprs"]

#: Every key of ``evaluator_config["mia"]`` with its meaning (the public API).
CONFIG_KEYS: dict[str, str] = {
    # models
    "target_model": "URI of the model to audit when mlflow.models.evaluate gets model=None (models:/name@alias, "
                    "models:/name/version, runs:/<run_id>/<path> or a saved model folder): loaded by the audit's own "
                    "loader, which never runs code shipped with the model. The recommended form: with "
                    "model='models:/...' MLflow's pyfunc loader runs first.",
    "reference_model": "URI or local folder of the reference model (models:/name/version, models:/name@alias, "
                       "runs:/<run_id>/<path>, a saved MLflow model or Hugging Face folder). Required by "
                       "likelihood_ratio; a model trained on similar data, disjoint from the target's.",
    # data
    "population_data": "Required. Population set used to set thresholds: a pandas DataFrame or a "
                       ".csv/.jsonl/.json/.parquet path; same distribution as the members, disjoint from the pool.",
    "text_column": "Text column of the pool (default 'text'); also of the population unless "
                   "population_text_column is given.",
    "label_column": "Membership column of the pool, 1 = member, 0 = non-member (default: the `targets` "
                    "argument of mlflow.models.evaluate).",
    "id_column": "Optional column of stable sample ids written to the per-sample table (default: row number).",
    "group_column": "Optional user id column (one id per user, e.g. a patient or an article); enables user-level "
                    "metrics (user/{attack}/...).",
    "population_text_column": "Text column of the population set (default: text_column).",
    "population_group_column": "User id column of the population set (default: group_column, when present); "
                               "needed for user-level thresholds.",
    # attacks and signals
    "attacks": "Attack names, a list or a comma-separated string (default ['loss', 'likelihood_ratio']); "
               "see mlflow_mia.attacks.ATTACKS for the registered ones.",
    "signal": "'energy' (masked energy, K random masks; default) or 'pll' (pseudo-log-likelihood).",
    "num_masks": "K, random mask subsets per sample for the energy (default 10).",
    "mask_rate": "Fraction of tokens masked in each subset (default 0.15).",
    "seed": "Seed of the masks and of the bootstrap (default 0).",
    "max_length": "Token limit per text including special tokens (default: the model's limit); longer texts "
                  "are truncated and counted.",
    "token_budget": "Padded tokens per forward pass: batch size x padded length (default 1024 on CPU, "
                    "16384 on CUDA).",
    "half_precision": "Run the models in float16 on CUDA (default False; ignored on CPU).",
    "num_neighbours": "Neighbours per sample of the neighbourhood attack (default 25).",
    "neighbour_generator": "Model proposing neighbour words (default: the reference model).",
    "allow_tokenizer_mismatch": "Run likelihood_ratio with a reference whose tokenizer differs from the target's "
                                "(default False: an error). Requires signal='pll', whose per-token energies are "
                                "roughly comparable across tokenizers; the report warns.",
    # metrics
    "fprs": "False-positive rates alpha at which TPR, precision and recall are reported "
            "(default [0.1, 0.01, 0.001]); a list or a comma-separated string.",
    "bootstrap_rounds": "Bootstrap resamples for the confidence intervals (default 1000; 0 disables them).",
    "confidence": "Two-sided confidence level of the intervals, and the confidence of the epsilon lower bound "
                  "(default 0.95).",
    "delta": "Delta of the (eps, delta)-DP guarantee behind the empirical epsilon lower bound "
             "({attack}/epsilon_lower_bound; default 1e-5).",
    "min_k_fraction": "k of the min_k attack (default 0.2).",
    "top_records": "How many riskiest member records to list per attack (default 20).",
    # logging and running
    "log_texts": "Write raw texts into tables/samples.csv and tables/riskiest.csv (default False: only "
                 "ids and keyed hashes are logged).",
    "log_samples": "Log per-sample scores, score flags, token counts and the score order of the riskiest records "
                   "(default False). Anyone who can read the run and load the target model can recompute a "
                   "candidate text's score and find its row and label, so by default tables/samples.csv holds only "
                   "ids, keyed hashes and labels and tables/riskiest.csv only keyed hashes.",
    "hash_key_file": "File holding the secret key (at least 32 bytes) of the HMAC-SHA256 text and group hashes "
                     "in the logged tables; never logged (default: $MLFLOW_MIA_HASH_KEY, else a random key that "
                     "is not kept, so the hashes cannot be looked up). See mlflow_mia.lookup_hash.",
    "metric_prefix": "Prefix for metric, parameter and artifact names (default '').",
    "max_tpr_at_fpr": "Release gate: budget(s) 'ALPHA:MAX' (a string, a list of them, or a dict "
                      "{alpha: max}). The run is tagged mia.gate=fail when any attack's TPR at FPR alpha, "
                      "at sample or user level, exceeds MAX. Each alpha is added to fprs.",
    "tag_model_version": "Tag the audited registered model version with headline numbers (default True). A "
                         "failing gate verdict is written on the version regardless.",
    "clear_gate_fail": "Let a passing gate replace an earlier mia.gate=fail on the registry version (default "
                       "False: a fail stays until cleared explicitly).",
    "cache_dir": "Directory of the signal cache (default $MLFLOW_MIA_CACHE or ~/.cache/mlflow_mia).",
    "trust_remote_code": "Let a model the audit loads itself (target_model, reference_model, neighbour_generator) "
                         "run the Python code shipped with it or load pickle weights (default False: such a model "
                         "is refused; see docs/security.md). It cannot protect model=: MLflow has loaded that model "
                         "before the evaluator runs; use model=None with target_model.",
    "device": "Torch device, e.g. 'cpu' or 'cuda:0' (default: CUDA when available); checked before any model "
              "loads.",
    "progress": "Show progress bars while computing signals (default True).",
    "engine": "'local' (default) or 'spark': compute the signals on Apache Spark, score on the driver "
              "(mlflow_mia.integrations.spark_audit; needs pip install 'mlflow-mia[spark]').",
    "spark_master": "Spark master URL of the 'spark' engine, e.g. 'local[2]' (default: the active session, "
                    "else Spark's default).",
    "spark_store": "Parquet signal store of the 'spark' engine (any path Spark writes); a re-run computes only "
                   "the texts missing there (default: none).",
}


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


@dataclass(frozen=True)
class MiaOptions:
    """Everything in ``evaluator_config["mia"]`` that is not part of :class:`AuditConfig`.

    See :data:`CONFIG_KEYS` for the meaning of each field.
    """

    population_data: Any = None
    reference_model: Any = None
    target_model: str | None = None
    text_column: str = "text"
    label_column: str | None = None
    id_column: str | None = None
    group_column: str | None = None
    population_text_column: str | None = None
    population_group_column: str | None = None
    log_texts: bool = False
    log_samples: bool = False
    metric_prefix: str = ""
    gate: Gate | None = None
    tag_model_version: bool = True
    cache_dir: str | None = None
    device: str | None = None
    progress: bool = True
    trust_remote_code: bool = False
    clear_gate_fail: bool = False
    hash_key: Any = field(default=None, repr=False)  # HashKey: keys the logged hashes, never logged
    engine: str = "local"
    spark_master: str | None = None
    spark_store: str | None = None

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


def _device(value) -> str | None:
    """The device string, checked to exist on this machine (before any model loads)."""
    device = opt_str(value)
    if device is not None:
        from mlflow_mia.signals.runtime import resolve_device

        resolve_device(device)
    return device


def _prefix(value) -> str:
    prefix = str(value or "")
    if prefix and not re.fullmatch(r"[\w.\-/ ]+", prefix):
        raise ValueError(f"metric_prefix {prefix!r} may only hold letters, digits and _ - . / or spaces")
    return prefix


def parse_options(config: Mapping[str, Any] | None, *, targets: str | None = None
                  ) -> tuple[AuditConfig, MiaOptions]:
    """Parse a flat ``evaluator_config["mia"]`` dict into ``(AuditConfig, MiaOptions)``.

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
        Unknown keys (the message lists the valid ones) or invalid values.
    """
    config = mia_section(config)
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError(f"unknown evaluator_config['mia'] key(s) {unknown}; valid keys are {sorted(CONFIG_KEYS)}")
    get = config.get
    gate = Gate.parse(get("max_tpr_at_fpr"))
    from mlflow_mia.hashing import resolve_hash_key

    engine = (opt_str(get("engine")) or "local").lower()
    if engine not in ("local", "spark"):
        raise ValueError(f"engine must be 'local' or 'spark', got {get('engine')!r}")
    hash_key = resolve_hash_key(opt_str(get("hash_key_file")))
    audit_config = AuditConfig(attacks=_attacks(get("attacks", AuditConfig.attacks)),
                               signal=SignalConfig.from_dict(_signal_settings(config)),
                               metrics=MetricConfig.from_dict(_metric_settings(config, gate)),
                               neighbourhood=NeighbourhoodConfig.from_dict(_neighbourhood_settings(config)),
                               allow_tokenizer_mismatch=parse_bool(get("allow_tokenizer_mismatch", False),
                                                                   "allow_tokenizer_mismatch"))
    text_column = opt_str(get("text_column")) or "text"
    group_column = opt_str(get("group_column"))
    reference = get("reference_model")
    options = MiaOptions(
        population_data=get("population_data"),
        reference_model=opt_str(reference) if isinstance(reference, str) else reference,
        target_model=opt_str(get("target_model")),
        text_column=text_column,
        label_column=opt_str(get("label_column")) or targets,
        id_column=opt_str(get("id_column")),
        group_column=group_column,
        population_text_column=opt_str(get("population_text_column")) or text_column,
        population_group_column=opt_str(get("population_group_column")) or group_column,
        log_texts=parse_bool(get("log_texts", False), "log_texts"),
        log_samples=parse_bool(get("log_samples", False), "log_samples"),
        metric_prefix=_prefix(get("metric_prefix")),
        gate=gate,
        tag_model_version=parse_bool(get("tag_model_version", True), "tag_model_version"),
        cache_dir=opt_str(get("cache_dir")),
        device=_device(get("device")),
        progress=parse_bool(get("progress", True), "progress"),
        trust_remote_code=parse_bool(get("trust_remote_code", False), "trust_remote_code"),
        clear_gate_fail=parse_bool(get("clear_gate_fail", False), "clear_gate_fail"),
        hash_key=hash_key,
        engine=engine,
        spark_master=opt_str(get("spark_master")),
        spark_store=opt_str(get("spark_store")),
    )
    return audit_config, options


def _given(config: Mapping, key: str, *unset) -> bool:
    """The key holds a value (not None, not '' and not one of ``unset``)."""
    value = config.get(key)
    return value is not None and value != "" and value not in unset


def _attacks(value) -> tuple[str, ...]:
    from mlflow_mia.attacks import check_attack_names

    return check_attack_names(parse_list(value, what="attacks"))


def _signal_settings(config: Mapping) -> dict:
    """``SignalConfig`` fields from the flat keys (``signal`` -> ``kind``; ``max_length`` 0 = the model's)."""
    out = {"seed": parse_int(config.get("seed", 0), "seed")}
    if "signal" in config:
        out["kind"] = str(config["signal"]).strip().lower()
    for key in ("num_masks", "token_budget"):
        if _given(config, key):
            out[key] = parse_int(config[key], key)
    if _given(config, "max_length", 0, "0"):
        out["max_length"] = parse_int(config["max_length"], "max_length")
    if _given(config, "mask_rate"):
        out["mask_rate"] = parse_float(config["mask_rate"], "mask_rate")
    if "half_precision" in config:
        out["half_precision"] = parse_bool(config["half_precision"], "half_precision")
    return out


def _metric_settings(config: Mapping, gate: "Gate | None") -> dict:
    """``MetricConfig`` fields from the flat keys; every gate alpha is added to ``fprs``."""
    fprs = parse_list(config.get("fprs", MetricConfig.fprs), what="fprs", cast=float)
    if gate is not None:
        fprs = tuple(sorted(set(fprs) | set(gate.alphas), reverse=True))
    out = {"fprs": fprs, "seed": parse_int(config.get("seed", 0), "seed")}
    for key in ("bootstrap_rounds", "top_records"):
        if _given(config, key):
            out[key] = parse_int(config[key], key)
    for key in ("confidence", "min_k_fraction", "delta"):
        if _given(config, key):
            out[key] = parse_float(config[key], key)
    return out


def _neighbourhood_settings(config: Mapping) -> dict:
    out = {}
    if _given(config, "num_neighbours"):
        out["num_neighbours"] = parse_int(config["num_neighbours"], "num_neighbours")
    if opt_str(config.get("neighbour_generator")):
        out["generator_model"] = opt_str(config.get("neighbour_generator"))
    return out


def with_fprs(config: AuditConfig, fprs, gate: "Gate | None" = None) -> AuditConfig:
    """``config`` with other false-positive rates (the gate's alphas kept), without parsing anything again."""
    from dataclasses import replace

    fprs = set(fprs) | set(gate.alphas if gate is not None else ())
    return replace(config, metrics=replace(config.metrics, fprs=tuple(sorted(fprs, reverse=True))))
