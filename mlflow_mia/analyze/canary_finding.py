"""The ``canaries`` finding of ``mlflow-mia analyze``: planted canaries on a non-private and a DP-SGD model.

The claim (issue 24; Carlini et al. 2019, Steinke, Nasr, Jagielski 2023): a model fine-tuned
without a defence memorises planted canaries, more the more often a canary is repeated, and
its record-level one-run epsilon lower bound is above 0; the DP-SGD model trained on the same
data keeps its bound at or under the accountant's epsilon.

:func:`run_canary_finding` builds (or finds) the canary demo of the suite's demo size
(:func:`mlflow_mia.demo.canary.build_canary_demo`), audits both targets with
:func:`mlflow_mia.pipeline.canary.canary_audit_and_log` (a finished run with the same key
is reused) and returns the finding's rows. :func:`canary_rows` and :func:`canary_verdict`
read the logged metrics only, so they are tested on constructed inputs.

**The verdict, by rule** (units: one canary; the r = 1 canaries give the record-level bound):

- ``not reproduced`` when the DP model's record-level bound exceeds its accountant's
  epsilon (a contradiction: the accounting or the training is wrong), or the non-private
  model's mean exposure of the included canaries at the largest repetition count is not
  above that at r = 1;
- ``reproduced`` when the DP bound is at or under the accountant's epsilon, the
  non-private record-level bound is above 0, and the non-private mean exposure grows with r:
  its Spearman correlation with r is positive and the mean at the largest r exceeds the
  one-sided upper confidence bound of the mean at r = 1 (resampling canaries);
- ``not resolved`` otherwise: a bound of 0 is a lower bound, it does not show the absence
  of leakage, and an exposure increase within the r = 1 interval is not resolved from noise.
"""

from __future__ import annotations

import hashlib
import logging
import math
from pathlib import Path
import importlib.util
from scipy.stats import spearmanr
import pandas as pd

from mlflow_mia.analyze.findings import Finding
from mlflow_mia.tracking.runs import finished_run
from mlflow_mia.canaries import CanarySet
from mlflow_mia.config import record_digest
from mlflow_mia.demo.canary import build_canary_demo
from mlflow_mia.models.resolve import resolve_model
from mlflow_mia.options.canary import parse_canary_config
from mlflow_mia.pipeline.canary import canary_audit_and_log

__all__: list[str] = []

log = logging.getLogger(__name__)

CANARY_FINDING = "canaries"
CLAIM = ("Without a defence, planted canaries are memorised more with more repetitions and the record-level "
         "one-run epsilon bound is above 0; with DP-SGD the bound stays at or under the accountant's epsilon.")
SOURCE = "Carlini et al. 2019, Sec. 5; Steinke, Nasr, Jagielski 2023, Sec. 7"
KEY_TAG = "mia.analyze.canary_key"
NAN = float("nan")


def _repetitions(metrics: dict) -> list[int]:
    """Repetition counts with a logged AUC, ascending."""
    found = set()
    for key in metrics:
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == "canary" and parts[1][:1] == "r" and parts[1][1:].isdigit():
            found.add(int(parts[1][1:]))
    return sorted(found)


def _exposure_grows(metrics: dict) -> tuple[bool | None, str]:
    """(True / False / None = not resolved, text) for the mean exposure of included canaries against r."""
    reps = [r for r in _repetitions(metrics) if math.isfinite(metrics.get(f"canary/r{r}/exposure_mean", NAN))]
    if len(reps) < 2 or reps[0] != 1:
        return None, "no exposure at r = 1 and a larger r"
    means = [metrics[f"canary/r{r}/exposure_mean"] for r in reps]
    text = "mean exposure " + ", ".join(f"r{r} {v:.2f}" for r, v in zip(reps, means)) + " bits"
    if means[-1] <= means[0]:
        return False, text
    rho = float(spearmanr(reps, means).statistic)
    upper = metrics.get("canary/r1/exposure_upper", NAN)
    grows = rho > 0 and math.isfinite(upper) and means[-1] > upper
    return (True if grows else None), text + f" (Spearman {rho:.2f}; r1 upper bound {upper:.2f})"


