"""The ``mia`` evaluator plugin for ``mlflow.models.evaluate``.

Registered in the entry-point group ``mlflow.model_evaluator`` under the name
``mia``, so after ``pip install mlflow-mia``::

    mlflow.models.evaluate(
        model=None, data=pool_df, targets="is_member",
        model_type="mia", evaluators=["mia"],
        evaluator_config={"mia": {
            "target_model": "models:/bbc-target@candidate",
            "reference_model": "models:/bbc-reference@champion",
            "population_data": population_df,   # DataFrame or a csv/jsonl/parquet path
            "text_column": "text", "group_column": "article_id",
            "attacks": ["loss", "likelihood_ratio"],
            "signal": "energy", "num_masks": 10, "mask_rate": 0.15, "seed": 0,
            "fprs": [0.1, 0.01, 0.001], "log_texts": False}})

``data`` is the target pool: one row per text, with the membership label in the
``targets`` column (1 = member of the target's training data, 0 = non-member).
The deprecated ``mlflow.evaluate(...)`` alias reaches the same code.

``model=None`` with the *target_model* key is the recommended form: the audit loads the
model with its own loader, which reads only the artifact's safetensors weights and
never runs code shipped with the model (``docs/explanations/security.md``). With
``model="models:/..."`` MLflow's pyfunc loader runs before this evaluator is called
(and, for a model with custom classes, runs the model's code whatever
*trust_remote_code* says); the evaluator then audits the loaded model and warns,
in the log and in the report.

Configuration keys (``evaluator_config["mia"]``; unknown keys are an error that
lists them, a bad value an error naming the key and the expected form). The table
is generated from the keys' declarations (:mod:`mlflow_mia.options.schema`),
the same that make the ``mlflow-mia audit`` flags and the MLproject parameters:

"""

from __future__ import annotations

import logging

from mlflow.models.evaluation import EvaluationResult, ModelEvaluator
import pandas as pd

from mlflow_mia.entrypoints.common import unactionable_noise_off
from mlflow_mia.options.schema import key_table
from mlflow_mia.pipeline import audit_for
from mlflow_mia.signals.placement import loading
from mlflow_mia.tracking.descriptions import VERDICT_CODE_METRIC
from mlflow_mia.tracking.headline import rounded

if __doc__:  # the key table, from the declarations
    __doc__ += key_table("mia") + "\n"

__all__ = ["MiaEvaluator"]

log = logging.getLogger(__name__)

#: What the evaluator says, in the log and the report, when mlflow.models.evaluate hands it a loaded model.
PYFUNC_WARNING = (
    "model= was loaded by MLflow's pyfunc loader before the mia evaluator ran: for a model with custom classes that "
    "loader turns on trust_remote_code and runs the code shipped with the model, which the evaluator key "
    "trust_remote_code=False cannot prevent. Audit a model you do not trust with model=None and "
    "evaluator_config={{'mia': {{'target_model': 'models:/...'}}}} (or mlflow-mia {command}), which "
    "loads it without running its code")


def evaluator_target(model, target_model, *, resolve, command: str = "audit --target"):
    """The model an evaluator audits: ``target_model`` (``model=None``), else the ``model`` MLflow loaded.

    Parameters
    ----------
    model : PyFuncModel or None
        What ``mlflow.models.evaluate`` handed over (a ``models:/`` string has already
        been loaded by MLflow's pyfunc loader).
    target_model : str or None
        The ``target_model`` key of the evaluator config.
    resolve : callable
        ``resolve(model_or_uri) -> ResolvedModel`` (the audit's own safe loader).
    command : str
        The CLI command named in the warning (``audit --target`` or ``ner-audit --model``).

    Returns
    -------
    (ResolvedModel, str or None)
        The resolved model and the warning to show in the report (None for ``model=None``).

    Raises
    ------
    ValueError
        Neither or both of ``model`` and ``target_model`` are given.
    """
    if model is None and not target_model:
        raise ValueError("the mia evaluator audits a model: pass model=None with evaluator_config={'mia': "
                         "{'target_model': 'models:/name@alias', ...}} (recommended: loaded without running code "
                         "shipped with it), or model='models:/name@alias'; static predictions cannot be audited")
    if model is not None and target_model:
        raise ValueError(f"the model is given twice (model= and target_model={target_model!r}): pass model=None "
                         "with target_model (recommended), or model= alone")
    if model is None:
        return resolve(target_model), None
    warning = PYFUNC_WARNING.format(command=command)
    log.warning(warning)
    return resolve(model), warning


def _pool_frame(dataset):
    """The evaluation data as one DataFrame, the ``targets`` column put back (anything else as it is: the
    audit's ``load_inputs`` says what it needs)."""
    features = dataset.features_data
    if not isinstance(features, pd.DataFrame):
        return features
    df = features.copy()
    if getattr(dataset, "has_targets", False) and dataset.targets_name and dataset.targets_name not in df:
        df[dataset.targets_name] = dataset.labels_data
    return df


