"""RMIA, offline: a pairwise likelihood ratio of the sample against population samples.

Zarifzadeh, Liu, Shokri (2024), "Low-Cost High-Power Membership Inference Attacks",
ICML, Sec. 3 (Eq. 3-4) and its offline variant:

- ``LR(x, z) = [Pr(x|theta) / Pr(x)] / [Pr(z|theta) / Pr(z)]`` for population samples z,
  with ``Pr(x)`` the average of ``Pr(x|theta')`` over reference models theta';
- ``score(x) = Pr_z[LR(x, z) >= gamma]``, the fraction of population samples that x
  dominates by a factor gamma (paper default gamma = 1);
- offline (every reference is an OUT model of x), ``Pr(x)`` is approximated from the
  OUT average by ``Pr(x) = ((1 + a) Pr_OUT(x) + (1 - a)) / 2``, a linear model of the
  missing IN models' ``Pr(x|theta_in) ~ a Pr_OUT(x) + (1 - a)``.

Per-sample likelihood of a masked LM: ``Pr(x|theta) = exp(mean log p(x_t | x_\\t))``,
the geometric-mean probability of the masked tokens (every masked token of every mask
for the energy, every token once for the PLL), in (0, 1]. The paper's ``Pr(x|theta)``
is a classifier's probability of the true label, also in [0, 1]; its experiments (as
we read them) are on image and tabular classifiers, with no language model, so the
choice here is ours. A per-token probability keeps the scale on which the offline mixture with the
constant ``(1 - a)`` means something: ``exp(-energy)`` of a whole text is so small
(``e^-30`` for a 30-nat energy) that ``Pr(x)`` would be ``(1 - a) / 2`` for every text
and the attack would reduce to the target's loss; and it makes texts of different
lengths comparable in the pairwise ratio.

The offline parameter ``a``: the paper picks it by attacking one reference model
(a stand-in target) with the others, on samples whose membership in that reference
model is known, and keeping the ``a`` of the highest AUC (:func:`choose_offline_a`
does that for a caller who knows them). An audit whose references are shadow models with
known training halves (the ``shadow_membership`` input, :mod:`mlflow_mia.attacks.lira_online`)
runs it: the first reference is the stand-in target, the population rows the samples.
Otherwise an audit does not know which texts its reference models were trained on, so it
cannot run that procedure itself; it takes
``a`` from the option ``rmia_offline_a`` and by default uses ``a = 1``
(``Pr(x) = Pr_OUT(x)``, no correction for the missing IN models). That default suits
per-token probabilities of an MLM, which are far below 1: with ``a < 1`` the constant
``(1 - a) / 2`` dominates ``Pr(x)`` and removes the reference calibration. The ``a``
used is recorded in the run (``audit_summary.json``, ``info.attack_settings.rmia``).
With one reference, ``a = 1`` and ``gamma = 1`` the score is a monotone map of the
per-token likelihood ratio against that reference.

Ties. Against a fixed population of ``|Z|`` samples the fraction moves in steps of
``1 / |Z|``, and every sample whose ratio is above the largest population ratio ties at
1.0: the strongest members become indistinguishable exactly where a TPR at a low FPR is
read. :func:`rmia_scores` therefore adds :func:`rmia_tie_break`, a strictly increasing
map of the raw log ratio into ``[0, 1 / (4 |Z|)]``, below half a step: samples with
different fractions keep their order, and samples with equal fractions are ordered by
their log ratio. As the fraction is itself non-decreasing in the log ratio, the score
is then a strictly increasing function of ``log [Pr(x|theta) / Pr(x)]`` for a given
population and gamma, and its ROC is that of the log ratio.

References
----------
.. [1] S. Zarifzadeh, P. Liu, R. Shokri, "Low-Cost High-Power Membership Inference Attacks", ICML 2024,
   Sec. 3 (Eq. 3-4), offline variant.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp
from sklearn.metrics import roc_auc_score

from mlflow_mia.attacks.base import Attack, register_attack
from mlflow_mia.attacks.lira_offline import out_values
from mlflow_mia.option import option

__all__: list[str] = []


def per_token_loglik(signal) -> np.ndarray:
    """``log Pr(x|theta)`` of each row: the mean log-probability (nats/token) of its masked tokens.

    Parameters
    ----------
    signal : SignalResult
        With ``token_logprobs`` (every masked token of every mask), or of kind ``"pll"``
        or ``"causal"`` (whose value is the mean NLL per token already; for a causal LM
        ``Pr(x|theta)`` is the geometric-mean next-token probability of tokens 2..n).

    Returns
    -------
    ndarray of shape (n,), float64, <= 0

    Raises
    ------
    ValueError
        An energy signal without token log-probs (signals built from values alone).
    """
    if signal.kind in ("pll", "causal"):  # per-token means already (a causal value is -mean of its log-probs)
        return -np.asarray(signal.values, dtype=np.float64)
    out = np.empty(len(signal), dtype=np.float64)
    for i, lp in enumerate(signal.token_logprobs):
        if len(lp) == 0:
            raise ValueError("rmia needs each text's masked-token log-probs (SignalResult.token_logprobs) to put the "
                             "energy on a per-token scale; these signals have none for a row")
        out[i] = float(np.mean(np.asarray(lp, dtype=np.float64)))
    return out


def log_likelihood_ratio(target_loglik, reference_logliks, *, a: float, membership=None) -> np.ndarray:
    """``log [Pr(x|theta) / Pr(x)]`` with the offline ``Pr(x) = ((1 + a) mean_i Pr(x|theta_i) + (1 - a)) / 2``.

    Parameters
    ----------
    target_loglik : ndarray of shape (n,)
        ``log Pr(x|theta)`` of the target.
    reference_logliks : ndarray of shape (k, n)
        ``log Pr(x|theta_i)`` of each reference model.
    a : float in [0, 1]
    membership : ndarray of shape (n, k), bool, optional
        Shadow references with known training halves: ``Pr_OUT(x)`` is the mean over the
        references that did not train on x only.

    Returns
    -------
    ndarray of shape (n,), float64
        Computed in log space (``logsumexp``), so tiny probabilities do not underflow.

    Raises
    ------
    ValueError
        (With ``membership``) a sample that every reference trained on.
    """
    refs = np.atleast_2d(np.asarray(reference_logliks, dtype=np.float64))
    if membership is None:
        log_out = logsumexp(refs, axis=0) - np.log(refs.shape[0])  # log of the references' mean probability
    else:
        outs = out_values(refs, membership)  # NaN where a reference trained on the sample
        log_out = (logsumexp(np.where(np.isnan(outs), -np.inf, outs), axis=0)
                   - np.log(np.sum(~np.isnan(outs), axis=0)))
    if a >= 1.0:
        log_px = log_out
    else:
        log_px = np.logaddexp(np.log1p(a) + log_out, np.log1p(-a)) - np.log(2.0)
    return np.asarray(target_loglik, dtype=np.float64) - log_px


def rmia_tie_break(log_ratio, n_population: int) -> np.ndarray:
    """The tie-breaking term of :func:`rmia_scores`: ``(1/2 + arctan(log_ratio) / pi) / (4 |Z|)``.

    Parameters
    ----------
    log_ratio : array-like of shape (n,)
        ``log [Pr(x|theta) / Pr(x)]`` (nats per token) of the samples scored.
    n_population : int
        ``|Z|``, the population samples each is compared with (the denominator of the fraction).

    Returns
    -------
    ndarray of shape (n,), float64 in [0, 1 / (4 |Z|)]
        Strictly increasing in ``log_ratio`` (up to float resolution; the ends are reached
        only where ``arctan`` rounds to +-pi/2), always below ``1 / (2 |Z|)``, half a step
        of the fraction: adding it orders samples of equal fractions by their log ratio
        and never reorders samples of different fractions.

    Raises
    ------
    ValueError
        ``n_population < 1``.

    Examples
    --------
    >>> (rmia_tie_break(np.array([-1.0, 0.0, 1.0]), 2) * 8).tolist()
    [0.25, 0.5, 0.75]
    """
    if n_population < 1:
        raise ValueError(f"n_population must be >= 1, got {n_population!r}")
    return (0.5 + np.arctan(np.asarray(log_ratio, dtype=np.float64)) / np.pi) / (4.0 * n_population)


def rmia_scores(log_ratio_x, log_ratio_z, *, gamma: float = 1.0, leave_one_out: bool = False,
                tie_break: bool = True) -> np.ndarray:
    """``score(x) = |{z : LR(x, z) >= gamma}| / |Z|`` with ``LR(x, z) = ratio(x) / ratio(z)``, by sorting,
    plus a term below half a step that orders equal fractions by the log ratio.

    Parameters
    ----------
    log_ratio_x : ndarray of shape (n,)
        ``log [Pr(x|theta) / Pr(x)]`` of the samples scored.
    log_ratio_z : ndarray of shape (m,)
        The same of the population samples z.
    gamma : float > 0
    leave_one_out : bool
        The samples scored are the population samples themselves (``log_ratio_x`` is
        ``log_ratio_z``): each is compared with the other m - 1 (``LR(z, z) = 1``
        is not counted).
    tie_break : bool
        Add :func:`rmia_tie_break` (default). False gives the paper's fraction alone, in
        steps of ``1 / |Z|``.

    Returns
    -------
    ndarray of shape (n,), float64 in [0, 1 + 1 / (4 |Z|)]
        Higher = member. The fraction (``LR(x, z) >= gamma`` iff ``log ratio(z) <=
        log ratio(x) - log gamma``: one sort of the m population values and a binary
        search per sample, O((n + m) log m), independent of the order of the z), plus
        ``rmia_tie_break(log_ratio_x, |Z|)`` unless ``tie_break=False``: the score is
        then strictly increasing in the log ratio, so samples above every population
        ratio (fraction 1.0) are no longer tied.

    Raises
    ------
    ValueError
        ``gamma <= 0``, no population sample (or one, with ``leave_one_out``).

    References
    ----------
    .. [1] Zarifzadeh, Liu, Shokri 2024, ICML, Sec. 3, Eq. 3-4.

    Examples
    --------
    >>> rmia_scores(np.array([0.0, 2.0]), np.array([-1.0, 0.0, 1.0]), tie_break=False).tolist()
    [0.6666666666666666, 1.0]
    >>> rmia_scores(np.array([2.0, 5.0]), np.array([-1.0, 0.0, 1.0])).round(4).tolist()  # both dominate every z
    [1.071, 1.0781]
    """
    if not gamma > 0:
        raise ValueError(f"gamma must be > 0, got {gamma!r}")
    x = np.asarray(log_ratio_x, dtype=np.float64)
    z = np.sort(np.asarray(log_ratio_z, dtype=np.float64))
    m = len(z) - (1 if leave_one_out else 0)
    if m < 1:
        raise ValueError("rmia needs population samples z to compare each sample with")
    bound = x - np.log(gamma)
    counts = np.searchsorted(z, bound, side="right").astype(np.float64)
    if leave_one_out:
        counts -= (x <= bound)  # the sample itself: LR(x, x) = 1 >= gamma exactly when gamma <= 1
    fraction = counts / m
    return fraction + rmia_tie_break(x, m) if tie_break else fraction


def choose_offline_a(stand_in_loglik, other_logliks, labels, *, population_stand_in, population_others,
                     gamma: float = 1.0, grid=None, others_membership=None,
                     population_others_membership=None) -> float:
    """The paper's choice of ``a``: attack a reference model (a stand-in target) with the others; best AUC.

    Parameters
    ----------
    stand_in_loglik : ndarray of shape (n,)
        ``log Pr(x|theta_s)`` of the stand-in reference model on labelled samples.
    other_logliks : ndarray of shape (k - 1, n)
        The other reference models on the same samples (OUT models of them).
    labels : ndarray of shape (n,)
        1 where the sample was in the stand-in's training data, 0 where not.
    population_stand_in, population_others : ndarrays of shape (m,) and (k - 1, m)
        The same on population samples z.
    gamma : float
    grid : sequence of float, optional
        Candidate values (default 0, 0.1, ..., 1).
    others_membership, population_others_membership : ndarrays of shape (n, k - 1) and (m, k - 1), bool, optional
        Which of the other models trained on each sample (shadow models with known
        halves): each sample's ``Pr_OUT`` then averages its OUT models only.

    Returns
    -------
    float
        The candidate with the highest AUC (the largest one among ties).

    Raises
    ------
    ValueError
        ``labels`` with one class, or an empty ``grid``.
    """
    labels = np.asarray(labels)
    if len(np.unique(labels)) != 2:
        raise ValueError("choosing a needs samples both in and out of the stand-in model's training data")
    grid = np.round(np.linspace(0.0, 1.0, 11), 10) if grid is None else np.asarray(grid, dtype=np.float64)
    if grid.size == 0:
        raise ValueError("choosing a needs at least one candidate value in `grid` (default 0, 0.1, ..., 1)")
    best, best_auc = float(grid[0]), -np.inf
    for a in grid:
        x = log_likelihood_ratio(stand_in_loglik, other_logliks, a=float(a), membership=others_membership)
        z = log_likelihood_ratio(population_stand_in, population_others, a=float(a),
                                 membership=population_others_membership)
        auc = roc_auc_score(labels, rmia_scores(x, z, gamma=gamma))
        if auc >= best_auc:
            best, best_auc = float(a), auc
    return best


@dataclass(frozen=True)
class RmiaSettings:
    """Settings of :class:`RmiaAttack`.

    Attributes
    ----------
    offline_a : float or None
        ``a`` of the offline ``Pr(x)``, in [0, 1]; None: fitted by the paper's procedure
        when the references are shadow models with known training halves (the
        ``shadow_membership`` input), else 1 (see the module docstring).
        The option ``rmia_offline_a`` (an audit holds it in ``AuditConfig.attack_settings["rmia"]``).
    gamma : float
        The pairwise threshold gamma > 0 (paper: 1). The option ``rmia_gamma`` (an audit carries
        it in ``AuditConfig.attack_settings["rmia"]``).

    Raises
    ------
    ValueError
        ``offline_a`` outside [0, 1] or ``gamma <= 0``.
    """

    offline_a: float | None = option(None, "a of the rmia attack's offline Pr(x) = ((1+a) Pr_OUT(x) + (1-a))/2, "
                                     "in [0, 1] (Zarifzadeh et al. 2024); the paper picks it by attacking a reference "
                                     "model whose training texts are known", key="rmia_offline_a", ge=0, le=1,
                                     metavar="A", default_doc="1: Pr(x) = the reference models' mean per-token "
                                                              "likelihood")
    gamma: float = option(1.0, "gamma of the rmia attack: a sample scores the fraction of population samples z with "
                          "likelihood ratio LR(x, z) >= gamma", key="rmia_gamma", gt=0, metavar="G")

    def __post_init__(self):
        if self.offline_a is not None and not 0.0 <= self.offline_a <= 1.0:
            raise ValueError(f"rmia offline_a must be in [0, 1], got {self.offline_a!r}")
        if not self.gamma > 0:
            raise ValueError(f"rmia gamma must be > 0, got {self.gamma!r}")

    @property
    def a(self) -> float:
        """The ``a`` used: ``offline_a``, or 1 when it is None."""
        return 1.0 if self.offline_a is None else float(self.offline_a)


@register_attack
class RmiaAttack(Attack):
    """Offline RMIA over the audit's reference set (Zarifzadeh et al. 2024, Sec. 3, offline).

    ``score(x)`` = the fraction of the population samples z with
    ``LR(x, z) >= gamma``, on per-token likelihoods (module docstring), plus a term below
    half a step ``1 / (2 |Z|)`` that orders equal fractions by the log ratio
    (:func:`rmia_tie_break`); in [0, 1 + 1 / (4 |Z|)], higher = member. With shadow references whose
    training halves are known (the ``shadow_membership`` input), ``Pr_OUT(x)`` averages only the
    references that did not train on x. The population set is the audit's
    (``AttackInputs.population``); its own rows are each compared with the others.
    Scoring rows without a population set compares them with each other.

    Examples
    --------
    >>> from mlflow_mia.attacks.inputs import AttackInputs
    >>> from mlflow_mia.signals.types import SignalResult
    >>> def sig(v): return SignalResult.from_arrays(v, n_tokens=[2, 2, 2], kind="pll")
    >>> inputs = AttackInputs("abc", target=sig([1.0, 2.0, 2.5]), references=[sig([2.0, 2.0, 2.0])])
    >>> RmiaAttack()(inputs).round(4).tolist()  # fractions 1, 0.5, 0 of the other two, plus the tie-break
    [1.0938, 0.5625, 0.0441]
    """

    name = "rmia"
    citation = "Zarifzadeh, Liu, Shokri 2024, ICML, Sec. 3 (offline)"
    requires = ("target", "references")
    Settings = RmiaSettings
    gate_min_references = 1
    gate_order = 70

    def _a(self, inputs) -> tuple[float, str]:
        """``a`` and where it came from: the setting; else fitted on shadows with known halves; else 1."""
        if self.settings.offline_a is not None:
            return self.settings.a, "rmia_offline_a"
        basis = inputs.population if inputs.population is not None else inputs
        member = basis.shadow_membership
        if member is None or basis.references.k < 2:
            return 1.0, "default"
        # The paper's choice, now possible: reference 1 is a stand-in target whose training half is known.
        logliks = np.stack([per_token_loglik(s) for s in basis.references.signals])
        usable = (~member[:, 1:]).any(axis=1)  # rows with an OUT model among the others
        labels = member[usable, 0]
        z = usable & ~member[:, 0]
        if labels.all() or not labels.any():
            return 1.0, "default"
        a = choose_offline_a(logliks[0, usable], logliks[1:, usable], labels.astype(int),
                             population_stand_in=logliks[0, z], population_others=logliks[1:, z],
                             gamma=self.settings.gamma, others_membership=member[usable, 1:],
                             population_others_membership=member[z, 1:])
        return a, "fitted: reference 1 as a stand-in target with its known training half (shadow_membership)"

    def _log_ratio(self, inputs, a: float):
        refs = np.stack([per_token_loglik(s) for s in inputs.references.signals])
        return log_likelihood_ratio(per_token_loglik(inputs.target), refs, a=a,
                                    membership=inputs.shadow_membership)

    def score(self, inputs):
        a, _ = self._a(inputs)
        population = inputs.population
        x = self._log_ratio(inputs, a)
        if population is None or inputs.is_population:
            return rmia_scores(x, x, gamma=self.settings.gamma, leave_one_out=True)
        return rmia_scores(x, self._log_ratio(population, a), gamma=self.settings.gamma)

    def record(self, inputs):
        a, source = self._a(inputs)
        return {"offline_a": a, "offline_a_source": source, "gamma": self.settings.gamma,
                "n_references": inputs.references.k,
                "likelihood": "exp(mean masked-token log-prob)",
                "tie_break": "(1/2 + arctan(log ratio) / pi) / (4 |Z|) added to the fraction",
                **({} if inputs.shadow_membership is None else {"references_used": "OUT halves (shadow_membership)"})}
