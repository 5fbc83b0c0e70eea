"""The engines by name: where each model's signals are computed.

An audit has one setup path (the same checks, the same errors, in the same order)
whatever the engine; an engine only loads each model on this machine and runs its
per-model signal jobs:

- ``"local"`` (:class:`~mlflow_mia.engines.local.LocalEngine`): in this process;
- ``"spark"`` (:class:`mlflow_mia.engines.spark.SparkEngine`): on Spark executors.

An engine is any object with ``name``, ``options`` (its keyword options), ``remote``
(True when only per-model jobs run there), ``check_device(device)``, ``load(model, *, role)``
(the loaded language model) and ``model_signals(lm, texts, config, *, role, stats, cache,
device, progress, desc)`` (a :class:`~mlflow_mia.signals.SignalResult` row-aligned with
``texts``); :data:`ENGINES` maps the names the audits take (``run_audit(engine=...)``) to them.
"""

from __future__ import annotations

import importlib

__all__ = ["get_engine"]

#: Engine names and where each engine class lives (imported when first asked for).
ENGINES = {"local": "mlflow_mia.engines.local:LocalEngine",
           "spark": "mlflow_mia.engines.spark:SparkEngine"}


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
