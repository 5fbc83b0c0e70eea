"""MLflow integration: the ``mia`` evaluator plugin, logging, model resolution and the ``mlflow-mia`` CLI.

Thin shells around :func:`mlflow_mia.audit.run_audit`: parse the configuration,
resolve the models, run the audit, log the result. Submodules import MLflow
lazily, so ``import mlflow_mia`` stays light.

- :mod:`.options`: the option schema (each option declared once) and what is derived from it: CLI flags,
  evaluator keys, key tables, MLproject parameters;
- :mod:`.config`: the flat ``evaluator_config["mia"]`` keys, parsed once;
- :mod:`.gate`: the release gate (pass / fail / inconclusive on a confidence bound);
- :mod:`.models`: registry URIs, run URIs, folders and pyfunc models -> ``MaskedLM``;
- :mod:`.logging`: :func:`~.logging.log_audit`, params / metrics / figures / tables / report / tags;
- :mod:`.evaluator`: :class:`~.evaluator.MiaEvaluator` (entry point ``mlflow.model_evaluator: mia``);
- :mod:`.cli`: ``mlflow-mia audit | compare | build-demo`` (parses and calls);
  :mod:`.compare`: the ``compare`` command; :mod:`.session`: what the commands share.
"""

__all__ = ["MiaEvaluator", "log_audit", "resolve_model", "parse_options", "Gate"]


def __getattr__(name):
    if name == "MiaEvaluator":
        from mlflow_mia.integrations.evaluator import MiaEvaluator

        return MiaEvaluator
    if name == "log_audit":
        from mlflow_mia.integrations.logging import log_audit

        return log_audit
    if name == "resolve_model":
        from mlflow_mia.integrations.models import resolve_model

        return resolve_model
    if name in ("parse_options", "Gate"):
        from mlflow_mia.integrations import config

        return getattr(config, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
