"""The DP finding's check: an article-level epsilon lower bound against the accountant's epsilon per article.

Membership in the analyze suite is decided per article, so a trial is an article and
the bound that can contradict a DP accountant is the article-level one (one trial per
article), compared with the accountant's per-sentence guarantee converted to articles
by group privacy (:func:`~mlflow_mia.metrics.group_privacy.group_privacy`: k sentences
per article give (k eps, k e^((k - 1) eps) delta)). The sentence-trial bound is shown,
as description only.
"""

from __future__ import annotations

import math

import numpy as np

from mlflow_mia.analyze.paired import seed_summary
from mlflow_mia.metrics.epsilon import epsilon_lower_bound_from_counts

__all__: list[str] = []

LR, LOSS = "likelihood_ratio", "loss"
NAN = float("nan")
GROUP = "user/"  # prefix of the group-level reports: one trial per article, the unit whose membership was randomised
AUDIT_CONFIDENCE = 0.95  # confidence of the suite's epsilon bounds (MetricConfig's default, which the suite keeps)


def dp_check_status(bound: float, ceiling: float, *, group_epsilon: float, group_delta: float) -> str:
    """One DP model's check: its article-level bound against the accountant's guarantee per article.

    Parameters
    ----------
    bound : float
        Article-level empirical epsilon lower bound (nats) at ``group_delta``, the
        largest over attacks; NaN when not logged.
    ceiling : float
        The largest bound the audit's article counts could certify at ``group_delta``
        (:func:`~mlflow_mia.metrics.epsilon.max_certifiable_epsilon`).
    group_epsilon, group_delta : float
        The accountant's (eps, delta) converted to articles
        (:func:`~mlflow_mia.metrics.group_privacy.group_privacy`); NaN epsilon: no accountant.

    Returns
    -------
    str
        ``"inconsistent"`` (the bound exceeds ``group_epsilon``: the accounting or the
        training is wrong), ``"vacuous"`` (``group_delta >= 1``, or ``ceiling <
        group_epsilon``: no audit of this size can contradict the accountant), ``"holds"``,
        or ``"not checked"`` (no accountant's epsilon, group size or article-level bound).

    Examples
    --------
    >>> dp_check_status(0.4, 3.1, group_epsilon=2.0, group_delta=1e-4)
    'holds'
    >>> dp_check_status(2.5, 3.1, group_epsilon=2.0, group_delta=1e-4)
    'inconsistent'
    >>> dp_check_status(0.0, 3.1, group_epsilon=10.0, group_delta=0.81)  # eps 1, 10 sentences per article
    'vacuous'
    >>> dp_check_status(math.nan, math.nan, group_epsilon=251.0, group_delta=math.inf)
    'vacuous'
    """
    if math.isnan(group_epsilon) or math.isnan(group_delta):
        return "not checked"
    if group_delta >= 1.0:
        return "vacuous"
    if math.isnan(bound):
        return "not checked"
    if bound > group_epsilon:
        return "inconsistent"
    return "vacuous" if not ceiling >= group_epsilon else "holds"


def group_bound(metrics: dict, attack: str, *, delta: float, confidence: float = AUDIT_CONFIDENCE):
    """An attack's article-level epsilon lower bound and its ceiling, recomputed at ``delta`` from a run's metrics.

    The audit logs the group-level bound at its own delta (1e-5); a guarantee per article
    has the larger delta of group privacy, at which the bound and its ceiling are lower.
    The counts are read back from the logged rates at the population thresholds.

    Parameters
    ----------
    metrics : dict of str to float
        ``run.data.metrics`` of one audit: ``user/n_members``, ``user/n_non_members``,
        ``user/<attack>/recall_at_pop_fpr_<alpha>`` and
        ``user/<attack>/achieved_fpr_at_pop_fpr_<alpha>`` for each alpha the bound used.
    attack : str
    delta : float in [0, 1)
    confidence : float
        Family-wise confidence of the bound (the audit's).

    Returns
    -------
    (float, float)
        The bound and the ceiling (nats), as
        :func:`~mlflow_mia.metrics.epsilon.epsilon_lower_bound_from_counts` gives them;
        NaN, NaN when a count or rate is missing or ``delta`` is not below 1.
    """
    base = f"{GROUP}{attack}/"
    n1, n0 = metrics.get(f"{GROUP}n_members", NAN), metrics.get(f"{GROUP}n_non_members", NAN)
    alphas = sorted(k[len(base) + len("recall_at_pop_fpr_"):] for k in metrics
                    if k.startswith(base + "recall_at_pop_fpr_") and not k.endswith(("_ci_low", "_ci_high")))
    rates = [(metrics[f"{base}recall_at_pop_fpr_{a}"], metrics.get(f"{base}achieved_fpr_at_pop_fpr_{a}", NAN))
             for a in alphas]
    values = [n1, n0, delta, *(x for pair in rates for x in pair)]
    if not alphas or any(math.isnan(float(x)) for x in values) or not 0 <= delta < 1 or min(n1, n0) < 1:
        return NAN, NAN
    n1, n0 = int(round(n1)), int(round(n0))
    tp = [int(round(recall * n1)) for recall, _ in rates]
    fp = [int(round(fpr * n0)) for _, fpr in rates]
    b = epsilon_lower_bound_from_counts(tp, fp, n_members=n1, n_non_members=n0, delta=delta, confidence=confidence)
    return b.epsilon, b.max_certifiable


