"""The verdict at a glance: one rule for ``mia.verdict``, and the run's name, description and links.

Every audit (membership, NER, canary) ends with one of four verdicts, written as the
run tag and registry version tag ``mia.verdict`` (:data:`VERDICT_TAG`):

- ``leaks``: the release gate failed (a lower confidence bound of a TPR is over its budget), or, without a
  gate, the lower end of the headline attack's AUC confidence interval is above 0.5;
- ``within budget``: the release gate passed (every one-sided upper bound of the TPR is
  within its budget); the model may still leak less than the budget allows;
- ``no evidence of leakage``: no gate, and the headline attack's AUC interval contains
  0.5. Not a proof of privacy: a larger audit or a stronger attack may find a leak;
- ``inconclusive``: the gate was inconclusive (the audit shows neither that the budget
  holds nor that it is exceeded), or, without a gate, there is no interval (``bootstrap_rounds=0``, an
  undefined AUC) or the interval lies below 0.5, which points to a faulty set-up
  (members and non-members from different sources, a reference trained on the members).

The gate, when one is set, decides (:mod:`mlflow_mia.metrics.gate`); the AUC interval
only speaks when there is none.

A canary audit (:func:`canary_verdict`) reads its own gate (:mod:`mlflow_mia.metrics.canary_gate`)
the same way; without one, the canaries inserted once (r = 1; one canary = one record) decide:
``leaks`` when their one-run epsilon lower bound is above 0 or their included-vs-excluded AUC
interval lies above 0.5; ``no evidence of leakage`` when neither and the bound could have been
positive (its largest value for these canaries, every guess right, is above 0); else
``inconclusive`` (no canary inserted once, too few of them to show any bound, or an AUC
interval below 0.5). :func:`verdict_of` holds that rule;
:func:`run_description`, :func:`describe_run` and :func:`describe_version` write it where
a reviewer looks first (the run's name and description, the version's description).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from urllib.parse import quote

from mlflow_mia.tracking.descriptions import DESCRIPTION_START, named_with_verdict, with_own_text
from mlflow_mia.metrics.verdicts import FAIL, INCONCLUSIVE, PASS, TAMPERED
from mlflow_mia.naming import fmt_number, is_nan

__all__ = ["Verdict", "verdict_of", "audit_verdict", "canary_verdict", "worst_verdict", "describe_nested", "run_url",
           "fmt_interval"]

log = logging.getLogger(__name__)

VERDICT_TAG = "mia.verdict"
NOTE_TAG = "mlflow.note.content"  # the run's (and experiment's) description in the MLflow UI
RUN_NAME_TAG, RUN_KIND_TAG = "mlflow.runName", "mia.run_kind"  # run kind: audit, or failed (mlflow run)
LEAKS, WITHIN_BUDGET, NO_EVIDENCE = "leaks", "within budget", "no evidence of leakage"


@dataclass(frozen=True)
class Verdict:
    """An audit's verdict and the evidence it rests on.

    Attributes
    ----------
    value : {"leaks", "within budget", "no evidence of leakage", "inconclusive"}
        The ``mia.verdict`` tag.
    reason : str
        One sentence: the gate's status or the interval the verdict was read from.
    """

    value: str
    reason: str

    def line(self) -> str:
        """``verdict: <value> (<reason>)``, for a terminal."""
        return f"verdict: {self.value} ({self.reason})"

    def markdown(self) -> str:
        """The line under every report's title: ``Verdict("leaks", "AUC above 0.5")`` gives
        ``**Verdict: leaks** (AUC above 0.5).``."""
        return f"**Verdict: {self.value}** ({self.reason})."


def verdict_of(*, gate_status: str | None = None, auc=None, auc_ci=None, attack: str = "the headline attack",
               confidence: float = 0.95) -> Verdict:
    """The verdict of an audit (the rule of the module docstring).

    Parameters
    ----------
    gate_status : {"pass", "fail", "inconclusive", "tampered"} or None
        The release gate's verdict (:class:`mlflow_mia.metrics.gate.GateResult`); None without a gate.
    auc : float, optional
        The headline attack's AUC (for the reason only).
    auc_ci : (float, float), optional
        Its two-sided confidence interval at ``confidence``.
    attack : str
        The attack's name, for the reason.
    confidence : float
        Level of ``auc_ci``, for the reason.

    Returns
    -------
    Verdict

    Raises
    ------
    ValueError
        ``gate_status`` is not one of the gate's three verdicts.

    Examples
    --------
    >>> verdict_of(gate_status="fail").value
    'leaks'
    >>> verdict_of(auc=0.87, auc_ci=(0.85, 0.88), attack="likelihood_ratio").value
    'leaks'
    >>> verdict_of(auc=0.52, auc_ci=(0.49, 0.55)).value
    'no evidence of leakage'
    >>> verdict_of(auc=0.52).value
    'inconclusive'
    """
    if gate_status is not None:
        reasons = {FAIL: (LEAKS, "release gate failed: a lower confidence bound of a TPR is over its budget"),
                   PASS: (WITHIN_BUDGET, "release gate passed: every upper bound of the TPR is within its budget"),
                   INCONCLUSIVE: (INCONCLUSIVE, "release gate inconclusive: the audit shows neither that the "
                                                "budget holds nor that it is exceeded"),
                   TAMPERED: (TAMPERED, "the version's gate records were tampered with (a record or the chain tag "
                                        "deleted or edited): an audit at least as strong as the verdict that stood "
                                        "must run again")}
        if gate_status not in reasons:
            raise ValueError(f"gate_status must be one of {sorted(reasons)} or None, not {gate_status!r}")
        return Verdict(*reasons[gate_status])
    level = f"{confidence:.0%}"
    if auc_ci is None or len(auc_ci) != 2 or any(is_nan(x) for x in auc_ci):
        return Verdict(INCONCLUSIVE, f"{attack} AUC {fmt_number(auc)} has no confidence interval (no gate set)")
    low, high = float(auc_ci[0]), float(auc_ci[1])
    where = f"{attack} AUC {fmt_number(auc)}, {level} interval [{fmt_number(low)}, {fmt_number(high)}]"
    if low > 0.5:
        return Verdict(LEAKS, f"{where} above 0.5")
    if high < 0.5:
        return Verdict(INCONCLUSIVE, f"{where} below 0.5: check the audit set-up")
    return Verdict(NO_EVIDENCE, f"{where} contains 0.5; not a proof of privacy")


def audit_verdict(result, gate=None) -> Verdict:
    """:func:`verdict_of` for a membership audit: its gate, else its headline attack's sample-level AUC interval.

    Parameters
    ----------
    result : AuditResult
    gate : GateResult, optional
        Its caveats (budgets accepted as loose) follow the reason.
    """
    name = result.headline_attack
    rep = result.attacks[name]
    verdict = verdict_of(gate_status=None if gate is None else gate.status, auc=rep.roc.auc,
                         auc_ci=rep.ci.get("auc"), attack=name, confidence=result.config.metrics.confidence)
    return _with_caveats(verdict, gate)


def _with_caveats(verdict: Verdict, gate) -> Verdict:
    """``verdict`` with the gate's caveats (loose budgets, not a release audit) after its reason."""
    said = gate.caveats() if gate is not None and hasattr(gate, "caveats") else ""
    return Verdict(verdict.value, f"{verdict.reason} ({said})") if said else verdict


