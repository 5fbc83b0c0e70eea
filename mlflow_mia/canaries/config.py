"""What a canary audit computes: :class:`CanaryAuditConfig` (each field a user option)."""

from __future__ import annotations

from dataclasses import dataclass

from mlflow_mia.config import MIN_FPR, SignalConfig
from mlflow_mia.option import check_options, option

__all__ = ["CanaryAuditConfig", "MAX_CANDIDATES"]

#: Most candidate secrets scored per template (``n_candidates``): each one costs a forward pass (a PLL costs
#: one per token) for every canary of the template, and 10**6 already resolves about 19.9 bits of exposure.
MAX_CANDIDATES = 10**6


@dataclass(frozen=True)
class CanaryAuditConfig:
    """Settings of a canary audit (:func:`mlflow_mia.audits.canary.canary_audit`).

    Each field is declared with :func:`~mlflow_mia.option.option`: it is a key of
    ``evaluator_config["mia"]`` with ``method="canaries"``, a flag of
    ``mlflow-mia canary-audit`` and a parameter of the MLproject entry ``canary-audit``.

    The signal defaults to the pseudo-log-likelihood (every token masked once): it is
    deterministic and scores every digit of a secret, so the exposure ranking of
    candidates that differ in one digit is not blurred by which tokens a random mask
    happened to hide (the energy's masks are drawn per text).
    """

    signal: str = option("pll", "signal of every canary and candidate: pll (every token masked once) or energy "
                         "(num_masks random masks)", choices=("pll", "energy"))
    num_masks: int = option(10, "K, random masks per text for the energy", ge=1, metavar="K")
    mask_rate: float = option(0.15, "fraction of the maskable tokens masked in each mask", gt=0, le=1, metavar="R")
    seed: int = option(0, "seed of the masks, the candidate samples, the guesses' tie-breaks and the bootstrap",
                       ge=0)
    max_length: int | None = option(None, "token limit per text including special tokens", ge=3, unset=(0,),
                                    metavar="N", default_doc="the model's limit")
    token_budget: int | None = option(None, "padded tokens per forward pass", ge=16, metavar="N",
                                      default_doc="1024 on CPU, 16384 on CUDA")
    n_candidates: int = option(1000, "candidate secrets scored per secret-format template for the exposure; the "
                               "whole space is scored (exact ranks) when it is no larger; each candidate costs a "
                               "forward pass per canary", ge=10, le=MAX_CANDIDATES, metavar="N")
    fprs: tuple[float, ...] = option((0.1, 0.01), "FPRs at which the TPR of included vs excluded canaries is read",
                                     ge=MIN_FPR, lt=1, metavar="A[,B]")
    bootstrap_rounds: int = option(1000, "bootstrap resamples of the canaries (by inclusion bit) for the intervals",
                                   ge=0, metavar="N")
    confidence: float = option(0.95, "level of the intervals, the one-run bounds and the gate's bounds", gt=0, lt=1)
    delta: float = option(1e-5, "delta of the one-run epsilon lower bound", ge=0, lt=1)

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
