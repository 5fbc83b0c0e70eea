"""What a canary audit computes: :class:`CanaryAuditConfig` (each field a user option)."""

from __future__ import annotations

from dataclasses import dataclass

from mlflow_mia.config import MetricConfig, SignalConfig
from mlflow_mia.option import check_options, option, shared_option

__all__ = ["CanaryAuditConfig"]

#: Most candidate secrets scored per template (``n_candidates``): each one costs a forward pass (a PLL costs
#: one per token) for every canary of the template, and 10**6 already resolves about 19.9 bits of exposure.
MAX_CANDIDATES = 10**6


@dataclass(frozen=True)
class CanaryAuditConfig:
    """Settings of a canary audit (:func:`mlflow_mia.audits.canary.canary_audit`).

    Each field is declared with :func:`~mlflow_mia.option.option`: it is a key of
    ``evaluator_config["mia"]`` with ``method="canaries"``, a flag of
    ``mlflow-mia canary-audit`` and a parameter of the MLproject entry ``canary-audit``.

    Every field but ``n_candidates`` is an option declared once on
    :class:`~mlflow_mia.config.SignalConfig` or :class:`~mlflow_mia.config.MetricConfig`
    (:func:`~mlflow_mia.option.shared_option`); only the defaults of ``signal`` and
    ``fprs`` are the canary audit's own.

    The signal defaults to the pseudo-log-likelihood (every token masked once): it is
    deterministic and scores every digit of a secret, so the exposure ranking of
    candidates that differ in one digit is not blurred by which tokens a random mask
    happened to hide (the energy's masks are drawn per text).
    """

    signal: str = shared_option(SignalConfig, "kind", "pll")
    num_masks: int = shared_option(SignalConfig, "num_masks")
    mask_rate: float = shared_option(SignalConfig, "mask_rate")
    seed: int = shared_option(SignalConfig, "seed")
    max_length: int | None = shared_option(SignalConfig, "max_length")
    token_budget: int | None = shared_option(SignalConfig, "token_budget")
    n_candidates: int = option(1000, "candidate secrets scored per secret-format template for the exposure; the "
                               "whole space is scored (exact ranks) when it is no larger; each candidate costs a "
                               "forward pass per canary", ge=10, le=MAX_CANDIDATES, metavar="N")
    fprs: tuple[float, ...] = shared_option(MetricConfig, "fprs", (0.1, 0.01))
    bootstrap_rounds: int = shared_option(MetricConfig, "bootstrap_rounds")
    confidence: float = shared_option(MetricConfig, "confidence")
    delta: float = shared_option(MetricConfig, "delta")

    def __post_init__(self):
        check_options(self)

    def signal_config(self) -> SignalConfig:
        """The :class:`~mlflow_mia.config.SignalConfig` of the canary and candidate signals."""
        return SignalConfig(kind=self.signal, num_masks=self.num_masks, mask_rate=self.mask_rate, seed=self.seed,
                            max_length=self.max_length, token_budget=self.token_budget)

    def to_params(self) -> dict[str, str]:
        """Flat ``canary.<field>`` params for MLflow."""
        out = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            out[f"canary.{name}"] = ",".join(f"{v:g}" for v in value) if isinstance(value, tuple) else str(value)
        return out