def canary_verdict(non_private: dict, dp: dict, dp_epsilon: float) -> tuple[str, str]:
    """The finding's verdict from the two canary audits' logged metrics (see the module docstring).

    Parameters
    ----------
    non_private, dp : dict of str to float
        ``run.data.metrics`` of the canary audits of the non-private and the DP-SGD target
        (empty when not run).
    dp_epsilon : float
        The DP target's accountant epsilon (at the audit's delta).

    Returns
    -------
    (str, str)
        ``"reproduced"``, ``"not reproduced"``, ``"not resolved"`` or ``"not run"`` (the
        vocabulary of :func:`mlflow_mia.analyze.findings.comparison_verdict`), and the numbers it rests on.
    """
    if "canary/epsilon_lower_bound" not in non_private or "canary/epsilon_lower_bound" not in dp:
        return "not run", "a canary audit of this finding has no finished run"
    np_bound, dp_bound = non_private["canary/epsilon_lower_bound"], dp["canary/epsilon_lower_bound"]
    grows, exposure = _exposure_grows(non_private)
    dp_ceiling = dp.get("canary/epsilon_max", NAN)
    vacuous = " (VACUOUS: its canaries certify at most {:.2f})".format(dp_ceiling) if dp_ceiling < dp_epsilon else ""
    why = (f"non-private: record-level bound {np_bound:.3f}, {exposure}; DP-SGD: record-level bound {dp_bound:.3f} "
           f"vs accountant's epsilon {dp_epsilon:.2f}{vacuous}")
    if not math.isfinite(dp_epsilon):
        return "not resolved", why + "; no accountant's epsilon to compare with"
    if dp_bound > dp_epsilon:
        return "not reproduced", "INCONSISTENT: the DP bound exceeds the accountant's epsilon; " + why
    if grows is False:
        return "not reproduced", why
    if np_bound > 0 and grows:
        return "reproduced", why
    return "not resolved", why


def canary_rows(non_private: dict, dp: dict, dp_epsilon: float, *, run_ids=("", ""), attack: str = "loss"):
    """The finding's rows: one per target and repetition count, in the findings table's columns.

    Parameters
    ----------
    non_private, dp : dict of str to float
        The two canary audits' logged metrics.
    dp_epsilon : float
    run_ids : (str, str)
    attack : str
        The canary audit's attack (``loss`` or ``likelihood_ratio``).

    Returns
    -------
    pandas.DataFrame
        Columns of :func:`mlflow_mia.analyze.output.findings_table` (``setting`` is
        ``"<target> r<r>"``; ``epsilon_lower_bound`` the bound of the r-canaries, unit one
        canary of r records) plus ``repetitions``, ``exposure_mean``,
        ``exposure_excluded_mean``.
    """
    verdict, why = canary_verdict(non_private, dp, dp_epsilon)
    rows = []
    for label, metrics, run_id, eps in (("non-private", non_private, run_ids[0], NAN),
                                        ("dp-sgd", dp, run_ids[1], dp_epsilon)):
        for r in _repetitions(metrics):
            g = lambda k: float(metrics.get(f"canary/r{r}/{k}", NAN))  # noqa: E731
            ceiling = g("epsilon_max")
            rows.append({"finding": CANARY_FINDING, "setting": f"{label} r{r}", "attack": attack, "n_seeds": 1,
                         "auc_sd": NAN, "auc_runs": "", "tpr_sd": NAN, "null_auc": NAN, "null_tpr_at_fpr_0.01": NAN,
                         "heldout_loss": NAN, "null_heldout_loss": NAN, "auc": g("auc"), "auc_ci_low": g("auc_ci_low"), "auc_ci_high": g("auc_ci_high"),
                         "tpr_at_fpr_0.01": g("tpr_at_fpr_0.01"), "epsilon_lower_bound": g("epsilon_lower_bound"),
                         "epsilon_lower_bound_max_certifiable": ceiling, "dp_epsilon": eps,
                         "epsilon_check": "" if math.isnan(eps) else ("vacuous" if ceiling < eps else "informative"),
                         "paper": "", "source": SOURCE, "reproduced": verdict, "why": why,
                         "experiment": f"canaries-{label}", "run_id": run_id, "repetitions": r,
                         "exposure_mean": g("exposure_mean"), "exposure_excluded_mean": g("exposure_excluded_mean")})
    return pd.DataFrame(rows)