#: Severity of the verdicts, mildest first: a combination of audits takes the most severe.
SEVERITY = (WITHIN_BUDGET, NO_EVIDENCE, INCONCLUSIVE, LEAKS)


def worst_verdict(verdicts) -> Verdict:
    """The most severe of several verdicts (``leaks`` > ``inconclusive`` > ``no evidence of leakage`` >
    ``within budget``), its reason prefixed by what it belongs to.

    Parameters
    ----------
    verdicts : iterable of (str, Verdict)
        ``(label, verdict)`` pairs: a model version of ``compare``, an entity type of a NER audit.

    Raises
    ------
    ValueError
        ``verdicts`` is empty.

    >>> worst_verdict([("v1", verdict_of(gate_status="pass")), ("v2", verdict_of(gate_status="fail"))]).reason
    'v2: release gate failed: a lower confidence bound of a TPR is over its budget'
    """
    pairs = list(verdicts)
    if not pairs:
        raise ValueError("worst_verdict needs at least one (label, verdict) pair")
    label, worst = max(pairs, key=lambda p: SEVERITY.index(p[1].value))
    return Verdict(worst.value, f"{label}: {worst.reason}")


def describe_nested(client, run_id: str, verdicts, *, heading: str, name: str | None = None) -> Verdict:
    """Describe a parent run from its nested audits: the most severe verdict, then one line per audit.

    Parameters
    ----------
    client : mlflow.MlflowClient
    run_id : str
        The parent run.
    verdicts : sequence of (str, Verdict)
        ``(label, verdict)`` of each nested audit, in the order shown.
    heading : str
        The paragraph above the list (``"One nested run per reference:"``).
    name : str, optional
        A new name for the parent run (default: its name); the verdict goes in front either way.

    Returns
    -------
    Verdict
        :func:`worst_verdict` of ``verdicts``.

    Raises
    ------
    ValueError
        ``verdicts`` is empty.
    """
    pairs = list(verdicts)
    verdict = worst_verdict(pairs)
    lines = "\n".join(f"- {label}: **{v.value}** ({v.reason})" for label, v in pairs)
    describe_run(client, run_id, verdict=verdict, name=name or client.get_run(run_id).info.run_name,
                 description=run_description(verdict, f"{heading}\n\n{lines}"))
    return verdict


