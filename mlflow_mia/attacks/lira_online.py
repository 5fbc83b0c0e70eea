"""Online LiRA: per-text IN and OUT Gaussians over shadow models whose training halves are known.

Carlini, Chien, Nasr, Song, Terzis, Tramer (2022), "Membership Inference Attacks From
First Principles", IEEE S&P, Sec. IV (Algorithm 1, online): shadow models are trained on
random halves of a candidate set that holds the audited texts, so for each text x some
shadows trained on it (IN) and others did not (OUT). Their statistics of x are modelled
as two Gaussians, ``N(mu_in(x), sigma_in(x)^2)`` and ``N(mu_out(x), sigma_out(x)^2)``, and the
score of the target's statistic ``s(x)`` is the log likelihood ratio

    ``Lambda(x) = log N(s(x); mu_in, sigma_in) - log N(s(x); mu_out, sigma_out)``,

higher = member. The statistic, as for :mod:`mlflow_mia.attacks.lira_offline`, is minus
the audit's signal (minus the masked energy in nats, or minus the PLL in nats/token): a
log-likelihood-like number, approximately Gaussian across retrainings as the paper's
logit-scaled confidence is.

Which shadow saw which text is the input ``shadow_membership`` (a bool matrix of shape
(n_rows, k), column j the j-th model of the audit's reference set, from the shadows'
training records: :func:`mlflow_mia.demo.shadows.shadow_membership`).

Variance: with fewer shadow models than ``per_text_variance_min`` (default 64, the
paper's number), ``sigma_in`` and ``sigma_out`` are one global spread each, the pooled
within-text standard deviation of the IN (OUT) statistics (:func:`pooled_spread`),
estimated on the population set when the audit passes it (so pool and population scores
share them), else on the rows scored. From 64 shadows on they are per text (ddof=1).

Notes
-----
The paper's reference code takes medians for ``mu`` and a global variance from every IN
value around the global mean; here ``mu`` is the mean (the Gaussian's maximum-likelihood
estimate, as in the paper's text) and the global variance is the pooled within-text one,
which does not count the spread of ``mu`` between texts as noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from mlflow_mia.attacks.base import Attack, register_attack
from mlflow_mia.attacks.queries import per_text_mean, query_arrays
from mlflow_mia.option import option, same_option

__all__: list[str] = []

#: Smallest spread used, so texts whose shadows agree exactly get finite scores.
MIN_SPREAD = 1e-12


@dataclass(frozen=True)
class LiraOnlineSettings:
    """Settings of :class:`LiraOnlineAttack`.

    Attributes
    ----------
    per_text_variance_min : int
        Shadow models needed for per-text spreads ``sigma_in(x)``, ``sigma_out(x)``
        (ddof=1 over the text's IN and OUT shadows); below it one global spread each
        (:func:`pooled_spread`). Default 64, after Carlini et al. (2022), Sec. IV-C.
        The option ``lira_online_per_text_variance_min`` (an audit carries it in
        ``AuditConfig.attack_settings["lira_online"]``).

    per_mask_queries : bool
        Keep each mask's energy as a separate query (:mod:`mlflow_mia.attacks.queries`):
        IN and OUT Gaussians per (text, mask), the log likelihood ratios averaged per
        text, as the paper averages over augmentations. Default off: on the default demo
        with 4 to 32 shadows it resolved no gain over averaging the masks first
        (docs/results/shadows.md, "Per-mask queries"). Energy only. The option ``lira_online_per_mask_queries``
        (held in ``AuditConfig.attack_settings["lira_online"]``).
    mask_rate, energy_reduction : float, str
        The audit's ``SignalConfig.mask_rate`` and ``energy_reduction`` (carried from the
        config in an audit: ``same_option``), to split the token log-probs into masks.

    Raises
    ------
    ValueError
        ``per_text_variance_min`` not an int >= 4 (two IN and two OUT values per text).
    """

    per_text_variance_min: int = option(64, "shadow models from which the lira_online attack fits a spread per text "
                                        "(its IN and OUT shadows, ddof=1); below it one pooled spread each for IN "
                                        "and OUT (Carlini et al. 2022, Sec. IV-C)",
                                        key="lira_online_per_text_variance_min", ge=4, metavar="N")
    per_mask_queries: bool = option(False, "lira_online keeps each mask's energy as a separate query (IN and OUT "
                                    "Gaussians per text and mask, the log likelihood ratios averaged per text, as "
                                    "the paper averages augmentations); energy signal only",
                                    key="lira_online_per_mask_queries")
    mask_rate: float = same_option("mask_rate", 0.15)
    energy_reduction: str = same_option("energy_reduction", "sum")

    def __post_init__(self):
        value = self.per_text_variance_min
        if isinstance(value, bool) or int(value) != value or value < 4:
            raise ValueError(f"per_text_variance_min must be an int >= 4 (a per-text spread needs two IN and two "
                             f"OUT shadows of each text), got {value!r}")


def split_in_out(shadow_values, membership):
    """The shadows' values of each text as two NaN-padded arrays: IN and OUT.

    Parameters
    ----------
    shadow_values : ndarray of shape (k, n)
        The statistic of each of k shadow models on n texts.
    membership : ndarray of shape (n, k), bool
        True where shadow j trained on text i.

    Returns
    -------
    (ndarray, ndarray), each of shape (k, n), float64
        The values where the shadow is IN (resp. OUT) of the text, NaN elsewhere.

    Raises
    ------
    ValueError
        Shapes that do not pair up.
    """
    values = np.atleast_2d(np.asarray(shadow_values, dtype=np.float64))
    member = np.asarray(membership, dtype=bool)
    if member.shape != values.T.shape:
        raise ValueError(f"shadow membership of shape {member.shape} does not pair up with shadow values of shape "
                         f"{values.shape}: expected (n_texts, k) = {values.T.shape}")
    return np.where(member.T, values, np.nan), np.where(member.T, np.nan, values)


def pooled_spread(values, *, which: str = "IN") -> float:
    """The pooled within-text standard deviation of NaN-padded values (the global sigma of LiRA).

    Parameters
    ----------
    values : ndarray of shape (k, n)
        Values of text i in column i, NaN where absent (:func:`split_in_out`).
    which : str
        Named in the error message ("IN" or "OUT").

    Returns
    -------
    float
        ``sqrt(sum_i sum_j (v_ji - mean_i)^2 / sum_i (n_i - 1))`` over texts with
        ``n_i >= 1`` values: with as many values per text, the root of the mean per-text
        variance (ddof=1), as :func:`mlflow_mia.attacks.lira_offline.global_spread`.

    Raises
    ------
    ValueError
        No text with two values (too few shadow models), or a spread of 0.

    Examples
    --------
    >>> round(pooled_spread(np.array([[1.0, 2.0, np.nan], [3.0, np.nan, 5.0], [np.nan, 4.0, 7.0]])), 6)
    1.414214
    """
    values = np.asarray(values, dtype=np.float64)
    counts = np.sum(~np.isnan(values), axis=0)
    used = counts >= 1
    dof = int(np.sum(counts[used] - 1))
    if dof < 1:
        raise ValueError(f"no text has two {which} shadow models, so the {which} spread cannot be estimated; train "
                         "at least 4 shadow models (each text is IN for half of them)")
    deviations = values[:, used] - np.nanmean(values[:, used], axis=0)
    spread = float(np.sqrt(np.nansum(deviations ** 2) / dof))
    if not np.isfinite(spread) or spread <= 0:
        raise ValueError(f"the {which} shadow models' spread is {spread!r}: their values do not vary")
    return spread


def lira_online_scores(target_values, shadow_values, membership, *, spread_in=None,
                       spread_out=None) -> np.ndarray:
    """Online LiRA scores: the log likelihood ratio of the target's statistic under IN vs OUT Gaussians.

    Parameters
    ----------
    target_values : ndarray of shape (n,)
        The target's signal (energy in nats or PLL in nats/token; lower = fits better).
    shadow_values : ndarray of shape (k, n)
        The k shadow models' signal on the same texts.
    membership : ndarray of shape (n, k), bool
        True where shadow j trained on text i.
    spread_in, spread_out : float or None
        Global spreads of the statistic; None: per text (ddof=1 over that text's IN or
        OUT shadows, which needs two of each).

    Returns
    -------
    ndarray of shape (n,), float64
        ``norm.logpdf(s, mu_in, sigma_in) - norm.logpdf(s, mu_out, sigma_out)`` with
        ``s = -target_values`` and the IN and OUT means of ``-shadow_values``
        (higher = member).

    Raises
    ------
    ValueError
        Shapes that do not pair up; a text without an IN or an OUT shadow (the message
        gives the fix: put every audited text, pool and population, in the shadows'
        candidate set); per-text spreads with fewer than two IN or OUT shadows of a text.

    References
    ----------
    .. [1] Carlini et al. 2022, "Membership Inference Attacks From First Principles", Sec. IV, Algorithm 1.

    Examples
    --------
    >>> member = np.array([[True, False], [False, True]])
    >>> lira_online_scores([1.0, 2.0], [[1.0, 3.0], [2.0, 2.0]], member, spread_in=1.0, spread_out=1.0).tolist()
    [0.5, 0.5]
    """
    target = -np.asarray(target_values, dtype=np.float64)  # energies: lower = member, so the statistic is -energy
    values = -np.atleast_2d(np.asarray(shadow_values, dtype=np.float64))
    if values.shape[1] != target.shape[0]:
        raise ValueError(f"shadow values of shape {values.shape} do not pair up with {target.shape[0]} targets")
    ins, outs = split_in_out(values, membership)
    n_in, n_out = np.sum(~np.isnan(ins), axis=0), np.sum(~np.isnan(outs), axis=0)
    for count, which in ((n_in, "IN"), (n_out, "OUT")):
        lacking = int(np.sum(count == 0))
        if lacking:
            raise ValueError(f"{lacking} of {len(count)} texts have no {which} shadow model; online LiRA needs "
                             "shadows that trained on each text and shadows that did not: put every audited text "
                             "(pool and population) in the candidate set the shadows were trained on")
    mu_in, mu_out = np.nanmean(ins, axis=0), np.nanmean(outs, axis=0)
    if spread_in is None or spread_out is None:
        if np.min(n_in) < 2 or np.min(n_out) < 2:
            raise ValueError("per-text spreads need two IN and two OUT shadow models of every text; pass global "
                             "spreads (spread_in, spread_out) or train more shadows")
    sigma_in = np.maximum(np.nanstd(ins, axis=0, ddof=1), MIN_SPREAD) if spread_in is None else float(spread_in)
    sigma_out = np.maximum(np.nanstd(outs, axis=0, ddof=1), MIN_SPREAD) if spread_out is None else float(spread_out)
    return norm.logpdf(target, mu_in, sigma_in) - norm.logpdf(target, mu_out, sigma_out)


@register_attack
class LiraOnlineAttack(Attack):
    """Online LiRA over shadow models with known training halves (Carlini et al. 2022, Algorithm 1, online).

    The shadow models are the audit's reference set (``references``); which of them
    trained on which text is the ``shadow_membership`` input (column j = reference j).
    Score: ``log N(s; mu_in, sigma_in) - log N(s; mu_out, sigma_out)`` with ``s`` minus
    the target's signal, higher = member; global spreads below ``per_text_variance_min``
    shadows (:func:`pooled_spread`, on the population set when the audit passes it).

    Examples
    --------
    >>> from mlflow_mia.attacks.inputs import AttackInputs
    >>> from mlflow_mia.signals.types import SignalResult
    >>> def sig(v): return SignalResult.from_arrays(v, n_tokens=[5, 5])
    >>> refs = [sig([3.0, 5.0]), sig([3.4, 4.0]), sig([4.0, 5.4]), sig([4.2, 4.4])]
    >>> member = [[True, True, False, False], [False, True, False, True]]  # text 1: shadows 2 and 4 IN
    >>> inputs = AttackInputs("ab", target=sig([3.3, 5.0]), references=refs, shadow_membership=member)
    >>> LiraOnlineAttack()(inputs).round(3).tolist()  # text 1's energy is the OUT shadows' mean
    [6.102, -3.835]
    """

    name = "lira_online"
    citation = "Carlini et al. 2022, Sec. IV, Algorithm 1 (online)"
    requires = ("target", "references", "shadow_membership")
    Settings = LiraOnlineSettings
    gate_min_references = 4
    gate_order = 80

    def _spreads(self, inputs):
        if inputs.references.k >= self.settings.per_text_variance_min:
            return None, None
        basis = inputs.population if inputs.population is not None else inputs
        if basis.shadow_membership is None:
            raise ValueError("lira_online needs the shadow membership of the population rows too (the global "
                             "spreads are estimated there)")
        _, values, member, _ = query_arrays(basis, self.settings, target=False)
        ins, outs = split_in_out(values, member)
        return pooled_spread(ins, which="IN"), pooled_spread(outs, which="OUT")

    def _check(self, inputs):
        k, cols = inputs.references.k, inputs.shadow_membership.shape[1]
        if cols != k:
            raise ValueError(f"the shadow membership has {cols} columns but the audit has {k} reference models: "
                             "give the shadow models as the references, in the order of their training record")

    def score(self, inputs):
        self._check(inputs)
        spread_in, spread_out = self._spreads(inputs)
        target, values, member, rows = query_arrays(inputs, self.settings)
        scores = lira_online_scores(target, values, member, spread_in=spread_in, spread_out=spread_out)
        return scores if rows is None else per_text_mean(scores, rows, len(inputs))

    def record(self, inputs):
        spread_in, spread_out = self._spreads(inputs)
        member = inputs.shadow_membership
        return {"n_shadows": inputs.references.k, "spread": "per_text" if spread_in is None else "global",
                "global_spread_in": spread_in, "global_spread_out": spread_out,
                "per_text_variance_min": self.settings.per_text_variance_min,
                "min_in_per_text": int(member.sum(axis=1).min()),
                "min_out_per_text": int((~member).sum(axis=1).min()),
                **({"per_mask_queries": True} if self.settings.per_mask_queries else {})}