def _max(*arrays) -> float:
    """The largest non-NaN value of the arrays (NaN when none)."""
    flat = np.concatenate([np.ravel(np.asarray(a, dtype=float)) for a in arrays])
    flat = flat[~np.isnan(flat)]
    return float(flat.max()) if flat.size else NAN


def _delta_text(delta: float) -> str:
    return ">= 1" if not delta < 1 else f"{delta:.2g}"


def _dp_label_check(v, lab) -> tuple[str, str]:
    """(status, text) of one DP setting over its seeds: each seed's run checked on its own, then combined."""
    loss, lr = v[(lab, LOSS)], v[(lab, LR)]
    bounds = np.fmax(loss["group_bound_at_group_delta"], lr["group_bound_at_group_delta"])
    ceilings = np.fmax(loss["group_ceiling_at_group_delta"], lr["group_ceiling_at_group_delta"])
    statuses = [dp_check_status(b, c, group_epsilon=e, group_delta=d)
                for b, c, e, d in zip(bounds, ceilings, lr["dp_group_epsilon"], lr["dp_group_delta"])
                if not (math.isnan(b) and math.isnan(e))]
    if "inconsistent" in statuses:
        status = "inconsistent"
    elif statuses and all(x == "holds" for x in statuses):
        status = "holds"
    elif statuses and all(x in ("holds", "vacuous") for x in statuses):
        status = "vacuous"
    else:
        status = "not checked"
    eps, k = seed_summary(lr["dp_epsilon"])[0], _max(lr["dp_max_group_size"])
    g_eps, g_delta = seed_summary(lr["dp_group_epsilon"])[0], _max(lr["dp_group_delta"])
    logged = _max(loss["group_epsilon_lower_bound"], lr["group_epsilon_lower_bound"])
    logged_ceiling = _max(loss["group_epsilon_lower_bound_max_certifiable"],
                          lr["group_epsilon_lower_bound_max_certifiable"])
    sample = _max(loss["epsilon_lower_bound"], lr["epsilon_lower_bound"])
    per_article = (f"accountant's {eps:.2f} per sentence is ({g_eps:.2f}, delta {_delta_text(g_delta)}) per article "
                   f"of up to {k:.0f} sentences")
    if status == "not checked":
        text = f"{lab}: no article-level bound, group size or accountant's epsilon logged: no DP check"
    elif not g_delta < 1:
        text = (f"{lab}: VACUOUS (not resolved): {per_article}, which guarantees nothing per article, so no audit "
                f"can contradict it (article-level bound {logged:.2f}, ceiling {logged_ceiling:.2f} at delta "
                f"{seed_summary(lr['dp_delta'])[0]:g})")
    else:
        bound, ceiling = _max(bounds), _max(ceilings)
        head = f"{lab}: article-level bound {bound:.2f} (ceiling {ceiling:.2f}) vs {per_article}"
        text = {"inconsistent": f"{head}: the bound exceeds {g_eps:.2f}",
                "vacuous": f"{head}: VACUOUS (not resolved): this audit certifies at most {ceiling:.2f} per article",
                "holds": f"{head}: holds"}[status]
    return status, text + (f"; sentence-trial bound {sample:.2f} (descriptive: sentences of one article are not "
                           "independent trials, not a DP check)" if not math.isnan(sample) else "")


def dp_verdict(v) -> tuple[str, str]:
    """The DP finding's check: every DP model's article-level bound against its accountant's epsilon per article."""
    labels = sorted({label for label, _ in v if label.startswith("eps ")})
    checked = [_dp_label_check(v, lab) for lab in labels]
    statuses, text = [s for s, _ in checked], "; ".join(t for _, t in checked)
    if "inconsistent" in statuses:
        return "not reproduced", ("INCONSISTENT: an article-level epsilon lower bound exceeds the accountant's "
                                  "epsilon converted to articles; " + text)
    return ("reproduced" if statuses and all(s == "holds" for s in statuses) else "not resolved"), text
