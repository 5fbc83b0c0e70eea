"""ReCaLL: the text's log-likelihood conditioned on non-member shots, relative to its own.

Xie et al. (2024), "ReCaLL: Membership Inference via Relative Conditional
Log-Likelihoods", EMNLP, Sec. 3:

    ReCaLL(x) = LL(x | P) / LL(x),

``LL`` the mean log-likelihood per token (nats/token, < 0) and ``P`` a prefix of
non-member texts. Reading non-member context lowers a member's likelihood more than a
non-member's (the authors' reading: in-context text acts like a step of fine-tuning
away from what the model memorised), so the ratio is larger for members: **higher =
member**, the paper's own orientation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mlflow_mia.attacks.base import Attack, get_attack, register_attack
from mlflow_mia.attacks.inputs import AttackInput, declare_input
from mlflow_mia.option import option
from mlflow_mia.signals.causal_model import CausalLM
from mlflow_mia.signals.conditional import conditional_loglik
from mlflow_mia.signals.dispatch import signal_config_for

__all__: list[str] = []


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"recall {name} must be an int >= {low}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class RecallSettings:
    """Settings of :class:`RecallAttack`.

    Attributes
    ----------
    shots : int
        Population texts joined into the prefix (>= 1, default 5; option ``recall_shots``).
        The paper studies the number of shots as a setting; fewer are used when the prefix
        and the longest text do not fit the model (the audit records how many).
    seed : int
        Seed of the draw of the shots from the population (>= 0, default 0; option ``recall_seed``).

    Raises
    ------
    ValueError
        A value that is not an int, or out of range.
    """

    shots: int = option(5, "ReCaLL: population texts joined into the non-member prefix", key="recall_shots",
                        ge=1, metavar="N")
    seed: int = option(0, "ReCaLL: seed of the draw of the prefix texts from the population", key="recall_seed",
                       ge=0, metavar="S")

    def __post_init__(self):
        object.__setattr__(self, "shots", _check_int("shots", self.shots, 1))
        object.__setattr__(self, "seed", _check_int("seed", self.seed, 0))


def prefix_rows(n_population: int, shots: int, seed: int) -> np.ndarray:
    """The population rows drawn as shots, in prefix order: ``shots`` distinct rows, uniformly, from ``seed``.

    Raises
    ------
    ValueError
        ``shots`` not below ``n_population`` (the population keeps texts to score).

    Examples
    --------
    >>> prefix_rows(10, 3, 0).tolist() == prefix_rows(10, 3, 0).tolist(), len(set(prefix_rows(10, 3, 0)))
    (True, 3)
    """
    if shots >= n_population:
        raise ValueError(f"ReCaLL draws {shots} prefix texts from a population of {n_population}: give a larger "
                         "population or fewer shots (recall_shots)")
    return np.random.default_rng(seed).choice(n_population, size=shots, replace=False)


def recall_scores(conditional_ll, unconditional_nll) -> np.ndarray:
    """``LL(x | P) / LL(x)`` from the conditional mean log-likelihood and the unconditional mean NLL.

    Parameters
    ----------
    conditional_ll : array-like of shape (n,)
        ``LL(x | P)``, nats/token (<= 0); NaN where a row is not scored.
    unconditional_nll : array-like of shape (n,)
        ``-LL(x)``, the causal signal's values (nats/token, > 0).

    Returns
    -------
    ndarray of shape (n,), float64: unitless, higher = member; NaN where either is NaN or ``LL(x)`` is 0.

    >>> recall_scores([-3.0, -2.0], [2.0, 2.0]).tolist()
    [1.5, 1.0]
    """
    ll = -np.asarray(unconditional_nll, dtype=np.float64)
    cond = np.asarray(conditional_ll, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ll != 0, cond / np.where(ll != 0, ll, 1.0), np.nan)


def _conditional(stage) -> np.ndarray:
    """Stage 1's ``recall_conditional``: ``LL(x | P)`` of every text, NaN for the texts in the prefix."""
    target = stage.models.target
    if not isinstance(target, CausalLM):
        raise ValueError(RecallAttack.masked_refusal)
    if stage.n_pool is None:
        raise ValueError("ReCaLL draws its prefix from the population texts: stage one must say which texts are "
                         "the population (StageOne.n_pool)")
    settings = get_attack("recall", stage.config).settings
    population = list(stage.texts[stage.n_pool:])
    rows = prefix_rows(len(population), settings.shots, settings.seed)
    res = conditional_loglik(target, stage.texts, [population[i] for i in rows],
                             signal_config_for(target, stage.config.signal), cache=stage.cache, device=stage.device)
    shots = {population[i] for i in rows[len(rows) - res.n_shots:]}
    values = res.values.copy()
    values[[i for i, t in enumerate(stage.texts) if t in shots]] = np.nan  # a text is not scored after itself
    return values


