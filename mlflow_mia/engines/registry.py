"""Engines: where stage 1 of an audit runs.

:func:`~mlflow_mia.audits.membership.run_audit` has one setup path (the same checks, the same
errors, in the same order) whatever the engine; an engine only loads the models
on the driver and produces :class:`~mlflow_mia.audits.membership.AuditSignals` for the model
roles the attacks need:

- ``"local"`` (:class:`LocalEngine`): :func:`~mlflow_mia.engines.local.stage_one`
  in this process;
- ``"spark"`` (:class:`mlflow_mia.engines.spark.SparkEngine`): each
  model's signals on Spark executors, the rest of stage 1 on the driver.

An engine is any object with ``name``, ``check_device(device)``,
``check_inputs(needs)``, ``load(model, *, role)`` and ``signals(models, pool,
population, config, *, cache, device, progress)``; :data:`ENGINES` maps the names
:func:`run_audit` takes to them.
"""

from __future__ import annotations

import importlib
from typing import ClassVar

from mlflow_mia.signals.causal_model import LANGUAGE_MODELS, as_language_model
from mlflow_mia.signals.model import MaskedLM
from mlflow_mia.signals.runtime import resolve_device
from mlflow_mia.engines.local import stage_one

__all__ = ["LocalEngine", "ENGINES", "get_engine"]

#: Engine names and where each engine class lives (imported when first asked for).
ENGINES = {"local": "mlflow_mia.engines.registry:LocalEngine",
           "spark": "mlflow_mia.engines.spark:SparkEngine"}


class LocalEngine:
    """Stage 1 in this process: every declared input's ``compute``, on the models given.

    Attributes
    ----------
    options : tuple of str
        The engine's options in :func:`get_engine` (none).
    """

    name = "local"
    options: ClassVar[tuple[str, ...]] = ()

    def check_device(self, device) -> None:
        """Raise for a device that does not exist here (:func:`~mlflow_mia.signals.runtime.resolve_device`)."""
        resolve_device(device)

    def check_inputs(self, needs) -> None:
        """Every declared input runs here: nothing to refuse."""

    def load(self, model, *, role: str) -> MaskedLM:
        """A MaskedLM or CausalLM, a ``(model, tokenizer)`` pair, a local folder, or a resolved model (its ``lm``)."""
        lm = getattr(model, "lm", None)  # a ResolvedModel of the integrations carries the loaded model
        return as_language_model(lm if isinstance(lm, LANGUAGE_MODELS) else model, role=role)

    def signals(self, models, pool, population, config, *, cache=None, device=None, progress: bool = True):
        """:func:`~mlflow_mia.engines.local.stage_one` in this process."""
        signals = stage_one(models, pool, population, config, cache=cache, device=device, progress=progress)
        signals.info["engine"] = self.name
        return signals


def get_engine(engine="local", **options):
    """The engine named ``engine`` with its ``options`` (None values are left out), or ``engine`` itself.

    Parameters
    ----------
    engine : str or engine object
        A name in :data:`ENGINES`, or an engine instance (then no options).
    **options
        The engine's options, e.g. ``spark=``, ``spark_master=``, ``store=`` of ``"spark"``.

    Raises
    ------
    ValueError
        An unknown engine name (the message lists them), or an option the engine does not take.

    Examples
    --------
    >>> get_engine("local").name
    'local'
    >>> get_engine("local", store=None).name
    'local'
    >>> get_engine("local", store="/tmp/signals")
    Traceback (most recent call last):
    ...
    ValueError: option(s) ['store'] do not apply to engine 'local' (its options: none)
    """
    given = {k: v for k, v in options.items() if v is not None}
    if not isinstance(engine, str):
        if given:
            raise ValueError(f"option(s) {sorted(given)} are for an engine name; configure the engine object itself")
        return engine
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {sorted(ENGINES)}, got {engine!r}")
    module, _, name = ENGINES[engine].partition(":")
    cls = getattr(importlib.import_module(module), name)
    unknown = sorted(set(given) - set(cls.options))
    if unknown:
        raise ValueError(f"option(s) {unknown} do not apply to engine {engine!r} (its options: "
                         f"{', '.join(cls.options) or 'none'})")
    return cls(**given)