def ner_verdict(metrics: dict, entity_types, *, confidence: float = 0.95) -> Verdict:
    """:func:`verdict_of` for a NER prompt audit: per entity type, the test M-MEM (an AUC) of the best prompt
    chosen on the dev names, with its bootstrap interval (Xia et al. 2025); the worst type decides.

    Parameters
    ----------
    metrics : dict
        The audit's metrics (``ner/<type>/best_prompt_mmem`` and ``_ci_low`` / ``_ci_high``).
    entity_types : iterable of str
    """
    out = []
    for kind in entity_types:
        key = f"ner/{kind}/best_prompt_mmem"
        out.append((kind, verdict_of(auc=metrics.get(key), attack="best prompt M-MEM", confidence=confidence,
                                     auc_ci=(metrics.get(f"{key}_ci_low"), metrics.get(f"{key}_ci_high")))))
    return worst_verdict(out)


def canary_verdict(metrics: dict, gate=None, *, confidence: float = 0.95) -> Verdict:
    """The verdict of a canary audit: its gate, else the canaries inserted once (the rule of the module docstring).

    Parameters
    ----------
    metrics : dict
        The audit's metrics (:class:`~mlflow_mia.audits.canary.CanaryAuditResult`): the
        record-level ``canary/epsilon_lower_bound`` and ``canary/epsilon_max`` (its largest
        possible value), ``canary/r1/auc`` with ``_ci_low`` / ``_ci_high``.
    gate : CanaryGateResult, optional
        :class:`mlflow_mia.metrics.canary_gate.CanaryGateResult`; when given it decides, and its
        caveats (a loose budget, not a release audit) follow the reason.
    confidence : float
        Level of the bound and of the AUC interval, for the reason.

    Returns
    -------
    Verdict

    Examples
    --------
    >>> canary_verdict({"canary/epsilon_lower_bound": 0.06, "canary/epsilon_max": 4.8}).value
    'leaks'
    >>> canary_verdict({"canary/epsilon_lower_bound": 0.0, "canary/epsilon_max": 4.8, "canary/r1/auc": 0.48,
    ...                 "canary/r1/auc_ci_low": 0.43, "canary/r1/auc_ci_high": 0.54}).value
    'no evidence of leakage'
    >>> canary_verdict({"canary/epsilon_lower_bound": 0.0, "canary/epsilon_max": 0.0}).value
    'inconclusive'
    """
    level = f"{confidence:.0%}"
    if gate is not None:
        value = verdict_of(gate_status=gate.status).value  # checks the status
        failed = [c for c in gate.checks if c["status"] == FAIL]
        reason = {FAIL: "canary gate failed: " + ", ".join(f"{c['metric']} = {fmt_number(c['value'])} over its "
                                                            f"budget {c['budget']:g}" for c in failed),
                  PASS: f"canary gate passed: every canary budget holds at {level} confidence",
                  INCONCLUSIVE: "canary gate inconclusive: the audit cannot show that the budgets hold"}[gate.status]
        return _with_caveats(Verdict(value, reason), gate)
    eps, ceiling = metrics.get("canary/epsilon_lower_bound"), metrics.get("canary/epsilon_max")
    if is_nan(eps):
        return Verdict(INCONCLUSIVE, "no canary inserted once: no record-level epsilon bound (no gate set)")
    bound = f"record-level epsilon lower bound {fmt_number(eps)} ({level}, one canary = one record)"
    auc, ci = metrics.get("canary/r1/auc"), (metrics.get("canary/r1/auc_ci_low"), metrics.get("canary/r1/auc_ci_high"))
    has_ci = not any(is_nan(x) for x in ci)
    where = f"r = 1 AUC {fmt_number(auc)}" + (f", {level} interval [{fmt_number(ci[0])}, {fmt_number(ci[1])}]"
                                              if has_ci else " (no interval)")
    if float(eps) > 0:
        return Verdict(LEAKS, f"{bound} above 0")
    if has_ci and float(ci[0]) > 0.5:
        return Verdict(LEAKS, f"{where} above 0.5")
    if has_ci and float(ci[1]) < 0.5:
        return Verdict(INCONCLUSIVE, f"{where} below 0.5: check the audit set-up")
    if is_nan(ceiling) or not float(ceiling) > 0:
        return Verdict(INCONCLUSIVE, f"{bound}, and these canaries could not show more than "
                                     f"{fmt_number(ceiling)}: plant more canaries inserted once")
    return Verdict(NO_EVIDENCE, f"{bound} (these canaries could show up to {fmt_number(ceiling)}) and {where}; "
                                "not a proof of privacy")


