"""Audit evidence on registered model versions: headline tags and a gate verdict that cannot be erased.

Two kinds of ``mia.*`` tags live on an audited version:

- **headline tags** describe the latest audit: ``mia.<attack>.auc``,
  ``mia.<attack>.tpr_at_fpr_<alpha>``, ``mia.user.<attack>.auc``, ``mia.attacks``,
  ``mia.audit_run_id``. A new audit replaces them (and drops those of attacks it
  did not run). ``tag_model_version=False`` leaves them alone.
- **gate tags** record release decisions and are never deleted:
  ``mia.gate.run.<run_id>`` (one per gated audit: verdict, attacks covered,
  budgets), and the current verdict ``mia.gate`` with ``mia.gate.attacks`` and
  ``mia.gate.run_id``. A ``fail`` stays until an audit passes with an explicit
  ``clear_gate_fail``; a failing verdict is written even with
  ``tag_model_version=False``, so an old ``pass`` never stands beside a new fail.

``mia.weights_sha256`` (the version's weights digest, checked before a folder or
a pyfunc may claim the version: :mod:`mlflow_mia.integrations.models`) is kept too.
"""

from __future__ import annotations

import logging
import math

__all__ = ["tag_model_version", "GATE_TAG"]

log = logging.getLogger(__name__)

GATE_TAG = "mia.gate"
WEIGHTS_TAG = "mia.weights_sha256"
_KEPT = (GATE_TAG, WEIGHTS_TAG)  # prefixes a new audit never deletes


def _fmt_tag(value) -> str:
    return "nan" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{float(value):.4f}"


def _versions(registry) -> list[tuple[str, str]]:
    if hasattr(registry, "name") and hasattr(registry, "version"):
        return [(registry.name, str(registry.version))]
    if isinstance(registry, tuple) and len(registry) == 2 and isinstance(registry[0], str):
        return [(registry[0], str(registry[1]))]
    return [(name, str(version)) for name, version in registry]


def headline_tags(result, *, run_id: str) -> dict[str, str]:
    """The latest audit's numbers as registry tags (AUC and TPR at each FPR per attack)."""
    from mlflow_mia.audit import fmt_alpha

    tags = {"mia.audit_run_id": run_id, "mia.attacks": ",".join(result.attacks)}
    for name, rep in result.attacks.items():
        tags[f"mia.{name}.auc"] = _fmt_tag(rep.roc.auc)
        for alpha, tpr in rep.tpr_at_fpr.items():
            tags[f"mia.{name}.tpr_at_fpr_{fmt_alpha(alpha)}"] = _fmt_tag(tpr)
    for name, rep in result.user_attacks.items():
        tags[f"mia.user.{name}.auc"] = _fmt_tag(rep.roc.auc)
    return tags


def gate_tags(current: dict, gate, *, attacks, run_id: str, clear_gate_fail: bool = False) -> dict[str, str]:
    """Gate tags to set on a version whose tags are ``current``.

    Always a history entry ``mia.gate.run.<run_id>``; the verdict tags unless the
    version holds a ``fail`` that this passing audit may not clear.
    """
    budgets = ",".join(f"{c['alpha']:g}:{c['max_tpr']:g}" for c in gate.checks)
    attacks = ",".join(attacks)
    tags = {f"{GATE_TAG}.run.{run_id}": f"{gate.status}; attacks {attacks}; budgets {budgets}"}
    if current.get(GATE_TAG) == "fail" and gate.passed and not clear_gate_fail:
        log.warning("the registry verdict stays mia.gate=fail (set by run %s): a passing audit clears it only with "
                    "--clear-gate-fail (evaluator key clear_gate_fail=True)", current.get(f"{GATE_TAG}.run_id"))
        return tags
    tags.update({GATE_TAG: gate.status, f"{GATE_TAG}.attacks": attacks, f"{GATE_TAG}.run_id": run_id})
    return tags


def tag_model_version(registry, result, *, run_id: str, gate=None, client=None, headline: bool = True,
                      clear_gate_fail: bool = False, weights_id: str | None = None) -> dict[str, str]:
    """Tag registry version(s) with an audit's evidence (see the module docstring).

    Parameters
    ----------
    registry : (name, version), iterable of them, or a ModelVersion
    result : AuditResult
    run_id : str
        The audit run.
    gate : GateResult, optional
    headline : bool
        Write the headline tags (False: only a gate verdict, and only a failing one).
    clear_gate_fail : bool
        Let a passing audit replace a ``mia.gate=fail`` verdict.
    weights_id : str, optional
        Digest of the audited weights, stored as ``mia.weights_sha256`` (callers
        pass it only for versions whose weights they loaded or checked).

    Returns
    -------
    dict of str to str
        The tags set on the last version.
    """
    from mlflow import MlflowClient

    client = client or MlflowClient()
    new = headline_tags(result, run_id=run_id) if headline else {}
    if weights_id and headline:
        new[WEIGHTS_TAG] = weights_id
    written: dict[str, str] = {}
    for name, version in _versions(registry):
        current = client.get_model_version(name, version).tags or {}
        written = dict(new)
        if gate is not None and (headline or not gate.passed):
            written.update(gate_tags(current, gate, attacks=result.attacks, run_id=run_id,
                                     clear_gate_fail=clear_gate_fail))
        if headline:  # the headline describes this audit only
            for key in current:
                if key.startswith("mia.") and not key.startswith(_KEPT) and key not in written:
                    client.delete_model_version_tag(name, version, key)
        for key, value in written.items():
            client.set_model_version_tag(name, version, key, value)
        log.info("tagged %s version %s with %d mia.* tags", name, version, len(written))
    return written
