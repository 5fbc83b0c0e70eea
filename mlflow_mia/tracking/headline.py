"""What a membership audit logs as MLflow metrics: a headline set, rounded, and the full table beside it.

An audit computes some 140-190 numbers (every attack at sample and user level, with
intervals, bound variants, precision and recall, epsilon bounds, length bins). Logged as
MLflow metrics they bury what a reader compares: the Model metrics tab draws one chart per
metric, in name order. So the run gets:

- as MLflow metrics, the headline set (:func:`headline_keys`, about 20): every attack's AUC
  and TPR at each FPR with its lower and upper bound (sample level), the headline attack's AUC
  interval, the verdict's deciding numbers (with a gate, each budget's deciding TPR and its
  bounds, user level included), and :data:`VERDICT_CODE_METRIC`; each rounded to
  :data:`SIGNIFICANT_DIGITS` significant digits (:func:`rounded`);
- the full table as a logged table artifact (:data:`METRICS_TABLE`, ``mlflow.log_table``: the
  run page's artifact view shows it as a table), to 10 decimals (the JSON ``mlflow.log_table`` writes),
  undefined values as null;
  :func:`full_metrics` reads it back (with the run's metrics, for runs logged before it).
"""

from __future__ import annotations

import json
import math
import tempfile

import pandas as pd

from mlflow_mia.naming import fmt_alpha, nan_to_none
from mlflow_mia.tracking.descriptions import VERDICT_CODE_METRIC, VERDICTS, verdict_code

__all__ = ["rounded", "full_metrics"]

#: How many metrics the per-attack part of the headline set may hold before other attacks lose their bounds.
HEADLINE_LIMIT = 20
#: Significant digits of a logged metric (the table keeps 10 decimals).
SIGNIFICANT_DIGITS = 4
#: The run artifact holding every metric (``mlflow.log_table``).
METRICS_TABLE = "tables/metrics.json"
#: Metric-name parts kept out of MLflow: score cut-offs in each attack's own units (in ``audit_summary.json``).
_NOT_LOGGED = ("/threshold_at_pop_fpr_",)