MODEL_TRAINING_VIEW = "workflowType=machine_learning"


def run_url(run_id: str, experiment_id: str, *, tracking_uri: str | None = None, path: str | None = None) -> str:
    """The MLflow UI address of a run (or of one of its artifacts, ``path``), in the "Model training" view.

    An ``http(s)`` tracking URI is the UI's own address; for a local store (``sqlite:``,
    a folder) the address is the one ``mlflow ui`` serves by default, ``http://127.0.0.1:5000``.

    >>> run_url("abc", "1", tracking_uri="http://srv:5000/")
    'http://srv:5000/#/experiments/1/runs/abc?workflowType=machine_learning'
    >>> run_url("abc", "1", tracking_uri="sqlite:///mlflow.db", path="report.md")
    'http://127.0.0.1:5000/#/experiments/1/runs/abc/artifactPath/report.md?workflowType=machine_learning'
    """
    if tracking_uri is None:
        import mlflow

        tracking_uri = mlflow.get_tracking_uri()
    local = not str(tracking_uri).startswith(("http://", "https://"))
    base = "http://127.0.0.1:5000" if local else str(tracking_uri).rstrip("/")
    url = f"{base}/#/experiments/{experiment_id}/runs/{run_id}"
    return url + (f"/artifactPath/{quote(path)}" if path else "") + f"?{MODEL_TRAINING_VIEW}"


