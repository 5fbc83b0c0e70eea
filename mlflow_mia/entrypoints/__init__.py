"""Entry points: thin shells that parse, call the library and print.

- :mod:`.cli`: ``mlflow-mia audit | ner-audit | canary-audit | compare | build-demo | analyze``, one
  subcommand per audit of :data:`mlflow_mia.pipeline.AUDITS` plus the others
  (:mod:`.compare`, :mod:`.ner_cli`, :mod:`.canary_cli`, :mod:`.analyze_cli`; :mod:`.common` holds what
  they share);
- :mod:`.evaluator`: :class:`~.evaluator.MiaEvaluator`, the ``mia`` plugin of
  ``mlflow.models.evaluate`` (entry point ``mlflow.model_evaluator: mia``): ``AUDITS[method]``;
- :mod:`.scorer`: the energy scorer pyfunc (``mlflow.pyfunc.spark_udf``);
- :mod:`.hf_metric`: the Hugging Face ``evaluate`` metric module;
- the MLproject entry points call the CLI.
"""

__all__ = ["MiaEvaluator"]


def __getattr__(name):
    if name == "MiaEvaluator":
        from mlflow_mia.entrypoints.evaluator import MiaEvaluator

        return MiaEvaluator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
