"""EZ-MIA: the directional imbalance of log-probability shifts at the target's error positions.

Ilić, Stanojević and Cvejoski (2026), "Powerful Training-Free Membership Inference
Against Autoregressive Language Models" (arXiv:2601.12104), Sec. 3.3-3.4. For a text
with per-token log-probs ``lp^T_t`` under the fine-tuned target and ``lp^R_t`` under a
frozen pretrained reference (for a LoRA target, its base):

    delta_t = lp^T_t - lp^R_t                                  (nats)
    E       = { t : argmax_v p_T(v | context_t) != x_t }        the target's error positions
    P       = sum_{t in E} max(delta_t, 0)                      log-probability moved up by fine-tuning
    N       = sum_{t in E} max(-delta_t, 0)                     moved down
    EZ      = P / N                                            higher = member

Training pushes a member's tokens up even where the model still predicts another
token, so members show ``P >> N`` there; at correct positions both models already
rank the token first and the shift says little. Two forward passes per text, nothing
trained: the attack reads the per-token log-probs both models' signals already hold
and the target's ``token_top1`` flags (:mod:`mlflow_mia.signals.token_stats`),
computed in the target's own pass.

The paper's text was not reachable from where this was written: the definition and
the edge cases are taken from LeakPro's implementation
(``leakpro/attacks/mia_attacks/llm/ez_mia.py``, which cites the paper's Sec. 3.3-3.4
and appendix E.5/E.6) and checked against the authors' released code
(github.com/JetBrains-Research/ez-mia, ``error_zone_pos_neg_sum_ratio``).
"""

import numpy as np

from mlflow_mia.attacks.base import Attack, register_attack

__all__: list[str] = []


def token_shifts(inputs, name: str) -> list[np.ndarray]:
    """``lp^T_t - lp^R_t`` of every scored token of every row (nats, float64), target and reference aligned.

    Parameters
    ----------
    inputs : AttackInputs
        With ``target`` and ``reference`` signals of the same kind.
    name : str
        The attack's name, for the messages.

    Returns
    -------
    list of ndarray (float64), one per row
        Each as long as the row's ``token_logprobs``.

    Raises
    ------
    ValueError
        The two signals are of different kinds, or a row's target and reference hold
        different numbers of scored tokens (the models tokenise the text differently,
        or the signals were computed with other settings): the shifts need the same
        tokens at the same positions.
    """
    target, reference = inputs.target, inputs.reference
    if target.kind != reference.kind:
        raise ValueError(f"{name} compares the target's and the reference's per-token log-probs, but the target's "
                         f"signals are {target.kind!r} and the reference's {reference.kind!r}: compute both with "
                         "the same SignalConfig")
    out = []
    for i, (t, r) in enumerate(zip(target.token_logprobs, reference.token_logprobs)):
        if t.shape != r.shape:
            raise ValueError(f"{name}: row {i} has {t.size} scored token(s) under the target and {r.size} under the "
                             "reference; the per-token shifts need the same tokens at the same positions: use a "
                             "reference with the target's tokenizer (its pretrained base) and the same signal "
                             "settings (the audit refuses other tokenizers unless allow_tokenizer_mismatch is set)")
        out.append(t.astype(np.float64) - r.astype(np.float64))
    return out


def ez_score(delta, top1) -> float:
    """One text's EZ score ``P / (P + N)`` (a strictly increasing map of the paper's ``P / N``), in [0, 1].

    Parameters
    ----------
    delta : array-like of shape (n_tokens,)
        ``lp^T - lp^R`` at each scored token (nats).
    top1 : array-like of bool, shape (n_tokens,)
        True where the token is the target's top-1 prediction (not an error position).

    Returns
    -------
    float
        ``P / (P + N)`` over the error positions; 1.0 when there is no error position or
        ``N = 0 < P`` (the paper's strongest member cases); 0.5 when ``P = N = 0`` at
        one or more error positions (no shift either way).

    Examples
    --------
    >>> round(ez_score([0.3, -0.1, 2.0], [False, False, True]), 12)  # P = 0.3, N = 0.1; the third is no error
    0.75
    >>> ez_score([0.3, 0.2], [True, True]), ez_score([0.3, 0.0], [False, False]), ez_score([0.0], [False])
    (1.0, 1.0, 0.5)
    """
    delta = np.asarray(delta, dtype=np.float64)
    errors = delta[~np.asarray(top1, dtype=bool)]
    if errors.size == 0:
        return 1.0
    up = float(np.sum(np.maximum(errors, 0.0)))
    down = float(np.sum(np.maximum(-errors, 0.0)))
    return 0.5 if up + down == 0.0 else up / (up + down)