def run_description(verdict: Verdict, paragraph: str, *, gate=None, run_link: str | None = None) -> str:
    """The Markdown description of an audit run (and, with ``run_link``, of the audited registry version).

    Parameters
    ----------
    verdict : Verdict
    paragraph : str
        The report's "In brief" paragraph (:func:`mlflow_mia.audits.membership.report.in_brief`).
    gate : GateResult, optional
        Adds the gate's message (what the verdict means for a release).
    run_link : str, optional
        Markdown link to the audit run, added last (the version's description).

    Returns
    -------
    str
        Starts with :data:`DESCRIPTION_START`; no raw text.
    """
    lines = [f"{DESCRIPTION_START} {verdict.value}** ({verdict.reason}).", ""]
    if gate is not None:
        message = gate.message()
        lines += [f"**Release gate: {gate.status.upper()}**: {message}.", ""]
    if paragraph:
        lines += [paragraph, ""]
    lines.append("The full report is the run's `report.md` artifact.")
    if run_link:
        lines.append(f"Audit run: {run_link}.")
    return "\n".join(lines)


def describe_run(client, run_id: str, *, verdict: Verdict, description: str, name: str | None = None,
                 prefix: str = "") -> dict[str, str]:
    """Write the verdict tag, the description, ``mia.run_kind=audit`` and (when given) the name of a run.

    The description replaces one this module wrote (it starts with
    :data:`DESCRIPTION_START`); a description someone else wrote is kept after it, quoted
    under :data:`~mlflow_mia.tracking.descriptions.OWN_TEXT_HEADING`
    (:func:`~mlflow_mia.tracking.descriptions.with_own_text`), so it never reads as the
    verdict. The name, with the verdict in front (:func:`~mlflow_mia.tracking.descriptions.named_with_verdict`:
    ``[leaks] audit tgt v2 vs ref v1``, what MLflow's run list and compare view show without
    configuring columns), sets the run's ``mlflow.runName`` tag, so it also renames the run
    ``mlflow run`` created.

    Parameters
    ----------
    client : MlflowClient
    run_id : str
    verdict : Verdict
    description : str
        From :func:`run_description`.
    name : str, optional
        New run name, without the verdict; None keeps the name (a name someone else chose stays as it is).
    prefix : str
        Prefix of the verdict tags (``metric_prefix``: several audits in one run).

    Returns
    -------
    dict of str to str
        The tags written.
    """
    current = client.get_run(run_id).data.tags
    tags = {f"{prefix}{VERDICT_TAG}": verdict.value, f"{prefix}{VERDICT_TAG}.reason": verdict.reason}
    tags[NOTE_TAG], tags[RUN_KIND_TAG] = with_own_text(description, current.get(NOTE_TAG)), "audit"
    if name:
        tags[RUN_NAME_TAG] = named_with_verdict(name, verdict.value)
    for key, value in tags.items():
        client.set_tag(run_id, key, value)
    return tags


def describe_version(client, name: str, version: str, *, verdict: Verdict, description: str) -> None:
    """Tag a registry version ``mia.verdict`` and set its description, the verdict first.

    ``description`` comes from :func:`run_description` with a ``run_link``. The model
    authors' own description (one that does not start with :data:`DESCRIPTION_START`, such
    as ``Verdict: within budget``) is kept after it, quoted under
    :data:`~mlflow_mia.tracking.descriptions.OWN_TEXT_HEADING`: it never reads as the tool's verdict.
    """
    client.set_model_version_tag(name, version, VERDICT_TAG, verdict.value)
    current = client.get_model_version(name, version).description
    client.update_model_version(name, version, description=with_own_text(description, current))


def fmt_interval(value, ci) -> str:
    """``0.866 [0.846, 0.884]``, or the value alone without a finite interval."""
    if ci is None or any(is_nan(x) or (isinstance(x, float) and math.isinf(x)) for x in ci):
        return fmt_number(value)
    return f"{fmt_number(value)} [{fmt_number(ci[0])}, {fmt_number(ci[1])}]"
