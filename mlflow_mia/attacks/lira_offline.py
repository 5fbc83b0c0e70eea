"""Offline LiRA: a per-sample Gaussian of the reference models' values, one-sided test of the target's.

Carlini, Chien, Nasr, Song, Terzis, Tramer (2022), "Membership Inference Attacks From
First Principles", IEEE S&P, Sec. IV (Algorithm 1, the offline variant): only models
trained *without* the sample (OUT models) are available. For each sample x, the
OUT models' statistics are modelled as a Gaussian N(mu_out(x), sigma_out(x)^2); the
target's statistic s(x) is tested one-sidedly against it: a member's statistic is
*higher* than the OUT models' (the model fits it better), so
``p(x) = Pr[Z >= s(x)], Z ~ N(mu_out(x), sigma_out(x)^2)`` is small for members.

The paper's statistic is the logit-scaled confidence of a classifier; for a masked
LM the natural log-likelihood-like statistic is minus the audit's signal (minus the
masked energy in nats, or minus the PLL's per-token NLL): a sum or mean of token
log-probabilities, approximately Gaussian across retrainings as the paper's
logit-scaled confidence is.

Settings: with fewer reference models than ``per_sample_spread_min`` (default 64:
the paper estimates a global variance instead of one per example when shadow models
are few, as fewer than 64 of them give noisy per-example variances), sigma is one
global spread for all samples. The score does not depend on the global scale for the
ranking; it matters for reading the score as a z-value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlflow_mia.attacks.base import Attack, register_attack
from mlflow_mia.attacks.lira_online import MIN_SPREAD, pooled_spread, split_in_out
from mlflow_mia.attacks.queries import per_text_mean, query_arrays
from mlflow_mia.option import same_option

__all__: list[str] = []


@dataclass(frozen=True)
class LiraOfflineSettings:
    """Settings of :class:`LiraOfflineAttack`.

    Attributes
    ----------
    per_sample_spread_min : int
        Reference models needed for a per-sample spread sigma(x) (the standard
        deviation of the references' values of that sample, ddof=1); below it one
        global spread (:func:`global_spread`). Default 64, after Carlini et al. (2022),
        whose attack uses a global variance when shadow models are few.

    per_mask_queries : bool
        Keep each mask's energy as a separate query (:mod:`mlflow_mia.attacks.queries`):
        one Gaussian per (text, mask), the z-values averaged per text, as LiRA averages
        over augmentations. Default off until measured (issue 35, item 4). Energy only.
    mask_rate, energy_reduction : float, str
        The audit's ``SignalConfig.mask_rate`` and ``energy_reduction`` (carried from the
        config in an audit: ``same_option``), to split the token log-probs into masks.

    Raises
    ------
    ValueError
        ``per_sample_spread_min`` below 2 (one value has no spread).
    """

    per_sample_spread_min: int = 64
    per_mask_queries: bool = False
    mask_rate: float = same_option("mask_rate", 0.15)
    energy_reduction: str = same_option("energy_reduction", "sum")

    def __post_init__(self):
        if int(self.per_sample_spread_min) != self.per_sample_spread_min or self.per_sample_spread_min < 2:
            raise ValueError(f"per_sample_spread_min must be an int >= 2 (one reference has no spread), got "
                             f"{self.per_sample_spread_min!r}")


def global_spread(reference_values: np.ndarray) -> float:
    """One spread for every sample, from the reference models' values of a sample set.

    Parameters
    ----------
    reference_values : ndarray of shape (k, n)
        Values of k reference models on n samples (nats or nats/token).

    Returns
    -------
    float
        With k >= 2: the pooled within-sample standard deviation,
        ``sqrt(mean_x var_ddof1(values[:, x]))`` (the spread of one reference's value
        around the references' mean of that sample, averaged over samples). With
        k = 1 (no spread across models): the standard deviation of the reference's
        values across the n samples (ddof=1).

    Raises
    ------
    ValueError
        Fewer than 2 values to take a spread of, or a spread of 0 or NaN.

    Examples
    --------
    >>> round(global_spread(np.array([[1.0, 2.0], [3.0, 2.0]])), 6)
    1.0
    >>> round(global_spread(np.array([[1.0, 3.0]])), 6)
    1.414214
    """
    values = np.asarray(reference_values, dtype=np.float64)
    k, n = values.shape
    if k >= 2:
        spread = float(np.sqrt(np.mean(np.var(values, axis=0, ddof=1))))
    elif n >= 2:
        spread = float(np.std(values[0], ddof=1))
    else:
        raise ValueError("one reference model on one sample: no spread to standardise the gap with")
    if not np.isfinite(spread) or spread <= 0:
        raise ValueError(f"the reference models' global spread is {spread!r}; their values do not vary, so the "
                         "offline LiRA gap cannot be standardised")
    return spread


def lira_offline_scores(target_values, reference_values, *, spread=None, membership=None) -> np.ndarray:
    """Offline LiRA scores: the target's standardised gap below the references' mean, higher = member.

    Parameters
    ----------
    target_values : ndarray of shape (n,)
        The target's signal (energy in nats or PLL in nats/token; lower = fits better).
    reference_values : ndarray of shape (k, n)
        The k reference models' signal on the same n samples.
    spread : float or None
        The global spread; None uses the per-sample standard deviation of the
        references (ddof=1; needs k >= 2).
    membership : ndarray of shape (n, k), bool, optional
        Shadow references with known training halves (the ``shadow_membership`` input):
        each sample's mean and spread are taken over the references that did *not* train
        on it (its OUT models) only.

    Returns
    -------
    ndarray of shape (n,), float64
        ``z(x) = (mean_i v_i(x) - v_t(x)) / sigma(x)``: with the statistic
        ``s = -v``, ``z = (s_t - mu_out) / sigma_out``, and the one-sided p-value of
        the paper's offline test is ``1 - Phi(z)``; z is its monotone decreasing map
        (no saturation of Phi at extreme values).

    Raises
    ------
    ValueError
        Shapes that do not pair up, no spread with one reference, or (with
        ``membership``) a sample without an OUT model (or one, for a per-sample spread).
    """
    target = np.asarray(target_values, dtype=np.float64)
    refs = np.atleast_2d(np.asarray(reference_values, dtype=np.float64))
    if refs.shape[1] != target.shape[0]:
        raise ValueError(f"reference values of shape {refs.shape} do not pair up with {target.shape[0]} targets")
    if membership is not None:
        refs = out_values(refs, membership)
    counts = np.sum(~np.isnan(refs), axis=0)
    mean = np.nanmean(refs, axis=0)
    if spread is None:
        if counts.min() < 2:
            raise ValueError("a per-sample spread needs at least 2 reference models (OUT models of each sample); "
                             "pass a global spread")
        sigma = np.maximum(np.nanstd(refs, axis=0, ddof=1), MIN_SPREAD)
    else:
        sigma = float(spread)
    return (mean - target) / sigma  # energies: lower = member, so the gap below the OUT mean is positive


def out_values(reference_values, membership) -> np.ndarray:
    """The references' values with NaN where a reference trained on the sample: only the OUT models are left.

    Parameters
    ----------
    reference_values : ndarray of shape (k, n)
    membership : ndarray of shape (n, k), bool
        True where reference j trained on sample i (:mod:`mlflow_mia.attacks.lira_online`).

    Raises
    ------
    ValueError
        Shapes that do not pair up, or a sample that every reference trained on.
    """
    _, outs = split_in_out(reference_values, membership)
    lacking = int(np.sum(np.all(np.isnan(outs), axis=0)))
    if lacking:
        raise ValueError(f"{lacking} samples have no OUT reference model (every shadow trained on them); offline "
                         "attacks need models that did not train on each sample")
    return outs


@register_attack
class LiraOfflineAttack(Attack):
    """Offline LiRA over the audit's reference set (Carlini et al. 2022, Algorithm 1, offline).

    Score ``(mean_i E(x; theta_i) - E(x; theta)) / sigma(x)`` over the k reference
    models theta_i (energy, PLL or causal mean NLL: the audit's signal), higher = member. sigma(x) is
    per sample with ``k >= per_sample_spread_min`` references, else one global spread
    (:func:`global_spread`) estimated on the population set when the audit passes it
    (``AttackInputs.population``), so pool and population scores share it; on the
    rows scored otherwise. When the references are shadow models with known training
    halves (the ``shadow_membership`` input is given), each sample's Gaussian is fitted
    on its OUT models only (those that did not train on it), as the paper's offline
    attack assumes, and the global spread is their pooled within-sample spread
    (:func:`~mlflow_mia.attacks.lira_online.pooled_spread`).

    With one reference the score is the likelihood ratio divided by a constant
    (same ROC as ``likelihood_ratio``). For causal models the values are mean NLLs
    per predicted token (``kind="causal"``), MIMIR's loss, the statistic ``-loss``.

    Examples
    --------
    >>> from mlflow_mia.attacks.inputs import AttackInputs
    >>> from mlflow_mia.signals.types import SignalResult
    >>> def sig(v): return SignalResult.from_arrays(v, n_tokens=[5, 5, 5])
    >>> refs = [sig([4.0, 3.0, 5.0]), sig([6.0, 3.0, 5.0])]
    >>> LiraOfflineAttack()(AttackInputs("abc", target=sig([3.0, 3.0, 6.0]), references=refs)).round(3).tolist()
    [2.449, 0.0, -1.225]
    """

    name = "lira_offline"
    citation = "Carlini et al. 2022, Sec. IV, Algorithm 1 (offline)"
    requires = ("target", "references")
    Settings = LiraOfflineSettings

    gate_min_references = 2
    gate_order = 60

    def _spread(self, inputs):
        refs = inputs.references
        if refs.k >= self.settings.per_sample_spread_min:
            return None
        basis = inputs.population if inputs.population is not None else inputs
        _, values, member, _ = query_arrays(basis, self.settings, target=False)
        if member is not None:
            return pooled_spread(out_values(values, member), which="OUT")
        return global_spread(values)

    def score(self, inputs):
        target, values, member, rows = query_arrays(inputs, self.settings)
        scores = lira_offline_scores(target, values, spread=self._spread(inputs), membership=member)
        return scores if rows is None else per_text_mean(scores, rows, len(inputs))

    def record(self, inputs):
        spread = self._spread(inputs)
        return {"n_references": inputs.references.k,
                "spread": "per_sample" if spread is None else "global", "global_spread": spread,
                "per_sample_spread_min": self.settings.per_sample_spread_min,
                **({} if inputs.shadow_membership is None else {"references_used": "OUT halves (shadow_membership)"}),
                **({"per_mask_queries": True} if self.settings.per_mask_queries else {})}

