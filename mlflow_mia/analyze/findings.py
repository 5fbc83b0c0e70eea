"""The findings ``mlflow-mia analyze`` checks, the paper's figures next to ours, and the table.

Each :class:`Finding` names the settings it compares (an experiment of
:mod:`mlflow_mia.analyze.plan` and a metric prefix: sample level, ``user/`` or a length
subset), the paper's figure for each, and a check that says, from our logged metrics,
whether the paper's observation holds on the demo. :func:`findings_table` reads the
metrics of finished runs (never recomputes them), so a resumed suite and a fresh one
give the same table.

Paper figures are AUCs of Mireshghallah et al. (2022) for ClinicalBERT-Base on MIMIC-III
with MIMIC non-members (sample level, long sequences unless the setting says otherwise),
and TPRs at 1 % FPR of Mattern et al. (2023), Table 6, for the DP-SGD defence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

__all__ = ["FINDINGS", "Finding", "Setting", "findings_table", "setting_values"]

LR, LOSS = "likelihood_ratio", "loss"
NAN = float("nan")


@dataclass(frozen=True)
class Setting:
    """One side of a comparison: where its numbers are logged, and the paper's figures for it.

    Attributes
    ----------
    label : str
        Shown in the table and plots (``"in-domain"``, ``"eps 8"``, ...).
    experiment : str
        Name of the :class:`~mlflow_mia.analyze.plan.Experiment` whose run holds the metrics.
    prefix : str
        Metric prefix: ``""`` sample level, ``"user/"`` user level, ``"len_short/"`` ...
    paper : dict of str to str
        The paper's figure for this setting, by attack (text, e.g. ``"AUC 0.900"``).
    """

    label: str
    experiment: str
    prefix: str = ""
    paper: tuple = ()

    def paper_figure(self, attack: str) -> str:
        return dict(self.paper).get(attack, "")


@dataclass(frozen=True)
class Finding:
    """A finding of the papers, the settings that test it and its check.

    Attributes
    ----------
    name : str
        Key (``--findings`` takes these).
    claim : str
        The paper's observation in one sentence.
    source : str
        Paper and table.
    attacks : tuple of str
        Attacks shown in the table for this finding.
    settings : callable
        ``settings(size) -> tuple of Setting`` (the DP settings depend on the size's epsilons).
    check : callable
        ``check(values) -> (bool, str)``; ``values[(label, attack)]`` is
        :func:`setting_values`' dict. Returns whether the claim holds and the sentence why.
    """

    name: str
    claim: str
    source: str
    attacks: tuple
    settings: Callable
    check: Callable


def _auc(paper_loss, paper_lr):
    return ((LOSS, f"AUC {paper_loss:.3f}"), (LR, f"AUC {paper_lr:.3f}"))


def _a(values, label, attack=LR) -> float:
    return values[(label, attack)]["auc"]


def _overlap(values, a, b, attack=LR) -> bool:
    va, vb = values[(a, attack)], values[(b, attack)]
    return max(va["auc_ci_low"], vb["auc_ci_low"]) <= min(va["auc_ci_high"], vb["auc_ci_high"])


def _check_reference(v):
    ok = _a(v, "in-domain") > max(_a(v, "out-of-domain"), _a(v, "general"))
    return ok, (f"likelihood-ratio AUC with the in-domain reference {_a(v, 'in-domain'):.3f}, out-of-domain "
                f"{_a(v, 'out-of-domain'):.3f}, general {_a(v, 'general'):.3f}")


def _check_length_of_training(v):
    ok = _overlap(v, "short", "long")
    return ok, (f"likelihood-ratio AUC {_a(v, 'short'):.3f} after the short schedule and {_a(v, 'long'):.3f} after "
                f"2.5x as many steps; the 95 % intervals {'overlap' if ok else 'do not overlap'}")


def _check_size(v):
    ok = _a(v, "larger") > _a(v, "default")
    return ok, f"likelihood-ratio AUC {_a(v, 'default'):.3f} (2 layers) and {_a(v, 'larger'):.3f} (deeper)"


def _check_names(v):
    ok = _a(v, "names", LOSS) < _a(v, "plain", LOSS) and _a(v, "names") > _a(v, "plain")
    return ok, (f"loss AUC {_a(v, 'plain', LOSS):.3f} -> {_a(v, 'names', LOSS):.3f}, likelihood-ratio AUC "
                f"{_a(v, 'plain'):.3f} -> {_a(v, 'names'):.3f} with names inserted")


def _both_higher(v, low: str, high: str, low_text: str, high_text: str):
    """Both attacks' AUCs higher in setting ``high`` than in ``low``."""
    ok = all(_a(v, high, at) > _a(v, low, at) for at in (LOSS, LR))
    return ok, (f"loss AUC {_a(v, low, LOSS):.3f} {low_text} / {_a(v, high, LOSS):.3f} {high_text}, "
                f"likelihood-ratio {_a(v, low):.3f} / {_a(v, high):.3f}")


def _check_sample_length(v):
    return _both_higher(v, "short", "long", "short", "long")


def _check_user(v):
    return _both_higher(v, "sample", "user", "per sentence", "per article")


def _check_signal(v):
    ok = _a(v, "pll") > _a(v, "energy")
    return ok, f"likelihood-ratio AUC {_a(v, 'energy'):.3f} with the masked energy, {_a(v, 'pll'):.3f} with the PLL"


def _vacuous(v, label) -> bool:
    """True when no outcome of these trial counts could have put the bound above the accountant's epsilon."""
    ceiling = max(v[(label, at)]["epsilon_lower_bound_max_certifiable"] for at in (LOSS, LR))
    return ceiling < v[(label, LR)]["dp_epsilon"]  # False when either is unknown (NaN)


def _check_dp(v):
    labels = sorted({label for label, _ in v if label != "non-private"})
    tpr = "tpr_at_fpr_0.01"
    falls = all(v[(lab, LR)]["auc"] < v[("non-private", LR)]["auc"]
                and v[(lab, LR)][tpr] <= v[("non-private", LR)][tpr] for lab in labels)
    bound_ok = all(v[(lab, at)]["epsilon_lower_bound"] <= v[(lab, at)]["dp_epsilon"]
                   for lab in labels for at in (LOSS, LR))
    parts = []
    for lab in labels:
        ceiling = max(v[(lab, at)]["epsilon_lower_bound_max_certifiable"] for at in (LOSS, LR))
        vacuous = (f" (VACUOUS: these trial counts certify at most {ceiling:.2f}, so the bound cannot exceed the "
                   "accountant's epsilon)" if _vacuous(v, lab) else "")
        parts.append(f"{lab}: AUC {v[(lab, LR)]['auc']:.3f}, TPR@1% {v[(lab, LR)][tpr]:.3f}, epsilon lower bound "
                     f"{max(v[(lab, at)]['epsilon_lower_bound'] for at in (LOSS, LR)):.2f} <= accountant's "
                     f"{v[(lab, LR)]['dp_epsilon']:.2f}{vacuous}")
    head = f"non-private AUC {v[('non-private', LR)]['auc']:.3f}, TPR@1% {v[('non-private', LR)][tpr]:.3f}; "
    if not bound_ok:
        head = "INCONSISTENT: an empirical epsilon lower bound exceeds the accountant's epsilon; " + head
    return falls and bound_ok, head + "; ".join(parts)


def _dp_settings(size):
    mattern = {8.0: "TPR@1% 0.0152 (eps 10)", 1.0: "TPR@1% 0.0129 (eps 5)"}
    dp = tuple(Setting(f"eps {eps:g}", f"dp-sgd-eps{eps:g}", paper=((LR, mattern.get(eps, "")),))
               for eps in size.dp_epsilons)
    return (Setting("non-private", "baseline", paper=((LR, "TPR@1% 0.0829"),)), *dp)


FINDINGS: tuple[Finding, ...] = (
    Finding("reference_choice", "A reference trained on the target's domain beats a general one.",
            "Mireshghallah et al. 2022, Table 5", (LR,),
            lambda size: (Setting("in-domain", "baseline", paper=_auc(0.662, 0.900)),
                          Setting("out-of-domain", "reference-ood"),
                          Setting("general", "reference-general", paper=_auc(0.662, 0.883))),
            _check_reference),
    Finding("training_length", "Training 2.5x longer (Base++) leaks about as much as Base.",
            "Mireshghallah et al. 2022, Table 4", (LOSS, LR),
            lambda size: (Setting("short", "short-training", paper=_auc(0.662, 0.900)),
                          Setting("long", "baseline", paper=_auc(0.656, 0.894))),
            _check_length_of_training),
    Finding("model_size", "A larger model leaks slightly more.", "Mireshghallah et al. 2022, Table 4", (LOSS, LR),
            lambda size: (Setting("default", "baseline", paper=_auc(0.662, 0.900)),
                          Setting("larger", "larger-model", paper=_auc(0.679, 0.904))),
            _check_size),
    Finding("name_insertion", "Names prepended to the training samples weaken the loss attack and strengthen "
            "the likelihood ratio.", "Mireshghallah et al. 2022, Table 6", (LOSS, LR),
            lambda size: (Setting("plain", "baseline", paper=_auc(0.662, 0.900)),
                          Setting("names", "name-insertion", paper=_auc(0.561, 0.960))),
            _check_names),
    Finding("sample_length", "Long samples (20-60 tokens) leak more than short ones (10-20).",
            "Mireshghallah et al. 2022, Table 3", (LOSS, LR),
            lambda size: (Setting("short", "baseline", "len_short/", paper=_auc(0.516, 0.830)),
                          Setting("long", "baseline", "len_long/", paper=_auc(0.662, 0.900))),
            _check_sample_length),
    Finding("user_level", "Deciding per user (patient, article) from all their samples leaks more.",
            "Mireshghallah et al. 2022, Table 2", (LOSS, LR),
            lambda size: (Setting("sample", "baseline", paper=_auc(0.662, 0.900)),
                          Setting("user", "baseline", "user/", paper=_auc(0.915, 0.992))),
            _check_user),
    Finding("signal", "The pseudo-log-likelihood (normalized energy) gives a higher AUC than the masked energy.",
            "Mireshghallah et al. 2022, Tables 9 and 11", (LOSS, LR),
            lambda size: (Setting("energy", "baseline", paper=_auc(0.662, 0.900)),
                          Setting("pll", "pll", paper=_auc(0.685, 0.916))),
            _check_signal),
    Finding("dp_sgd", "DP-SGD lowers the attack's AUC and TPR at 1 % FPR; the empirical epsilon lower bound "
            "stays below the accountant's epsilon.", "Mattern et al. 2023, Table 6", (LOSS, LR),
            _dp_settings, _check_dp),
)


def setting_values(metrics: dict, prefix: str, attack: str) -> dict:
    """The numbers of one (setting, attack) from a run's logged metrics (NaN where absent).

    Parameters
    ----------
    metrics : dict of str to float
        ``run.data.metrics`` of the experiment's run.
    prefix : str
        The setting's metric prefix.
    attack : str

    Returns
    -------
    dict
        ``auc``, ``auc_ci_low``, ``auc_ci_high``, ``tpr_at_fpr_0.01``, ``epsilon_lower_bound``,
        ``epsilon_lower_bound_max_certifiable`` (the largest bound the run's trial counts could
        give), ``dp_epsilon`` (the run's ``dp/epsilon``; NaN for non-private runs).
    """
    base = f"{prefix}{attack}/"
    keys = ("auc", "auc_ci_low", "auc_ci_high", "tpr_at_fpr_0.01", "epsilon_lower_bound",
            "epsilon_lower_bound_max_certifiable")
    out = {k: float(metrics.get(base + k, NAN)) for k in keys}
    out["dp_epsilon"] = float(metrics.get("dp/epsilon", NAN))
    return out


def _verdict(finding: Finding, values: dict) -> tuple[str, str]:
    if any(math.isnan(v["auc"]) for v in values.values()):
        return "not run", "a setting of this finding has no finished run"
    ok, why = finding.check(values)
    return ("yes" if ok else "no"), why


def _epsilon_check(values: dict) -> str:
    """How a bound compares with its run's accountant epsilon: vacuous, informative, or "" (nothing to compare)."""
    ceiling, dp = values["epsilon_lower_bound_max_certifiable"], values["dp_epsilon"]
    if math.isnan(dp) or math.isnan(ceiling):
        return ""
    return "vacuous" if ceiling < dp else "informative"


def findings_table(runs: dict, size, findings=FINDINGS):
    """One row per finding, setting and attack, from the experiments' logged metrics.

    Parameters
    ----------
    runs : dict of str to (str, dict)
        Experiment name -> (run id, ``run.data.metrics``) of its finished run; a missing
        experiment leaves its rows NaN with ``reproduced="not run"``.
    size : AnalysisSize
    findings : sequence of Finding

    Returns
    -------
    pandas.DataFrame
        Columns ``finding``, ``setting``, ``attack``, ``auc``, ``auc_ci_low``,
        ``auc_ci_high``, ``tpr_at_fpr_0.01``, ``epsilon_lower_bound``,
        ``epsilon_lower_bound_max_certifiable``, ``dp_epsilon``, ``epsilon_check``
        (``"vacuous"`` where the bound is compared with an accountant's epsilon above
        the largest value its trial counts could certify, ``"informative"`` where it
        could have exceeded it, ``""`` where no accountant's epsilon exists),
        ``paper`` (the paper's figure), ``source``, ``reproduced`` (yes / no / not run),
        ``why`` (the numbers the verdict rests on), ``experiment``, ``run_id``.
    """
    import pandas as pd

    rows = []
    for finding in findings:
        settings = finding.settings(size)
        values, found = {}, {}
        for s in settings:
            run_id, metrics = runs.get(s.experiment, (None, {}))
            found[s.label] = run_id
            for attack in (LOSS, LR):
                values[(s.label, attack)] = setting_values(metrics, s.prefix, attack)
        verdict, why = _verdict(finding, values)
        for s in settings:
            for attack in finding.attacks:
                rows.append({"finding": finding.name, "setting": s.label, "attack": attack,
                             **values[(s.label, attack)], "epsilon_check": _epsilon_check(values[(s.label, attack)]),
                             "paper": s.paper_figure(attack), "source": finding.source,
                             "reproduced": verdict, "why": why, "experiment": s.experiment,
                             "run_id": found[s.label] or ""})
    return pd.DataFrame(rows)
