"""The steps the masked and the causal demo builds share inside their MLflow run.

:func:`mlflow_mia.demo.build.build_demo` (BERT masked LMs) and
:func:`mlflow_mia.demo.causal_build.build_causal_demo` (GPT-2 causal LMs) differ in their
tokenizer, model and training functions, which they pass in; the order of the steps, what
each logs (numbers and names only, never text) and how the models are registered are
shared here:

1. :func:`reference_tokenizer`: the tokenizer, learnt from the reference articles only;
2. :func:`train_roles`: one model per role, each training's losses logged;
3. :func:`register_roles`: each model registered under its alias with the build's tags.
"""

from __future__ import annotations

import logging
import time

from mlflow_mia.demo.registry import register_model

__all__: list[str] = []

ROLE_TAG = "mlflow_mia.demo.role"
#: ``mlflow_mia.demo.role`` tag values that differ from the role's key.
ROLE_TAG_VALUES = {"reference": "oracle_reference"}


def log_training(role: str, result) -> None:
    """Log a :class:`~mlflow_mia.demo.specs.TrainResult` to the active run: params ``result.<role>.*``
    (all but the time) and the metric ``<role>/train_loss`` per epoch."""
    import mlflow

    mlflow.log_params({k: v for k, v in result.to_params(f"result.{role}").items() if not k.endswith(".seconds")})
    for epoch, loss in enumerate(result.epoch_losses, start=1):
        mlflow.log_metric(f"{role}/train_loss", loss, step=epoch)


def reference_tokenizer(train, split, spec, timings: dict):
    """The build's tokenizer, learnt from the reference articles only (no pool or population text).

    Parameters
    ----------
    train : callable
        ``train(texts, *, vocab_size, model_max_length)`` (:func:`~mlflow_mia.demo.train.train_tokenizer`,
        :func:`~mlflow_mia.demo.causal_train.train_bpe_tokenizer`).
    split : mlflow_mia.demo.bbc.DemoSplit
        Its in-domain then out-of-domain reference sentences are the training text.
    spec : ModelSpec or CausalSpec
        ``vocab_size`` and ``max_position_embeddings`` are read.
    timings : dict
        ``timings["tokenizer"]`` gets the seconds it took.

    Returns
    -------
    transformers.PreTrainedTokenizerFast
    """
    start = time.perf_counter()
    tokenizer = train(split.reference_train["text"].tolist() + split.ood_reference_train["text"].tolist(),
                      vocab_size=spec.vocab_size, model_max_length=spec.max_position_embeddings)
    timings["tokenizer"] = time.perf_counter() - start
    return tokenizer


def train_roles(runs, *, new_model, train, tokenizer, config, progress: bool, timings: dict) -> dict:
    """Train one fresh model per role, in order, and log each training (:func:`log_training`).

    Parameters
    ----------
    runs : iterable of (str, pandas.DataFrame, str)
        ``(role, frame, desc)``: the role's key, its training sentences (``text`` column) and
        its progress label.
    new_model : callable
        ``new_model()`` -> the untrained model of a role (a seeded initialisation or a copy of a base).
    train : callable
        ``train(model, tokenizer, texts, config, *, progress, desc) -> TrainResult``
        (:func:`~mlflow_mia.demo.train.train_mlm`, :func:`~mlflow_mia.demo.causal_train.train_causal`).
    tokenizer : transformers.PreTrainedTokenizerBase
    config : TrainConfig
        The same for every role.
    progress : bool
    timings : dict
        ``timings[f"train_{role}"]`` gets each training's seconds.

    Returns
    -------
    dict of str to model
        ``{role: trained model}`` in the order of ``runs``.
    """
    models = {}
    for role, frame, desc in runs:
        model = new_model()
        result = train(model, tokenizer, frame["text"].tolist(), config, progress=progress, desc=desc)
        log_training(role, result)
        timings[f"train_{role}"] = result.seconds
        models[role] = model
    return models


def register_roles(models: dict, tokenizer, *, names: dict, aliases: dict, tags: dict, metadata: dict, card,
                   client, timings: dict, started: float, log: logging.Logger, task: str = "fill-mask") -> None:
    """Register each model as ``names[role]@aliases[role]``, then log the build's timings as params.

    Parameters
    ----------
    models : dict of str to model
        ``{role: model}``, registered in this order (:func:`~mlflow_mia.demo.registry.register_model`,
        logged under the artifact name ``role``).
    tokenizer : transformers.PreTrainedTokenizerBase
    names, aliases : dict of str to str
        Registered model name and alias of each role.
    tags, metadata : dict
        Version tags and logged metadata of every role (numbers and names only); each version also
        gets ``ROLE_TAG`` (:data:`ROLE_TAG_VALUES` or the role) and ``mlflow_mia_demo_role``.
    card : callable
        ``card(role)`` -> the role's ``huggingface_hub.ModelCard``.
    client : mlflow.MlflowClient
    timings : dict
        Gets ``log_<role>`` (seconds) and ``total`` (since ``started``, a ``time.perf_counter()``
        reading); all are logged as params ``timing.<name>_s``.
    log : logging.Logger
        Logger of the build (one line per registered model).
    task : str
        transformers pipeline task of the logged models.
    """
    import mlflow

    for role, model in models.items():
        start = time.perf_counter()
        uri = register_model(model, tokenizer, name=names[role], alias=aliases[role], artifact_name=role, task=task,
                             tags={**tags, ROLE_TAG: ROLE_TAG_VALUES.get(role, role)}, client=client,
                             model_card=card(role), metadata={**metadata, "mlflow_mia_demo_role": role})
        timings[f"log_{role}"] = time.perf_counter() - start
        log.info("registered %s as @%s", uri, aliases[role])
    timings["total"] = time.perf_counter() - started
    mlflow.log_params({f"timing.{k}_s": round(v, 1) for k, v in timings.items()})
