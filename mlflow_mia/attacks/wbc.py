"""WBC: sign votes of sliding windows of target-minus-reference log-prob shifts, over several window sizes.

Chen, Du, Zhang, Kundu, Fleming, Ribeiro and Li (2026), "Window-based Membership
Inference Attacks Against Fine-tuned Large Language Models" (arXiv:2601.02751),
Sec. 4.1.3-4.1.4. With per-token losses ``l = -log p`` under the fine-tuned target
(``T``) and a frozen pretrained reference (``R``; for a LoRA target, its base),

    Delta_j   = l^R_j - l^T_j = lp^T_j - lp^R_j                   (nats, j = 1..n)
    S_i(w)    = sum_{j=i}^{i+w-1} Delta_j                          i = 1..n-w+1
    T(w)      = #{ i : S_i(w) > 0 } / (n - w + 1)                  the fraction of windows voting "member"
    S_WBC     = (1/|W|) sum_{w in W} T(w)                          in [0, 1], higher = member

with window sizes ``W`` spaced geometrically (Eq. 12: ``w_k = round(w_min (w_max /
w_min)^((k-1)/(|W|-1)))``, ``w_min = 2``, ``w_max = 40``, ``|W| = 10``). Memorisation is
local and heavy-tailed: a sign vote per window is robust to the few tokens whose
shift dominates a global mean, and the sizes span single tokens to phrases. Two
forward passes per text, nothing trained: the attack reads the per-token log-probs
both models' signals already hold.

The paper's text was not reachable from where this was written: the definition is
taken from LeakPro's implementation (``leakpro/attacks/mia_attacks/llm/wbc.py``, which
cites the paper's Sec. 4.1.3-4.1.4, Eq. 12-13 and Sec. 5.1's defaults, and the authors'
code github.com/Stry233/WBC for the short-text rule).
"""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mlflow_mia.attacks.base import Attack, register_attack
from mlflow_mia.attacks.ez_mia import token_shifts
from mlflow_mia.option import option

__all__: list[str] = []

#: The window sizes of the authors' configuration (github.com/Stry233/WBC ``configs/example.yaml``, as LeakPro
#: reports it), which Eq. 12 does not reproduce under any rounding.
AUTHORS_WINDOWS = (2, 3, 4, 6, 9, 13, 18, 25, 32, 40)


def geometric_windows(w_min: int, w_max: int, n_windows: int) -> tuple[int, ...]:
    """The paper's Eq. 12: ``round(w_min (w_max / w_min)^(k / (n_windows - 1)))``, k = 0..n_windows-1.

    Duplicates (from rounding) are kept, as in LeakPro.

    Raises
    ------
    ValueError
        ``w_min < 1``, ``w_max < w_min`` or ``n_windows < 2``.

    Examples
    --------
    >>> geometric_windows(2, 40, 10)
    (2, 3, 4, 5, 8, 11, 15, 21, 29, 40)
    """
    if w_min < 1 or w_max < w_min or n_windows < 2:
        raise ValueError(f"geometric_windows needs 1 <= w_min <= w_max and n_windows >= 2, got w_min={w_min}, "
                         f"w_max={w_max}, n_windows={n_windows}")
    k = np.arange(n_windows, dtype=np.float64)
    return tuple(int(w) for w in np.round(w_min * (w_max / w_min) ** (k / (n_windows - 1))))


def wbc_score(delta, windows) -> float:
    """One text's WBC score: the mean over ``windows`` of the fraction of length-w windows with a positive sum.

    Parameters
    ----------
    delta : array-like of shape (n,), n >= 1
        ``lp^T - lp^R`` of each scored token, in text order (nats).
    windows : sequence of int >= 1
        Window sizes; a size above ``n`` counts as ``n`` (one window over the whole
        text), as the authors' code clamps it.

    Returns
    -------
    float in [0, 1]

    Raises
    ------
    ValueError
        ``delta`` is empty.

    Examples
    --------
    >>> wbc_score([2.0, -1.0, 0.0, 2.0], [2, 9])  # w=2: sums 1, -1, 2 -> 2/3; w=9 -> 4: sum 3 -> 1
    0.8333333333333333
    """
    delta = np.asarray(delta, dtype=np.float64)
    if delta.size == 0:
        raise ValueError("wbc needs at least one scored token per text")
    cumulative = np.concatenate([[0.0], np.cumsum(delta)])
    votes = []
    for w in windows:
        w = min(int(w), delta.size)
        votes.append(float(np.mean(cumulative[w:] - cumulative[:-w] > 0)))
    return float(np.mean(votes))


