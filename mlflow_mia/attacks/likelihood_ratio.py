"""Likelihood-ratio attack with a reference model.

Mireshghallah et al. (2022), "Quantifying Privacy Risks of Masked Language Models
Using Membership Inference Attacks", EMNLP, Sec. 2.2-2.4:
``L(s) = log p(s; theta_R) / p(s; theta) = E(s; theta) - E(s; theta_R) + const``;
``L(s) <= t`` rejects H_out (member).
"""

from mlflow_mia.attacks.base import Attack, register_attack


@register_attack
class LikelihoodRatioAttack(Attack):
    """Score = ``-L(s) = E(s; theta_R) - E(s; theta)``, higher = member.

    The reference energies must come from the same texts in the same order
    (``AttackInputs`` checks the row counts); with agreeing tokenizers they use the
    same masks, which lowers the variance of the ratio.

    For a causal target and reference (``kind="causal"``) the values are mean NLLs
    per predicted token: ``L(s) = loss_target(s) - loss_reference(s)``, MIMIR's
    ``ReferenceAttack`` (Carlini et al. 2021's reference-model ratio), negated here so
    that higher = member. A causal target with a masked reference is refused
    (:func:`mlflow_mia.signals.dispatch.check_model_kinds`).

    With a reference set of k >= 2 models the audit reports it against each
    (``per_reference``): ``likelihood_ratio`` against the first reference,
    ``likelihood_ratio.reference_2`` ... ``likelihood_ratio.reference_<k>`` against the others.

    Examples
    --------
    >>> import numpy as np
    >>> from mlflow_mia.attacks.base import AttackInputs
    >>> from mlflow_mia.signals.types import SignalResult
    >>> def sig(e): return SignalResult(np.array(e), (), np.array([5, 5]), np.zeros(2, bool))
    >>> LikelihoodRatioAttack()(AttackInputs(("a", "b"), target=sig([1.0, 3.0]), reference=sig([4.0, 3.5]))).tolist()
    [3.0, 0.5]
    """

    name = "likelihood_ratio"
    citation = "Mireshghallah et al. 2022, Eq. 1-2"
    requires = ("target", "reference")
    gate_min_references = 1
    gate_order = 50
    per_reference = True  # with several references: one report per reference

    def score(self, inputs):
        return inputs.reference.values - inputs.target.values  # = -L(s)