class MiaEvaluator(ModelEvaluator):
    """Membership inference audit of a language model (``model_type="mia"``; ``method`` picks the audit).

    See the module docstring for the configuration keys. The returned
    :class:`~mlflow.models.EvaluationResult` holds:

    - ``metrics``: the headline set the run logs (:mod:`mlflow_mia.tracking.headline`):
      ``{attack}/auc``, ``{attack}/tpr_at_fpr_{alpha}`` with ``_lower`` / ``_upper``, the headline
      attack's ``auc_ci_low`` / ``auc_ci_high``, the gate's deciding metrics, and
      ``mia_verdict_code`` (0 within budget, 1 no evidence of leakage, 2 inconclusive, 3 leaks);
      every metric is in the run's ``tables/metrics.json``;
    - ``artifacts``: ``verdict`` (``.content``: a dict with ``verdict``, ``reason``, ``code``,
      ``gate``, ``budgets`` and the ``deciding`` values), ``report``, ``audit_summary``, the plots and tables.
    """

    name = "mia"

    @classmethod
    def can_evaluate(cls, *, model_type, evaluator_config, **kwargs) -> bool:
        return model_type == "mia"

    def evaluate(self, *, model_type, dataset, run_id, evaluator_config, model=None, extra_metrics=None,
                 custom_artifacts=None, predictions=None, **kwargs) -> EvaluationResult:
        """Audit the target on ``dataset`` and log the results to ``run_id``.

        The audit is ``AUDITS[method]`` (:data:`mlflow_mia.pipeline.AUDITS`; ``method`` defaults to
        ``"mia"``): its options are parsed and its inputs checked before any model loads. The target is
        ``evaluator_config["mia"]["target_model"]`` when ``model`` is None (the recommended form: the
        audit's own loader, which never runs code shipped with the model), else ``model`` as MLflow
        loaded it, with a warning in the log and the report (:data:`PYFUNC_WARNING`).

        Raises
        ------
        ValueError
            Unknown method, invalid configuration, bad inputs (e.g. a missing population set), no
            model (or two), or unsupported ``extra_metrics`` / ``custom_artifacts``.
        """
        if extra_metrics or custom_artifacts:
            raise ValueError("the mia evaluator does not take extra_metrics or custom_artifacts")
        audit = audit_for(evaluator_config)
        settings = audit.parse(evaluator_config, targets=getattr(dataset, "targets_name", None))
        inputs = audit.load_inputs(_pool_frame(dataset), settings)
        audit.gate(settings, inputs)  # a budget the settings or inputs refuse is refused before any model loads
        with loading(getattr(settings.options, "device_map", None)), unactionable_noise_off(loading_bars=False):
            target, warning = evaluator_target(model, settings.options.target_model,
                                               resolve=lambda m: audit.resolve(m, settings),
                                               command=f"{audit.command} {audit.target_flag}")
            # mlflow.models.evaluate logs the returned metrics itself when it knows a model_id;
            # logging them here too would duplicate every metric's history.
            result, artifacts = audit.run(target, inputs, settings, run_id=run_id,
                                          log_metrics=kwargs.get("model_id") is None,
                                          notes=[warning] if warning else [])
        return EvaluationResult(metrics=result_metrics(audit.metrics(result, settings), artifacts,
                                                       prefix=getattr(settings.options, "metric_prefix", "")),
                                artifacts=artifacts, run_id=run_id)


def result_metrics(metrics: dict, artifacts: dict, *, prefix: str = "") -> dict[str, float]:
    """The ``metrics`` of the :class:`EvaluationResult`: the audit's logged metrics, with the verdict.

    ``metrics`` is the audit's headline set (:func:`mlflow_mia.tracking.headline.headline_metrics` for a
    membership audit); where the audit logged a ``verdict`` artifact, its deciding metrics (rounded) and
    ``mia_verdict_code`` (0 within budget, 1 no evidence of leakage, 2 inconclusive, 3 leaks:
    :func:`~mlflow_mia.tracking.descriptions.verdict_code`) are added, so the result holds what the run
    logged. The verdict's words and reason are ``result.artifacts["verdict"].content``.

    >>> from mlflow.models.evaluation.artifacts import JsonEvaluationArtifact
    >>> record = {"verdict": "leaks", "code": 3, "deciding": {"loss/auc": 0.71234567, "loss/auc_ci_low": None}}
    >>> result_metrics({"loss/auc": 0.7123}, {"verdict": JsonEvaluationArtifact(uri="", content=record)})
    {'loss/auc': 0.7123, 'mia_verdict_code': 3.0}
    """
    out = dict(metrics)
    found = artifacts.get(f"{prefix}verdict")
    record = found.content if found is not None else None
    if isinstance(record, dict) and "code" in record:
        out.update({f"{prefix}{k}": rounded(v) for k, v in record.get("deciding", {}).items() if v is not None})
        out[f"{prefix}{VERDICT_CODE_METRIC}"] = float(record["code"])
    return out