def rounded(value: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """``value`` to ``digits`` significant digits (non-finite values as they are).

    >>> rounded(0.8879999999999999), rounded(0.43484375), rounded(1234567.0), rounded(0.0)
    (0.888, 0.4348, 1235000.0, 0.0)
    """
    value = float(value)
    return value if not math.isfinite(value) else float(f"{value:.{digits}g}")


def table_metrics(metrics: dict) -> dict[str, float]:
    """``metrics`` without the raw score thresholds (the metrics table's rows; non-finite ones included)."""
    return {k: float(v) for k, v in metrics.items() if not any(part in f"/{k}" for part in _NOT_LOGGED)}


def _attack_keys(attack: str, fprs, *, bounds: bool) -> list[str]:
    tprs = [f"{attack}/tpr_at_fpr_{fmt_alpha(a)}" for a in fprs]
    return [f"{attack}/auc"] + [f"{k}{s}" for k in tprs for s in (("", "_lower", "_upper") if bounds else ("",))]


def headline_keys(result, *, limit: int = HEADLINE_LIMIT) -> list[str]:
    """The per-attack part of the headline set, the headline attack first (the UI plots a run's first metric).

    Every attack (sample level, in config order after the headline attack) gives its ``auc`` and
    ``tpr_at_fpr_<alpha>`` for each FPR of the audit, with ``_lower`` and ``_upper`` (the gate's
    bounds; :mod:`mlflow_mia.metrics.gate`). When that would exceed ``limit`` names, the attacks
    after the headline attack keep their AUC and TPRs only, then their AUC only, then as many AUCs as fit
    (the metrics table holds every metric). Names the result lacks are left out.

    Parameters
    ----------
    result : AuditResult
        Its ``headline_attack``, ``attacks`` (names, in order), ``config.metrics.fprs`` and ``metrics``.
    limit : int
        Most names before the other attacks' bounds are dropped.

    Returns
    -------
    list of str
    """
    attacks = [result.headline_attack] + [a for a in result.attacks if a != result.headline_attack]
    fprs = result.config.metrics.fprs
    present = [k for k in _attack_keys(attacks[0], fprs, bounds=True) if k in result.metrics]
    for bounds, tprs in ((True, True), (False, True), (False, False)):  # less of the other attacks each time
        others = [k for a in attacks[1:] for k in _attack_keys(a, fprs, bounds=bounds)[:None if tprs else 1]
                  if k in result.metrics]
        if len(present) + len(others) <= limit:
            return present + others
    return present + others[:max(limit - len(present), 0)]  # as many of the others' AUCs as fit


def deciding_keys(result, gate=None) -> list[str]:
    """The metrics the verdict was read from (:mod:`mlflow_mia.tracking.verdict`).

    With a gate: each budget's deciding metric (``[user/]<attack>/tpr_at_fpr_<alpha>``, the point
    whose status decided it) with its ``_lower`` and ``_upper`` bound. Without: the headline
    attack's ``auc`` with ``auc_ci_low`` and ``auc_ci_high``. Names the result lacks are left out.
    """
    if gate is not None:
        keys = [f"{c['metric']}{s}" for c in gate.checks for s in ("", "_lower", "_upper")]
    else:
        keys = [f"{result.headline_attack}/auc{s}" for s in ("", "_ci_low", "_ci_high")]
    return [k for k in dict.fromkeys(keys) if k in result.metrics]


def headline_metrics(result, *, gate=None, verdict=None, prefix: str = "") -> dict[str, float]:
    """The metrics an audit logs to MLflow: :func:`headline_keys`, the headline attack's AUC interval, then
    :func:`deciding_keys`, rounded.

    Only finite values: an undefined one (nan: a TPR at an FPR the pool cannot resolve) stays in
    the table with its reason in ``audit_summary.json``. With ``verdict``, also
    :data:`~mlflow_mia.tracking.descriptions.VERDICT_CODE_METRIC`
    (:func:`~mlflow_mia.tracking.descriptions.verdict_code`).

    Parameters
    ----------
    result : AuditResult
    gate : GateResult, optional
    verdict : Verdict, optional
    prefix : str
        Prepended to every name (``metric_prefix``).

    Returns
    -------
    dict of str to float
        In logging order, the headline attack's AUC first.
    """
    interval = [f"{result.headline_attack}/auc{s}" for s in ("_ci_low", "_ci_high")]
    keys = [k for k in dict.fromkeys(headline_keys(result) + interval + deciding_keys(result, gate))
            if k in result.metrics]
    out = {f"{prefix}{k}": rounded(result.metrics[k]) for k in keys if math.isfinite(float(result.metrics[k]))}
    if verdict is not None:
        out[f"{prefix}{VERDICT_CODE_METRIC}"] = float(verdict_code(verdict.value))
    return out


def verdict_record(verdict, metrics: dict, deciding, *, gate=None) -> dict:
    """The ``verdict`` artifact (``verdict.json``; also in ``mlflow.models.evaluate(...).artifacts``).

    Parameters
    ----------
    verdict : Verdict
    metrics : dict
        The audit's metrics.
    deciding : list of str
        The names the verdict was read from (:func:`deciding_keys`).
    gate : GateResult, optional

    Returns
    -------
    dict
        ``verdict`` (one of :data:`~mlflow_mia.tracking.descriptions.VERDICTS`), ``reason``, ``code``
        (:func:`~mlflow_mia.tracking.descriptions.verdict_code`) and ``codes`` (every verdict's code),
        ``gate`` (its status, or None), ``budgets`` (per budget: ``alpha``, ``max_tpr``, ``status`` and the
        deciding ``metric``), ``deciding`` (``{name: value}`` at full precision, None where undefined).
    """
    budgets = [] if gate is None else [{"alpha": c["alpha"], "max_tpr": c["max_tpr"], "status": c["status"],
                                        "metric": c["metric"]} for c in gate.checks]
    return {"verdict": verdict.value, "reason": verdict.reason, "code": verdict_code(verdict.value),
            "codes": {v: i for i, v in enumerate(VERDICTS)}, "gate": None if gate is None else gate.status,
            "budgets": budgets, "deciding": {k: nan_to_none(float(metrics[k])) for k in deciding}}


def metrics_table(metrics: dict) -> pd.DataFrame:
    """Every metric as one row: ``name``, ``level`` (``sample``, ``user`` or ``pool``), ``attack``, ``metric``,
    ``value`` (as computed; nan where undefined), in name order.

    >>> metrics_table({"user/loss/auc": 0.5, "n_members": 80.0, "loss/auc": 0.6}).values.tolist()
    [['loss/auc', 'sample', 'loss', 'auc', 0.6], ['n_members', 'pool', '', 'n_members', 80.0], \
['user/loss/auc', 'user', 'loss', 'auc', 0.5]]
    """
    rows = []
    for name in sorted(metrics):
        parts = name.split("/")
        level = "user" if parts[0] == "user" else "pool" if len(parts) == 1 else "sample"
        parts = parts[1:] if level == "user" else parts
        attack, metric = ("", parts[-1]) if len(parts) == 1 else ("/".join(parts[:-1]), parts[-1])
        rows.append({"name": name, "level": level, "attack": attack, "metric": metric, "value": float(metrics[name])})
    return pd.DataFrame(rows, columns=["name", "level", "attack", "metric", "value"])


def full_metrics(client, run_id: str) -> dict[str, float]:
    """Every finite metric of an audit run: its MLflow metrics, then its :data:`METRICS_TABLE` rows over them.

    A run logged before the table existed has every metric as an MLflow metric; a run without
    either gives ``{}``; a table value (10 decimals) replaces the rounded MLflow metric of its name. Readers
    of metrics beyond the headline set (``analyze``) use this.

    Parameters
    ----------
    client : MlflowClient
    run_id : str

    Returns
    -------
    dict of str to float
    """
    out = dict(client.get_run(run_id).data.metrics)
    if any(f.path == METRICS_TABLE for f in client.list_artifacts(run_id, METRICS_TABLE.rsplit("/", 1)[0])):
        with tempfile.TemporaryDirectory() as tmp:
            with open(client.download_artifacts(run_id, METRICS_TABLE, tmp), encoding="utf-8") as fh:
                table = json.load(fh)  # mlflow.log_table's form: {"columns": [...], "data": [[...], ...]}
        rows = [dict(zip(table["columns"], row)) for row in table["data"]]
        out.update({str(r["name"]): float(r["value"]) for r in rows
                    if r.get("value") is not None and math.isfinite(float(r["value"]))})  # 10 decimals
    return out
