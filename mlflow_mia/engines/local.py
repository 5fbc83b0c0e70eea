"""The local engine: each model's signals in this process.

:class:`LocalEngine` (the engine ``"local"`` of :mod:`mlflow_mia.engines.registry`) loads a
model here and runs its per-model signal job with
:func:`~mlflow_mia.signals.compute_signals` (cached in the signal cache when one is given).
It knows no audit: an audit's stage 1 (e.g. :func:`mlflow_mia.audits.membership.signals.stage_one`)
asks it for the signals of each model it needs and computes the rest itself.
"""

from __future__ import annotations

from typing import ClassVar, Sequence

from mlflow_mia.config import SignalConfig
from mlflow_mia.signals import MaskedLM, SignalCache, SignalResult
from mlflow_mia.signals.causal_model import as_language_model, language_models
from mlflow_mia.signals.dispatch import compute_signals
from mlflow_mia.signals.runtime import resolve_device

__all__: list[str] = []


class LocalEngine:
    """Per-model signal jobs in this process.

    Attributes
    ----------
    name : str
        ``"local"``.
    options : tuple of str
        The engine's options in :func:`~mlflow_mia.engines.registry.get_engine` (none).
    remote : bool
        False: the jobs run in this process, and so may anything else an audit computes with the models.
    """

    name = "local"
    options: ClassVar[tuple[str, ...]] = ()
    remote: ClassVar[bool] = False

    def check_device(self, device) -> None:
        """Raise for a device that does not exist here (:func:`~mlflow_mia.signals.runtime.resolve_device`)."""
        resolve_device(device)

    def load(self, model, *, role: str) -> MaskedLM:
        """A MaskedLM or CausalLM, a ``(model, tokenizer)`` pair, a local folder, or a resolved model (its ``lm``)."""
        lm = getattr(model, "lm", None)  # a ResolvedModel of the integrations carries the loaded model
        return as_language_model(lm if isinstance(lm, language_models()) else model, role=role)

    def model_signals(self, lm, texts: Sequence[str], config: SignalConfig, *, role: str, stats: bool = False,
                      cache: SignalCache | None = None, device=None, progress: bool = True,
                      desc: str | None = None) -> SignalResult:
        """The signals of ``lm`` over ``texts`` (:func:`~mlflow_mia.signals.compute_signals`), row-aligned.

        Parameters
        ----------
        lm : MaskedLM or CausalLM
            A model this engine loaded (:meth:`load`).
        texts : sequence of str, length n
        config : SignalConfig
        role : str
            The model's role (``"target"``, ``"reference"``, ...); not read here (Spark finds its model by it).
        stats : bool
            Also Min-K%++'s per-token statistics.
        cache, device, progress, desc
            As for :func:`~mlflow_mia.signals.compute_signals`.

        Returns
        -------
        SignalResult
            n rows.
        """
        return compute_signals(lm, list(texts), config, cache=cache, device=device, progress=progress, desc=desc,
                               stats=stats)