def run_canary_finding(size, *, progress: bool = False, bootstrap_rounds: int | None = None):
    """Build (or find) the canary demo of ``size.demo_size``, audit both targets, return the rows.

    Each audit is a nested run of the active run, reused when a finished run with the same
    key (pinned target version, canary file digest, audit settings) exists.

    Parameters
    ----------
    size : AnalysisSize
    progress : bool
    bootstrap_rounds : int, optional
        Default ``size.bootstrap_rounds``.

    Returns
    -------
    pandas.DataFrame
        :func:`canary_rows`.

    Raises
    ------
    ImportError
        opacus or the demo corpus is missing (the caller skips the finding).
    """
    import mlflow
    from mlflow import MlflowClient

    demo = build_canary_demo(size=size.demo_size, progress=progress)
    rounds = size.bootstrap_rounds if bootstrap_rounds is None else bootstrap_rounds
    cfg, options = parse_canary_config({"method": "canaries", "bootstrap_rounds": rounds,
                                        "tag_model_version": False, "progress": progress})
    canaries = CanarySet.load(demo.canaries_path)
    digest = hashlib.sha256(Path(demo.canaries_path).read_bytes()).hexdigest()[:16]
    client, found = MlflowClient(), {}
    for label, uri in demo.targets().items():
        target = resolve_model(uri, role="target")
        key = record_digest({"finding": CANARY_FINDING, "target": target.resolved_uri, "config": cfg.to_params(),
                             "canaries": digest})
        run = finished_run(client, KEY_TAG, key)
        if run is None:
            with mlflow.start_run(run_name=f"canaries-{label}", nested=True) as child:
                mlflow.set_tag(KEY_TAG, key)
                canary_audit_and_log(target, canaries, cfg, options, run_id=child.info.run_id,
                                     extra_params={"canary.demo_target": label, **demo.params(label)})
            run = client.get_run(child.info.run_id)
        else:
            log.info("analyze: canaries-%s already ran (run %s); reusing it", label, run.info.run_id)
        found[label] = (run.info.run_id, dict(run.data.metrics))
    return canary_rows(found["non-private"][1], found["dp-sgd"][1], demo.dp_epsilon,
                       run_ids=(found["non-private"][0], found["dp-sgd"][0]))


#: The finding as :func:`mlflow_mia.analyze.suite.select_findings` lists it; it needs no membership
#: experiment (``settings`` is empty): its rows come from :func:`run_canary_finding`.
CANARY_FINDING_SPEC = Finding(CANARY_FINDING, CLAIM, SOURCE, ("loss",), settings=lambda size: (),
                              comparisons=lambda size: ())


def add_canary_rows(table, size, *, progress: bool, skipped: dict):
    """``table`` with the canary finding's rows appended (unchanged, and ``skipped`` noted, when it cannot run)."""
    if importlib.util.find_spec("opacus") is None:
        skipped[CANARY_FINDING] = "the canary demo's DP-SGD target needs opacus: pip install 'mlflow-mia[dp]'"
        return table
    rows = run_canary_finding(size, progress=progress)
    return pd.concat([table, rows], ignore_index=True)
