"""Gradient-norm attack: how steep the text's loss is at the target's parameters.

A model trained on a text sits near a minimum of that text's loss, where the
gradient is small; MIMIR (Duan et al. 2024, ``mimir/attacks/gradnorm.py``) runs the
norm of the loss gradient as a white-box attack on language models. The gradient and
its norm are computed by :mod:`mlflow_mia.signals.gradient` (one backward pass per
text): the mean over parameter tensors of each tensor's ``p``-norm. **Higher score =
member**: the score is minus the norm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlflow_mia.attacks.base import Attack, get_attack, register_attack
from mlflow_mia.attacks.inputs import AttackInput, declare_input
from mlflow_mia.option import option
from mlflow_mia.signals.dispatch import signal_config_for
from mlflow_mia.signals.gradient import NORMS, gradient_norms

__all__: list[str] = []


@dataclass(frozen=True)
class GradNormSettings:
    """Settings of :class:`GradNormAttack`.

    Attributes
    ----------
    norm : {"1", "2", "inf"}
        ``p`` of each parameter tensor's gradient norm (default ``"inf"``, MIMIR's default;
        option ``grad_norm_p``).

    Raises
    ------
    ValueError
        Another value.
    """

    norm: str = option("inf", "gradient norm attack: p of each parameter tensor's gradient norm", key="grad_norm_p",
                       choices=tuple(NORMS))

    def __post_init__(self):
        norm = str(self.norm).lower() if isinstance(self.norm, (str, int)) and not isinstance(self.norm, bool) else None
        if norm not in NORMS:
            raise ValueError(f"grad_norm norm must be one of {list(NORMS)}, got {self.norm!r}")
        object.__setattr__(self, "norm", norm)


def _grad_norms(stage) -> np.ndarray:
    """Stage 1's ``grad_norm``: the gradient norm of every text's loss under the target."""
    settings = get_attack("grad_norm", stage.config).settings
    target = stage.models.target
    return gradient_norms(target, list(stage.texts), signal_config_for(target, stage.config.signal),
                          norm=settings.norm, device=stage.device)


declare_input(AttackInput(
    "grad_norm", rows="values", roles=("target",), compute=_grad_norms,
    how_to_provide="the gradient norms are computed by the audit when 'grad_norm' is requested "
                   "(mlflow_mia.signals.gradient.gradient_norms)",
    description="Mean over the target's parameter tensors of the p-norm of the gradient of each text's loss (the "
                "target's signal value as a function of the parameters); one backward pass per text."))


@register_attack
class GradNormAttack(Attack):
    """Score = ``-(1/|Theta|) sum_W ||d loss(x) / dW||_p`` (higher = member).

    The loss is the target's signal value of the text: a causal LM's mean NLL of tokens
    2..n (MIMIR's loss); a masked LM's energy with the signal's own K seeded masks and
    reduction, or its PLL (``signal="pll"``): the gradient of the masked-LM objective the
    model was trained on, so the attack carries over to masked LMs unchanged.
    ``Theta`` is every parameter tensor of the model (frozen ones included, a tied
    embedding once); a model whose backward pass does not fit the device's free memory
    is refused before it runs, with the estimate
    (:func:`~mlflow_mia.signals.gradient.check_backward_fits`).

    Where MIMIR differs: MIMIR returns ``-norm`` under its lower-is-member convention,
    so it ranks the texts of *larger* gradient as members; here smaller gradients are
    members (the sign a minimum of the training loss predicts, and the one a test on a
    model trained on its members pins). MIMIR takes only the parameters whose gradient
    exists (an adapter's, over a frozen base); here every parameter.

    Examples
    --------
    >>> from mlflow_mia.attacks.base import AttackInputs
    >>> from mlflow_mia.signals.types import SignalResult
    >>> sig = SignalResult.from_arrays([1.0, 2.0], n_tokens=[3, 3], kind="causal")
    >>> GradNormAttack()(AttackInputs(("a", "b"), target=sig, grad_norm=[0.5, 2.0])).tolist()
    [-0.5, -2.0]
    """

    name = "grad_norm"
    citation = "Duan et al. 2024 (MIMIR)"
    requires = ("target", "grad_norm")
    Settings = GradNormSettings
    # Not in a release gate's default set: not measured on the demos yet, and a backward pass per text
    # (about 7x the causal signal's time on GPT-2 small's shape on CPU) would slow every gated audit.
    gate_min_references = None

    def score(self, inputs):
        return -np.asarray(inputs.grad_norm, dtype=np.float64)