declare_input(AttackInput(
    "recall_conditional", rows="values", roles=("target",), compute=_conditional,
    how_to_provide="the conditional log-likelihoods are computed by the audit when 'recall' is requested "
                   "(mlflow_mia.signals.conditional.conditional_loglik)",
    description="ReCaLL's LL(x | P): mean log-likelihood per token of each text read after a prefix of population "
                "texts (nats/token, <= 0; Xie et al. 2024); NaN for the population texts in the prefix."))


@register_attack
class RecallAttack(Attack):
    """Score = ``LL(x | P) / LL(x)`` (Xie et al. 2024, Sec. 3; unitless, higher = member).

    ``LL(x)`` is the causal signal's mean log-likelihood of tokens 2..n; ``LL(x | P)``
    the mean log-likelihood of every token of ``x`` read after the prefix ``P``
    (:mod:`mlflow_mia.signals.conditional`). ``P`` is ``shots`` population texts drawn
    with ``seed`` and joined with no separator; the audit records the rows drawn and the
    shots that fit (``attack_settings["recall"]``). The population texts in the prefix
    are not scored (NaN, left out of the thresholds and counted), as the authors leave
    their prefix texts out of the evaluation: a text read after itself is copied, not
    predicted.

    Where the references differ: the authors (``ruoyuxie/recall``) and MIMIR
    (``mimir/attacks/recall.py``) take the prefix's non-member texts from the evaluation
    data's non-members; here they come from the population, which plays that part in an
    audit. MIMIR returns ``-LL(x | P) / NLL(x)`` under its lower-is-member convention, the
    same ranking. A tokenizer that adds a BOS token (Llama) gets it once, before the
    prefix, where the authors' concatenation of two tokenisations repeats it before the
    text. The prefix is read once per text (no shared key-value cache).

    Masked LMs: refused (:attr:`masked_refusal`).

    Examples
    --------
    >>> from mlflow_mia.attacks.base import AttackInputs
    >>> from mlflow_mia.signals.types import SignalResult
    >>> sig = SignalResult.from_arrays([2.0, 2.0, 1.0], n_tokens=[3, 3, 3], kind="causal")
    >>> RecallAttack()(AttackInputs(("a", "b", "c"), target=sig, recall_conditional=[-3.0, -2.0, np.nan])).tolist()
    [1.5, 1.0, nan]
    """

    name = "recall"
    citation = "Xie et al. 2024"
    requires = ("target", "recall_conditional")
    allows_nan = True  # the population texts of the prefix
    Settings = RecallSettings
    # Not in a release gate's default set: not measured on the demos yet, and its prefix texts leave the
    # population (the thresholds) shorter by recall_shots rows.
    gate_min_references = None
    masked_refusal: ClassVar[str] = (
        "attack 'recall' needs a causal LM target: ReCaLL's LL(x | P) is the left-to-right likelihood of a text read "
        "after a prefix (in-context conditioning, Xie et al. 2024, Sec. 3), which a masked LM does not define; "
        "leave 'recall' out for a masked target")

    def score(self, inputs):
        if inputs.target.kind != "causal":
            raise ValueError(self.masked_refusal)
        return recall_scores(inputs.recall_conditional, inputs.target.values)

    def record(self, inputs) -> dict:
        """The shots asked for, the seed, and the population rows that formed the prefix."""
        pop = inputs.population
        out = {"shots": self.settings.shots, "seed": self.settings.seed}
        if pop is not None and pop.recall_conditional is not None:
            rows = prefix_rows(len(pop), self.settings.shots, self.settings.seed)
            used = sorted(int(r) for r in rows if np.isnan(pop.recall_conditional[r]))
            out.update(shots_used=len(used), prefix_population_rows=used)
        return out
