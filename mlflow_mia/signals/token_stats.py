"""Per-position statistics of the model's own distribution, for Min-K%++ and EZ-MIA.

Zhang et al. (2024), "Min-K%++: Improved Baseline for Detecting Pre-Training Data
from Large Language Models", Sec. 3 (the Min-K%++ score): at a scored position with
model distribution ``p = softmax(z)`` over the vocabulary,

    mu = E_{v~p}[log p(v)]            (minus the entropy of p, nats)
    sigma^2 = Var_{v~p}[log p(v)]     (nats^2)

and the token score is ``(log p(x) - mu) / sigma``. The functions here return
``(log p(target), mu, sigma, top1)`` for each row of logits, from the same logits the
energy already reduces: no extra forward pass, one more pair of sums over the
vocabulary. ``top1`` is 1.0 where the target is the row's argmax (the first one on a
tie, as ``torch.argmax``), else 0.0: EZ-MIA's error positions are those where it is 0
(Ilić et al. 2026, arXiv:2601.12104; :mod:`mlflow_mia.attacks.ez_mia`). The running
argmax rides on the running maximum the log-sum-exp keeps anyway.

Since ``log p(v) = z_v - logsumexp(z)``, ``mu = E_p[z] - logsumexp(z)`` and
``sigma^2 = Var_p[z]``. :func:`blocked_logprob_stats` computes both while the
vocabulary streams through in blocks, with moments taken about the running maximum
``m`` of the logits (``d = z - m <= 0``), the streaming form of log-sum-exp extended
to the first two moments: with ``S_j = sum_v exp(d_v) d_v**j``, ``logsumexp(z) = m +
log S_0``, ``E_p[d] = S_1 / S_0`` and ``Var_p[z] = S_2 / S_0 - (S_1 / S_0)**2``.
``log p(target)`` is taken from a float32 ``S_0`` accumulated exactly as the log-probs
without statistics are, so the two agree bitwise.
When the maximum rises by ``-delta`` (``delta <= 0``), each ``d`` becomes ``d +
delta`` and the sums are rescaled by ``exp(delta)``:
``S_0' = e^delta S_0``, ``S_1' = e^delta (S_1 + delta S_0)``,
``S_2' = e^delta (S_2 + 2 delta S_1 + delta^2 S_0)``. Each block's sums are taken in
float32 and accumulated in float64.
"""

from __future__ import annotations

import torch

__all__: list[str] = []

#: Columns of the (n, 4) tensors these functions return.
STATS_COLUMNS = ("logprob", "mu", "sigma", "top1")


def _finish(logprob: torch.Tensor, s0: torch.Tensor, s1: torch.Tensor, s2: torch.Tensor,
            top1: torch.Tensor) -> torch.Tensor:
    """``(log p(target), mu, sigma, top1)`` as an (n, 4) float32 tensor from the moments about the running maximum.

    ``logprob`` comes in float32, computed exactly as the log-probs without statistics
    are (``target - top - log(sum exp(z - top))`` in float32), so a signal's log-probs
    and values are bitwise the same whether or not the statistics were asked for.
    """
    log_s0 = s0.log()
    mean_d = s1 / s0
    var = (s2 / s0 - mean_d * mean_d).clamp_min_(0.0)
    mu = mean_d - log_s0  # E_p[z] - logsumexp(z) = (m + E_p[d]) - (m + log S_0)
    return torch.stack([logprob, mu.float(), var.sqrt().float(), top1.float()], dim=1)


def blocked_logprob_stats(features: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                          targets: torch.Tensor, block: int) -> torch.Tensor:
    """``log p(targets[i])``, ``mu_i``, ``sigma_i`` and ``top1_i`` of ``softmax(features @ weight.T + bias)``.

    The vocabulary projection runs ``block`` words at a time (rows of ``weight``), so
    no full row of logits is held; see the module docstring for the streaming moments.

    Parameters
    ----------
    features : Tensor of shape (n, hidden)
        Inputs of the vocabulary projection at the scored positions.
    weight : Tensor of shape (vocab, hidden)
    bias : Tensor of shape (vocab,) or None
    targets : LongTensor of shape (n,)
        The original token id at each position.
    block : int
        Vocabulary rows per block (>= 1).

    Returns
    -------
    Tensor of shape (n, 4), float32
        Columns :data:`STATS_COLUMNS`: ``log p(target)`` (nats, <= 0), ``mu`` (nats,
        <= 0), ``sigma`` (nats, >= 0) and ``top1`` (1.0 where ``targets[i]`` is the
        row's argmax, the first on a tie; else 0.0).

    References
    ----------
    Zhang et al. (2024), Min-K%++, Sec. 3; Ilić et al. (2026), EZ-MIA (error positions).
    """
    n = features.shape[0]
    top = torch.full((n,), float("-inf"), dtype=torch.float32, device=features.device)
    s0, s1, s2 = (torch.zeros(n, dtype=torch.float64, device=features.device) for _ in range(3))
    total = torch.zeros(n, dtype=torch.float32, device=features.device)  # float32 S_0, as without statistics
    arg = torch.zeros(n, dtype=torch.long, device=features.device)  # running argmax (first on a tie)
    for start in range(0, weight.shape[0], block):
        z = torch.nn.functional.linear(features, weight[start:start + block],
                                       None if bias is None else bias[start:start + block]).float()
        block_top, block_arg = z.max(dim=1)
        arg = torch.where(block_top > top, block_arg + start, arg)  # strict: an earlier block keeps a tie
        new = torch.maximum(top, block_top)
        delta = (top - new).double()  # <= 0; -inf on the first block, where the sums are still 0
        delta = torch.where(torch.isfinite(delta), delta, torch.zeros_like(delta))
        scale = delta.exp()
        s2 = scale * (s2 + 2 * delta * s1 + delta * delta * s0)
        s1 = scale * (s1 + delta * s0)
        s0 = scale * s0
        d = z.sub_(new[:, None])
        w = d.exp()
        block_sum = w.sum(dim=1)
        total = total.mul_((top - new).exp_()).add_(block_sum)
        s0 += block_sum.double()
        wd = w.mul_(d)  # exp(d) d, in place of exp(d)
        s1 += wd.sum(dim=1).double()
        s2 += wd.mul_(d).sum(dim=1).double()
        top = new
    target = (features.float() * weight[targets].float()).sum(dim=1)
    if bias is not None:
        target += bias[targets].float()
    return _finish(target - top - total.log(), s0, s1, s2, arg == targets)


def logprob_stats_of_logits(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``(log p(target), mu, sigma, top1)`` of full rows of logits, shape (n, 4), float32.

    For heads that do not end in a separable projection (the full logits are at
    hand). Same quantities as :func:`blocked_logprob_stats`.

    Parameters
    ----------
    logits : Tensor of shape (n, vocab)
    targets : LongTensor of shape (n,)
    """
    z = logits.float()
    top = z.amax(dim=1)
    d = z - top[:, None]
    w = d.exp()
    total = w.sum(dim=1)
    s0 = total.double()
    wd = w.mul_(d)
    s1 = wd.sum(dim=1).double()
    s2 = wd.mul_(d).sum(dim=1).double()
    return _finish(z.gather(1, targets[:, None]).squeeze(1) - top - total.log(), s0, s1, s2,
                   z.argmax(dim=1) == targets)
