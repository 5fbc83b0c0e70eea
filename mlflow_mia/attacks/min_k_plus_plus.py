"""Min-K%++ attack: token log-probs normalised by the model's own distribution at each position.

Zhang et al. (2024), "Min-K%++: Improved Baseline for Detecting Pre-Training Data
from Large Language Models" (arXiv:2404.02936), Sec. 3: for a scored token ``x_t``
with the model's distribution ``p(. | context)`` over the vocabulary,

    score_t = (log p(x_t) - mu_t) / sigma_t,
    mu_t = E_{z~p}[log p(z)],   sigma_t^2 = Var_{z~p}[log p(z)],

and the sample's score is the mean of the lowest k% of its token scores. Training
by maximum likelihood pushes a training token towards a mode of its conditional
distribution, where ``log p(x_t)`` stands high relative to the distribution's
own spread; a reference-free score (no second model).

For a masked LM the context is the text with the mask's positions masked and the
distribution is the MLM head's at each masked position: the statistics come with
the energy's token log-probs, from the same logits in the same forward pass
(:mod:`mlflow_mia.signals.token_stats`).
"""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mlflow_mia.attacks.base import Attack, register_attack
from mlflow_mia.attacks.min_k import MinKSettings, min_k_mean
from mlflow_mia.option import option

__all__: list[str] = []

#: Smallest sigma (nats) divided by: a distribution with all its mass on one token has sigma 0.
SIGMA_FLOOR = 1e-6


def token_scores(logprobs, mu, sigma) -> np.ndarray:
    """Min-K%++'s per-token scores ``(log p - mu) / sigma`` (Zhang et al. 2024, Sec. 3).

    Parameters
    ----------
    logprobs, mu, sigma : array-like of shape (n_tokens,)
        ``log p(x_t)``, ``E_p[log p]`` and ``sd_p[log p]`` at each scored position (nats).

    Returns
    -------
    ndarray of shape (n_tokens,), float64
        Unitless; sigma is floored at :data:`SIGMA_FLOOR` (a one-hot distribution has
        sigma 0 and ``log p - mu`` 0 at its mode).

    Examples
    --------
    >>> token_scores([-1.0, -3.0], [-2.0, -2.0], [0.5, 2.0]).tolist()
    [2.0, -0.5]
    """
    logprobs, mu, sigma = (np.asarray(x, dtype=np.float64) for x in (logprobs, mu, sigma))
    return (logprobs - mu) / np.maximum(sigma, SIGMA_FLOOR)


@dataclass(frozen=True)
class MinKPlusPlusSettings(MinKSettings):
    """Settings of :class:`MinKPlusPlusAttack`.

    Attributes
    ----------
    fraction : float
        k, the fraction of lowest token scores averaged, in (0, 1] (default 0.2, as
        for min-k%; Zhang et al. report Min-K%++ robust to k). The option
        ``min_k_plus_plus_fraction`` (an audit carries its value in
        ``AuditConfig.attack_settings["min_k_plus_plus"]``). ``ceil(k n)`` scores, at least one.

    Raises
    ------
    ValueError
        ``fraction`` outside (0, 1].
    """

    fraction: float = option(0.2, "k of the min_k_plus_plus attack: the fraction of lowest normalised token "
                             "scores averaged", key="min_k_plus_plus_fraction", gt=0, le=1)
    attack: ClassVar[str] = "min_k_plus_plus"


@register_attack
class MinKPlusPlusAttack(Attack):
    """Score = mean of the lowest ``fraction`` of ``(log p - mu) / sigma`` over the scored tokens (higher = member).

    The scored tokens are those of the target's signals: with the energy, every
    masked position of every one of the K random masks; with the PLL, every token,
    masked one at a time.

    Notes
    -----
    A token masked under several of the energy's masks contributes one score per
    mask, not one averaged score: each mask gives it another context (other
    positions masked with it), so another conditional distribution and another
    test of whether ``x_t`` sits at its mode; averaging per position would also need
    positions the signals do not keep. This is how ``min_k`` pools the same
    log-probs, so the two attacks read the same tokens. With the PLL each token is
    scored once, under the text with only itself masked: the paper's per-token
    sequence, with context on both sides instead of the prefix.

    The paper scores next-token distributions of causal LMs; for a masked target the
    distributions are the MLM head's at masked positions, the quantity the MLM
    objective trains. For a causal target (``kind="causal"``) they are the paper's own:
    ``p(. | x_<t)`` at each of tokens 2..n, from the same forward pass as the log-probs
    (:mod:`mlflow_mia.signals.causal`), with ``mu_t`` and ``sigma_t`` as MIMIR's
    ``MinKPlusPlusAttack`` computes them (``sum p log p`` and the square root of
    ``sum p (log p)^2 - mu^2``). k is rounded up (at least one token), where the
    authors' code and MIMIR round down; sigma is floored at :data:`SIGMA_FLOOR`.

    Raises
    ------
    ValueError
        From :meth:`score`, when the target's signals lack ``token_mu`` /
        ``token_sigma`` (made by hand without them).

    References
    ----------
    Zhang et al. (2024), Min-K%++, Sec. 3.

    Examples
    --------
    >>> from mlflow_mia.attacks.base import AttackInputs
    >>> from mlflow_mia.signals.types import SignalResult
    >>> sig = SignalResult.from_arrays([0.0, 0.0], n_tokens=[2, 2], token_logprobs=[[-1.0, -3.0], [-2.0, -2.0]],
    ...                                token_mu=[[-2.0, -2.0], [-1.0, -3.0]], token_sigma=[[0.5, 2.0], [1.0, 1.0]])
    >>> MinKPlusPlusAttack(fraction=0.5)(AttackInputs(("a", "b"), target=sig)).tolist()
    [-0.5, -1.0]
    """

    name = "min_k_plus_plus"
    citation = "Zhang et al. 2024"
    requires = ("target",)
    token_quantities = ("token_stats",)  # stage 1 computes mu and sigma only for this attack
    Settings = MinKPlusPlusSettings
    gate_min_references = 0
    gate_order = 40

    def score(self, inputs):
        target = inputs.target
        if not target.has_token_stats:
            raise ValueError("min_k_plus_plus needs the per-token statistics token_mu and token_sigma in the target's "
                             "signals; compute them with mlflow_mia.signals.compute_signals, or pass token_mu= and "
                             "token_sigma= to SignalResult.from_arrays")
        return np.array([min_k_mean(token_scores(lp, mu, sd), self.settings.fraction)
                         for lp, mu, sd in zip(target.token_logprobs, target.token_mu, target.token_sigma)])