@register_attack
class EzMiaAttack(Attack):
    """Score = ``P / (P + N)`` over the target's error positions (higher = member), against the first reference.

    Notes
    -----
    ``P / (P + N) = r / (1 + r)`` with ``r = P / N`` the paper's EZ score: a strictly
    increasing map, so every rank metric (AUC, TPR at a fixed FPR) is the paper's,
    while every score stays finite (the audit's metrics refuse infinities). Where our
    definition differs from the references:

    * no error position (the target ranks every scored token first) and ``N = 0 < P``
      score 1.0, the top: the paper's appendix E.5 and E.6 as LeakPro implements them
      (LeakPro orders the no-error rows above the ``N = 0`` ones and those by ``P``;
      here they tie). The authors' code scores both 0.0, and every row with fewer than
      2 error positions 0.0 too; LeakPro keeps that floor (``min_error_positions=2``).
      Here a row with one error position is scored by that position, as the paper's
      definition reads;
    * ``P = N = 0`` with error positions (every shift exactly 0, e.g. a target equal to
      its reference) scores 0.5, no imbalance either way; LeakPro forces it to the top,
      the authors' code to 0.0;
    * every scored token counts: the authors' code and LeakPro (``ignore_first_position``)
      leave out the first scored position (one token of context; LeakPro measured AUC
      0.9817 against 0.9818 with and without it on WikiText);
    * an error position is one where the target's argmax is not the token, the first
      argmax on a tie (as ``torch.topk`` in the authors' code).

    Masked LMs (``kind="energy"`` or ``"pll"``): the definition carries over with the
    MLM head's distribution at each masked position: an error position is a masked
    token the target does not predict first, and ``delta`` the shift of its log-prob
    from the reference's under the same mask (target and reference draw the same masks
    from the text, so the tokens pair up). Under the energy a token masked by several of
    the K masks counts once per mask, as in ``min_k``.

    The target's signals must carry ``token_top1`` (declared through
    ``token_quantities``: stage 1 computes it with Min-K%++'s statistics, in the same
    vocabulary pass; the Spark engine does not carry it yet).

    Raises
    ------
    ValueError
        From :meth:`score`: the target's signals lack ``token_top1``; the target's and
        reference's signals are of different kinds or do not pair up token by token
        (:func:`token_shifts`).

    References
    ----------
    Ilić, Stanojević and Cvejoski (2026), arXiv:2601.12104, Sec. 3.3-3.4, appendix E.5-E.6.

    Examples
    --------
    >>> from mlflow_mia.attacks.base import AttackInputs
    >>> from mlflow_mia.signals.types import SignalResult
    >>> target = SignalResult.from_arrays([0.0, 0.0], n_tokens=[2, 2], token_logprobs=[[-1.0, -2.0], [-3.0, -1.0]],
    ...                                   token_top1=[[False, False], [False, True]], kind="causal")
    >>> reference = SignalResult.from_arrays([0.0, 0.0], n_tokens=[2, 2], token_logprobs=[[-2.0, -1.0], [-2.0, -1.0]],
    ...                                      kind="causal")
    >>> EzMiaAttack()(AttackInputs(("a", "b"), target=target, reference=reference)).tolist()
    [0.5, 0.0]
    """

    name = "ez_mia"
    citation = "Ilić, Stanojević and Cvejoski 2026, arXiv:2601.12104"
    requires = ("target", "reference")
    token_quantities = ("token_stats",)  # the target's top1 flags come with the statistics
    # Not in a gate's default set (added with --attacks): both assume the reference is the target's pretrained base,
    # which a gate's references need not be, and neither is measured on the demos yet (issue 47 item 6 decides).
    gate_min_references = None

    def score(self, inputs):
        if inputs.target.token_top1 is None:
            raise ValueError("ez_mia needs the target's per-token top1 flags (SignalResult.token_top1, which tokens "
                             "the target predicts first); compute the signals with "
                             "mlflow_mia.signals.compute_signals (stats=True), or pass token_top1= to "
                             "SignalResult.from_arrays")
        deltas = token_shifts(inputs, self.name)
        return np.array([ez_score(d, top1) for d, top1 in zip(deltas, inputs.target.token_top1)])
