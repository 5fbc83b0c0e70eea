"""Engines: where stage 1 of an audit runs.

:func:`~mlflow_mia.audits.membership.run_audit` has one setup path (the same checks, the same
errors, in the same order) whatever the engine; an engine only loads the models
on the driver and produces :class:`~mlflow_mia.audits.membership.AuditSignals` for the model
roles the attacks need:

- ``"local"`` (:class:`~mlflow_mia.engines.local.LocalEngine`): :func:`~mlflow_mia.engines.local.stage_one`
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

__all__ = ["ENGINES", "get_engine"]

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
