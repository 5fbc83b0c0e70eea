"""The findings ``mlflow-mia analyze`` checks, the rule that decides them, and the tables.

Each :class:`Finding` names the settings it compares (an experiment of
:mod:`mlflow_mia.analyze.plan` and a metric prefix: sample level, ``user/`` or a length
subset), the paper's figure for each, and its :class:`Comparison`\\ s: the paired
differences (same seeds, same pool; :mod:`mlflow_mia.analyze.paired`) its verdict is
decided on. :func:`finding_values` reads a finding's numbers from finished runs and
:func:`evaluate_finding` applies the rule to them; the tables built from these are in
:mod:`mlflow_mia.analyze.output`.

The rule (:func:`comparison_verdict`, :func:`combine_verdicts`)
-----------------------------------------------------------------
For each deciding comparison, the interval of the mean paired difference ``b - a``
(95 %, seed spread and article-level bootstrap combined) gives:

- a claimed increase: **reproduced** when the interval lies above 0, **not reproduced**
  when it lies below 0, **not resolved** when it covers 0 (a decrease: mirrored);
- a claimed equality within a margin ``m`` (e.g. "leaks about as much"): **reproduced**
  when the interval lies inside ``[-m, m]``, **not reproduced** when it lies wholly
  outside it, **not resolved** otherwise (two one-sided tests, the equivalence rule).

A finding's check, when it has one, adds a verdict of its own to the comparisons' (the
DP check below). A finding is reproduced when every deciding comparison and its check
are, not reproduced when any is not, and not resolved otherwise. A finding's guard can
then overrule: "not resolved" when the comparison is unfair (e.g. two model sizes
trained to different held-out losses, or a DP model that did not learn). With one seed
(the quick size) the interval holds the pool error only, and the verdict backs no claim.

The DP check (:func:`dp_check_status`)
-------------------------------------
Membership was randomised per article, so an empirical epsilon lower bound is a DP check
only with one trial per article (the ``user/`` reports) and only against a guarantee per
article: the accountant's per-sentence (eps, delta) converted by group privacy to
(k eps, k e^((k - 1) eps) delta), k the most sentences of one article in the DP target's
training data (``dp/max_group_size``; :func:`mlflow_mia.metrics.group_privacy.group_privacy`).
The article-level bound and its ceiling (the largest bound the audit's trial counts could
give) are recomputed at that delta from the run's logged rates (:func:`group_bound`). Per
DP model: **inconsistent** ("not reproduced") when the bound exceeds k eps; **vacuous**
("not resolved") when the converted delta is >= 1 (no guarantee per article) or the
ceiling is below k eps (no audit of this size could contradict the accountant);
**holds** ("reproduced") otherwise. The sentence-trial bound is shown as description
only: sentence trials of one article are not independent.

Paper figures are AUCs of Mireshghallah et al. (2022) for ClinicalBERT-Base on MIMIC-III
with MIMIC non-members (sample level, long sequences unless the setting says otherwise).
Mattern et al. (2023), Table 6 (DP-SGD), reports the neighbourhood attack only, so the
DP rows quote no paper figure beside the loss and likelihood-ratio attacks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from mlflow_mia.analyze.paired import paired_difference, seed_summary
from mlflow_mia.analyze.plan import experiments, run_name
from mlflow_mia.analyze.dp_check import AUDIT_CONFIDENCE, GROUP, LOSS, LR, NAN, dp_check_status, dp_verdict, group_bound
from mlflow_mia.metrics.group_privacy import group_privacy

__all__ = ["FINDINGS"]

TPR = "tpr_at_fpr_0.01"
VERDICTS = ("reproduced", "not reproduced", "not resolved")
HELDOUT_TOLERANCE = 0.05  # nats per token a larger target may be worse than the default and still count as trained
EQUAL_MARGIN = 0.02  # AUC: "about as much" (the paper's Base vs Base++ differ by 0.006)
METRICS = ("auc", "auc_ci_low", "auc_ci_high", TPR, f"{TPR}_ci_low", f"{TPR}_ci_high", "epsilon_lower_bound",
           "epsilon_lower_bound_max_certifiable")
NO_DP_FIGURE = "none: Mattern et al. Table 6 reports the neighbourhood attack only"


@dataclass(frozen=True)
class Setting:
    """One side of a comparison: where its numbers are logged, and the paper's figures for it.

    Attributes
    ----------
    label : str
        Shown in the table and plots (``"in-domain"``, ``"eps 8"``, ...).
    experiment : str
        Name of the :class:`~mlflow_mia.analyze.plan.Experiment` whose runs (one per seed) hold the metrics.
    prefix : str
        Metric prefix: ``""`` sample level, ``"user/"`` user level, ``"len_short/"`` ...
    paper : tuple of (str, str)
        The paper's figure for this setting, by attack (text, e.g. ``"AUC 0.900"``).
    """

    label: str
    experiment: str
    prefix: str = ""
    paper: tuple = ()

    def paper_figure(self, attack: str) -> str:
        return dict(self.paper).get(attack, "")


@dataclass(frozen=True)
class Comparison:
    """A paired difference ``b - a`` of one metric between two settings of a finding.

    Attributes
    ----------
    a, b : str
        Setting labels.
    attack : str
    metric : str
        ``"auc"`` or ``"tpr_at_fpr_0.01"`` (both logged with 95 % intervals).
    expect : {"increase", "decrease", "equal"}
        What the paper's claim says of ``b - a``.
    margin : float
        Equivalence margin of ``"equal"`` (metric units).
    decides : bool
        False: shown, but not part of the verdict (explains it, e.g. which part of a
        change does the work).
    """

    a: str
    b: str
    attack: str = LR
    metric: str = "auc"
    expect: str = "increase"
    margin: float = 0.0
    decides: bool = True

    def text(self) -> str:
        return f"{self.attack} {self.metric} {self.a} -> {self.b}"


@dataclass(frozen=True)
class Finding:
    """A finding of the papers, the settings that test it, and the comparisons that decide it.

    Attributes
    ----------
    name : str
        Key (``--findings`` takes these).
    claim, source : str
        The paper's observation in one sentence; paper and table.
    attacks : tuple of str
        Attacks shown in the table for this finding.
    settings : callable
        ``settings(size) -> tuple of Setting``.
    comparisons : callable
        ``comparisons(size) -> tuple of Comparison``.
    guard : callable, optional
        ``guard(values) -> (verdict or None, str)``: overrules the verdict (None: keeps
        it) and adds a sentence; ``values[(label, attack)]`` is :func:`setting_values`.
    check : callable, optional
        ``check(values) -> (verdict, str)``: a deciding verdict besides the comparisons'
        (combined with them by :func:`combine_verdicts`) and the numbers it rests on.
    """

    name: str
    claim: str
    source: str
    attacks: tuple
    settings: Callable
    comparisons: Callable
    guard: Callable | None = None
    check: Callable | None = None


def comparison_verdict(low: float, high: float, expect: str, margin: float = 0.0) -> str:
    """The verdict of one comparison from the interval ``[low, high]`` of ``b - a`` (the module's rule).

    Raises
    ------
    ValueError
        ``expect`` is not one of increase / decrease / equal.

    >>> comparison_verdict(0.01, 0.05, "increase"), comparison_verdict(-0.01, 0.05, "increase")
    ('reproduced', 'not resolved')
    >>> comparison_verdict(-0.01, 0.015, "equal", 0.02), comparison_verdict(0.03, 0.08, "equal", 0.02)
    ('reproduced', 'not reproduced')
    """
    if expect not in ("increase", "decrease", "equal"):
        raise ValueError(f"expect must be 'increase', 'decrease' or 'equal', got {expect!r}")
    if math.isnan(low) or math.isnan(high):
        return "not resolved"
    if expect == "equal":
        if -margin <= low and high <= margin:
            return "reproduced"
        return "not reproduced" if (low > margin or high < -margin) else "not resolved"
    if expect == "decrease":
        low, high = -high, -low
    return "reproduced" if low > 0 else ("not reproduced" if high < 0 else "not resolved")


def combine_verdicts(verdicts) -> str:
    """Reproduced when all are, not reproduced when any is not, else not resolved (none: not resolved)."""
    verdicts = list(verdicts)
    if any(v == "not reproduced" for v in verdicts):
        return "not reproduced"
    return "reproduced" if verdicts and all(v == "reproduced" for v in verdicts) else "not resolved"


def _auc(paper_loss, paper_lr):
    return ((LOSS, f"AUC {paper_loss:.3f}"), (LR, f"AUC {paper_lr:.3f}"))


def _mean(values, label, attack, key) -> float:
    return seed_summary(values[(label, attack)][key])[0]


def _size_guard(v):
    default, larger = _mean(v, "default", LR, "heldout_loss"), _mean(v, "larger", LR, "heldout_loss")
    text = f"held-out loss {default:.3f} (default) vs {larger:.3f} (larger) nats/token"
    if math.isnan(default) or math.isnan(larger):
        return "not resolved", "no held-out loss logged: the sizes cannot be compared fairly"
    if larger > default + HELDOUT_TOLERANCE:
        return "not resolved", text + f": the larger target is a worse LM (more than {HELDOUT_TOLERANCE} nats)"
    return None, text


def _dp_guard(v):
    """"not resolved" when a DP model (or the sigma = 0 control) did not learn; an inconsistency stands regardless."""
    idle = []
    for lab in ["sigma 0", *sorted({label for label, _ in v if label.startswith("eps ")})]:
        loss, base = _mean(v, lab, LR, "heldout_loss"), _mean(v, lab, LR, "null_heldout_loss")
        if not loss < base:  # NaN (not logged) counts as "not shown to learn"
            idle.append(f"{lab} held-out loss {loss:.3f} >= base {base:.3f}")
    if idle and dp_verdict(v)[0] != "not reproduced":
        return "not resolved", f"a DP-SGD model did not learn ({'; '.join(idle)})"
    return None, ""


def _dp_settings(size):
    dp = tuple(Setting(f"eps {eps:g}", f"dp-sgd-eps{eps:g}", paper=((LR, NO_DP_FIGURE), (LOSS, NO_DP_FIGURE)))
               for eps in size.dp_epsilons)
    return (Setting("non-private", "baseline"), Setting("sigma 0", "dp-sgd-sigma0"), *dp)


def _dp_comparisons(size):
    out = [Comparison("non-private", "sigma 0", expect="decrease", decides=False)]
    for eps in size.dp_epsilons:
        out += [Comparison("sigma 0", f"eps {eps:g}", expect="decrease"),
                Comparison("sigma 0", f"eps {eps:g}", metric=TPR, expect="decrease")]
    return tuple(out)


def _both(a, b, expect="increase"):
    return lambda size: (Comparison(a, b, LOSS, expect=expect), Comparison(a, b, LR, expect=expect))


FINDINGS: tuple[Finding, ...] = (
    Finding("reference_choice", "A reference trained on the target's domain beats a general one.",
            "Mireshghallah et al. 2022, Table 5", (LR,),
            lambda size: (Setting("in-domain", "baseline", paper=_auc(0.662, 0.900)),
                          Setting("out-of-domain", "reference-ood"),
                          Setting("general", "reference-general", paper=_auc(0.662, 0.883))),
            lambda size: (Comparison("out-of-domain", "in-domain"), Comparison("general", "in-domain"))),
    Finding("training_length", "Training 2.5x longer (Base++) leaks about as much as Base.",
            "Mireshghallah et al. 2022, Table 4", (LOSS, LR),
            lambda size: (Setting("short", "short-training", paper=_auc(0.662, 0.900)),
                          Setting("long", "baseline", paper=_auc(0.656, 0.894))),
            lambda size: (Comparison("short", "long", expect="equal", margin=EQUAL_MARGIN),)),
    Finding("model_size", "A larger model leaks slightly more.", "Mireshghallah et al. 2022, Table 4", (LOSS, LR),
            lambda size: (Setting("default", "baseline", paper=_auc(0.662, 0.900)),
                          Setting("larger", "larger-model", paper=_auc(0.679, 0.904))),
            lambda size: (Comparison("default", "larger"),), _size_guard),
    Finding("name_insertion", "Names prepended to the training samples weaken the loss attack and strengthen "
            "the likelihood ratio.", "Mireshghallah et al. 2022, Table 6", (LOSS, LR),
            lambda size: (Setting("plain", "baseline", paper=_auc(0.662, 0.900)),
                          Setting("names", "name-insertion", paper=_auc(0.561, 0.960))),
            lambda size: (Comparison("plain", "names", LOSS, expect="decrease"), Comparison("plain", "names"))),
    Finding("sample_length", "Long samples (20-60 tokens) leak more than short ones (10-20).",
            "Mireshghallah et al. 2022, Table 3", (LOSS, LR),
            lambda size: (Setting("short", "baseline", "len_short/", paper=_auc(0.516, 0.830)),
                          Setting("long", "baseline", "len_long/", paper=_auc(0.662, 0.900))),
            _both("short", "long")),
    Finding("user_level", "Deciding per user (patient, article) from all their samples leaks more.",
            "Mireshghallah et al. 2022, Table 2", (LOSS, LR),
            lambda size: (Setting("sample", "baseline", paper=_auc(0.662, 0.900)),
                          Setting("user", "baseline", "user/", paper=_auc(0.915, 0.992))),
            _both("sample", "user")),
    Finding("signal", "The pseudo-log-likelihood (normalized energy) gives a higher AUC than the masked energy.",
            "Mireshghallah et al. 2022, Tables 9 and 11", (LOSS, LR),
            lambda size: (Setting("energy", "baseline", paper=_auc(0.662, 0.900)),
                          Setting("energy mean", "energy-mean"),
                          Setting("pll", "pll", paper=_auc(0.685, 0.916))),
            lambda size: (Comparison("energy", "pll"), Comparison("energy", "energy mean", decides=False),
                          Comparison("energy mean", "pll", decides=False))),
    Finding("dp_sgd", "DP-SGD lowers the attack's AUC and TPR at 1 % FPR below those of the same recipe without "
            "noise; the article-level empirical epsilon lower bound stays below the accountant's epsilon converted "
            "to articles.",
            "Mattern et al. 2023, Table 6 (neighbourhood attack; DP recipe of Li et al. 2022)", (LOSS, LR),
            _dp_settings, _dp_comparisons, _dp_guard, dp_verdict),
)


def setting_values(seed_metrics, prefix: str, attack: str, null_metrics=None) -> dict:
    """The numbers of one (setting, attack), seed by seed, from the runs' logged metrics.

    Parameters
    ----------
    seed_metrics : sequence of dict
        ``run.data.metrics`` of the setting's run for each seed (``{}`` for a seed not run).
    prefix : str
        The setting's metric prefix.
    attack : str
    null_metrics : dict, optional
        Metrics of the setting's null run (its target's base model audited as the target).

    Returns
    -------
    dict of str to numpy.ndarray of shape (n_seeds,)
        The :data:`METRICS` (``auc``, its 95 % interval, ``tpr_at_fpr_0.01`` and its
        interval, ``epsilon_lower_bound`` and ``epsilon_lower_bound_max_certifiable``),
        ``heldout_loss`` (the target's ``heldout/loss``), ``dp_epsilon`` and ``dp_delta``
        (the accountant's, per training sentence: ``dp/epsilon``, ``dp/delta``),
        ``dp_max_group_size`` (``dp/max_group_size``: sentences of the largest training
        article), ``dp_group_epsilon`` and ``dp_group_delta`` (the guarantee per article,
        :func:`~mlflow_mia.metrics.group_privacy.group_privacy`); for the full pool and the
        ``user/`` prefix: ``group_epsilon_lower_bound`` and
        ``group_epsilon_lower_bound_max_certifiable`` (the article-level bound and its
        ceiling as logged, at the audit's delta), ``group_bound_at_group_delta`` and
        ``group_ceiling_at_group_delta`` (this attack's, recomputed at ``dp_group_delta``
        by :func:`group_bound`; NaN where that delta is >= 1). ``null_auc``, ``null_auc_ci_low``,
        ``null_auc_ci_high`` (the null run's 95 % interval), ``null_auc_permutation_p``
        (its article-label permutation p-value), ``null_tpr_at_fpr_0.01`` and
        ``null_heldout_loss`` as 1-element arrays. NaN where absent.
    """
    base = f"{prefix}{attack}/"
    get = lambda key: np.array([float(m.get(key, NAN)) for m in seed_metrics])  # noqa: E731
    out = {k: get(base + k) for k in METRICS}
    out["heldout_loss"] = get("heldout/loss")
    out["dp_epsilon"], out["dp_delta"], out["dp_max_group_size"] = get("dp/epsilon"), get("dp/delta"), \
        get("dp/max_group_size")
    converted = [group_privacy(e, d, group_size=int(k)) if np.isfinite([e, d, k]).all() and k >= 1 else None
                 for e, d, k in zip(out["dp_epsilon"], out["dp_delta"], out["dp_max_group_size"])]
    out["dp_group_epsilon"] = np.array([g.epsilon if g else NAN for g in converted])
    out["dp_group_delta"] = np.array([g.delta if g else NAN for g in converted])
    whole_pool = prefix in ("", GROUP)
    for key in ("epsilon_lower_bound", "epsilon_lower_bound_max_certifiable"):
        out[f"group_{key}"] = get(f"{GROUP}{attack}/{key}") if whole_pool else np.full(len(seed_metrics), NAN)
    at_delta = [group_bound(m, attack, delta=g.delta) if whole_pool and g and g.delta < 1 else (NAN, NAN)
                for m, g in zip(seed_metrics, converted)]
    out["group_bound_at_group_delta"] = np.array([b for b, _ in at_delta], dtype=float)
    out["group_ceiling_at_group_delta"] = np.array([c for _, c in at_delta], dtype=float)
    null = null_metrics or {}
    for key in ("auc", "auc_ci_low", "auc_ci_high", "auc_permutation_p", TPR):
        out[f"null_{key}"] = np.array([float(null.get(base + key, NAN))])
    out["null_heldout_loss"] = np.array([float(null.get("heldout/loss", NAN))])
    return out


def finding_values(finding, runs: dict, size) -> tuple[dict, dict]:
    """A finding's numbers from finished runs: ``(values, run_ids)``.

    Parameters
    ----------
    finding : Finding
    runs : dict of str to (str, dict)
        As for :func:`mlflow_mia.analyze.output.findings_table`.
    size : AnalysisSize

    Returns
    -------
    values : dict of (str, str) to dict
        ``values[(setting label, attack)]`` is :func:`setting_values` (loss and
        likelihood ratio for every setting).
    run_ids : dict of str to str
        Setting label -> its seeds' run ids, comma-separated ("" for none).
    """
    exps = experiments(size)
    values, ids = {}, {}
    for s in finding.settings(size):
        found = [runs.get(run_name(s.experiment, seed), (None, {})) for seed in size.seeds]
        ids[s.label] = ",".join(r for r, _ in found if r)
        exp = exps.get(s.experiment)
        null = runs.get(exp.null, (None, {}))[1] if exp is not None and exp.null else {}
        for attack in (LOSS, LR):
            values[(s.label, attack)] = setting_values([m for _, m in found], s.prefix, attack, null)
    return values, ids


def _difference(values, c: Comparison):
    va, vb = values[(c.a, c.attack)], values[(c.b, c.attack)]
    ci = lambda v: np.c_[v[f"{c.metric}_ci_low"], v[f"{c.metric}_ci_high"]]  # noqa: E731
    return paired_difference(va[c.metric], vb[c.metric], a_ci=ci(va), b_ci=ci(vb))


def evaluate_finding(finding, comparisons, values) -> tuple[str, str, list, str]:
    """Apply the rule to one finding: its paired differences, their verdicts, the guard.

    Parameters
    ----------
    finding : Finding
    comparisons : sequence of Comparison
        ``finding.comparisons(size)``.
    values : dict
        The first item of :func:`finding_values`.

    Returns
    -------
    verdict : str
        One of :data:`VERDICTS`, or ``"not run"`` when a setting has no finished run.
    why : str
        Every comparison's difference and verdict, then the check's and the guard's notes.
    rows : list of (Comparison, PairedDifference, str)
        Each comparison, its paired difference and its own verdict.
    guard : str
        The check's and the guard's notes ("" for none).
    """
    if any(np.isnan(v["auc"]).all() for v in values.values()):
        return "not run", "a setting of this finding has no finished run", [], ""
    rows = []
    for c in comparisons:
        d = _difference(values, c)
        rows.append((c, d, comparison_verdict(d.low, d.high, c.expect, c.margin)))
    verdicts = [v for c, _, v in rows if c.decides]
    notes = []
    if finding.check is not None:
        checked, check_note = finding.check(values)
        verdicts.append(checked)
        notes.append(check_note)
    verdict = combine_verdicts(verdicts)
    if finding.guard is not None:
        override, guard_note = finding.guard(values)
        verdict = override or verdict
        notes.append(guard_note)
    note = "; ".join(n for n in notes if n)
    why = "; ".join(f"{c.text()}: {d.text()} {v if c.decides else '(shown, not deciding)'}" for c, d, v in rows)
    why = f"{why}; {note}" if note else why
    return verdict, why, rows, note