@dataclass(frozen=True)
class WbcSettings:
    """Settings of :class:`WbcAttack`.

    Attributes
    ----------
    windows : tuple of int
        The window sizes W, each >= 1 (default the paper's Eq. 12 grid,
        ``geometric_windows(2, 40, 10)``; :data:`AUTHORS_WINDOWS` for the authors'
        configuration). The option ``wbc_windows`` (an audit holds it in
        ``AuditConfig.attack_settings["wbc"]``).

    Raises
    ------
    ValueError
        No window size, or one below 1.
    """

    windows: tuple[int, ...] = option(geometric_windows(2, 40, 10), "window sizes of the wbc attack (default the "
                                      "paper's geometric grid from 2 to 40, 10 sizes)", key="wbc_windows", ge=1)
    attack: ClassVar[str] = "wbc"  # named in the error

    def __post_init__(self):
        windows = tuple(int(w) for w in (self.windows if isinstance(self.windows, (tuple, list)) else (self.windows,)))
        if not windows or min(windows) < 1:
            raise ValueError(f"{self.attack} windows must be one or more sizes >= 1, got {self.windows!r}")
        object.__setattr__(self, "windows", windows)


@register_attack
class WbcAttack(Attack):
    """Score = mean over window sizes of the fraction of windows whose summed ``lp^T - lp^R`` is positive.

    Notes
    -----
    Where our definition differs from the references: a window size above a text's
    scored tokens counts as the text's length, as the authors' code and LeakPro's
    current version clamp it (an earlier LeakPro version skipped such sizes); the
    default sizes are the paper's Eq. 12 grid, not the authors' configuration list
    (:data:`AUTHORS_WINDOWS`, settable through ``windows``); the paper's other window
    statistics (mean, median, min of the window sums; its ablation) are not offered.
    A window whose sum is exactly 0 votes "non-member", as in LeakPro.

    Masked LMs: the definition needs the per-token shifts in text order, so that a
    window is a span of the text. The pseudo-log-likelihood (``kind="pll"``) has them:
    every token masked once, in order, its log-prob given both sides; WBC runs on it
    with the MLM's conditionals in place of the next-token ones. The masked energy
    (``kind="energy"``) has not: its log-probs are those of K random masks of about 15 %
    of the tokens each, so consecutive values are neither adjacent tokens nor under one
    context; :meth:`score` refuses it by name.

    Raises
    ------
    ValueError
        From :meth:`score`: energy signals; signals that do not pair up token by token
        (:func:`~mlflow_mia.attacks.ez_mia.token_shifts`).

    References
    ----------
    Chen et al. (2026), arXiv:2601.02751, Sec. 4.1.3-4.1.4, Eq. 12-13.

    Examples
    --------
    >>> from mlflow_mia.attacks.base import AttackInputs
    >>> from mlflow_mia.signals.types import SignalResult
    >>> def sig(lp): return SignalResult.from_arrays([0.0], n_tokens=[3], token_logprobs=[lp], kind="causal")
    >>> inputs = AttackInputs(("a",), target=sig([-1.0, -1.0, -3.0]), reference=sig([-2.0, -2.0, -2.0]))
    >>> WbcAttack(windows=(1, 2))(inputs).tolist()  # w=1: +1, +1, -1 -> 2/3; w=2: 2, 0 -> 1/2
    [0.5833333333333333]
    """

    name = "wbc"
    citation = "Chen et al. 2026, arXiv:2601.02751"
    requires = ("target", "reference")
    Settings = WbcSettings
    gate_min_references = None  # not in a gate's default set: see ez_mia.EzMiaAttack

    def score(self, inputs):
        if inputs.target.kind == "energy":
            raise ValueError("wbc slides windows over a text's per-token log-prob shifts in text order; the masked "
                             "energy's log-probs are of K random masks, not a token sequence: use signal='pll' "
                             "(every token masked once, in order) or a causal LM")
        return np.array([wbc_score(d, self.settings.windows) for d in token_shifts(inputs, self.name)])
