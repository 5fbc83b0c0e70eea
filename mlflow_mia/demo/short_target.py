"""A second version of the demo target, for ``compare`` to compare: the same recipe, a quarter of its training.

The demo registers one target (``<prefix>target@candidate``), so a comparison of its
versions would show one series. :func:`build_short_target` adds **version 2** of the same
registered model, alias ``@short``: the demo's base (``<prefix>base@champion``) fine-tuned
on the same member articles with the target's recipe (batch size, learning rate, schedule,
seed 0) for :data:`SHORT_FRACTION` of its steps. Training length is one of the factors
Mireshghallah et al. 2022 study (Table 4: their Base++, trained 2.5x longer, leaked about as
much as Base). On this demo, whose models are still learning the domain, the shorter training
leaks less (the analysis suite's ``short`` variant, ``docs/results/findings.md``,
``training_length``; on the small demo, likelihood-ratio AUC 0.750 [0.688, 0.811] against the
target's 0.901 [0.860, 0.936]), so the two series differ. It costs a quarter of one fine-tuning
(3 to 5 s on the small demo's single thread) and needs no extra beyond the demo's (DP-SGD
would need opacus, the ``dp`` extra).

The version carries a tag ``mlflow_mia.demo.short_key``: a digest of the split, the base
version and the training settings. A second call finds ``@short`` with that key and trains
nothing; after a rebuilt demo (a new base) it trains a new version.

Training runs in its own MLflow run (``build-<size>-short-target``, experiment
``mlflow-mia``), which records the steps, fraction, per-epoch losses and time (never text).
"""

from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import asdict, replace

import mlflow
from huggingface_hub import ModelCard
from mlflow import MlflowClient

from mlflow_mia.config import record_digest
from mlflow_mia.demo import bbc
from mlflow_mia.demo.build import DEMO_SIZES, REFERENCE_ALIAS, SIZE_TAG, SPLIT_TAG, build_demo
from mlflow_mia.demo.build_steps import ROLE_TAG, log_training
from mlflow_mia.demo.registry import register_model, tagged_version, torch_threads
from mlflow_mia.demo.train import train_mlm
from mlflow_mia.models.resolve import resolve_model
from mlflow_mia.naming import DEFAULT_EXPERIMENT

__all__ = ["build_short_target"]

logger = logging.getLogger(__name__)

SHORT_ALIAS = "short"
#: Share of the demo target's fine-tuning steps the short target trains.
SHORT_FRACTION = 0.25
SHORT_KEY_TAG = "mlflow_mia.demo.short_key"
SHORT_ROLE = "short_target"


def short_steps(size: str, n_train: int, fraction: float = SHORT_FRACTION) -> tuple[int, int]:
    """``(target steps, short steps)``: the demo target's ``ceil(epochs * n_train / batch_size)`` and
    ``max(1, ceil(fraction * that))``.

    Raises
    ------
    ValueError
        Unknown ``size``, or ``fraction`` not in (0, 1).
    """
    if size not in DEMO_SIZES:
        raise ValueError(f"unknown demo size {size!r}; choose from {sorted(DEMO_SIZES)}")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
        raise ValueError(f"fraction must be in (0, 1) (a share of the target's steps), got {fraction!r}")
    finetune = DEMO_SIZES[size].finetune
    steps = max(1, math.ceil(finetune.epochs * n_train / finetune.batch_size))
    return steps, max(1, math.ceil(fraction * steps))


def _card(name: str, size_name: str, steps: int, of: int) -> ModelCard:
    cats = ", ".join(DEMO_SIZES[size_name].split.in_domain)
    return ModelCard(
        "---\nlanguage: en\npipeline_tag: fill-mask\ntags:\n- mlflow-mia\n- membership-inference-demo\n---\n"
        f"# {name} (@{SHORT_ALIAS})\n\nThe mlflow-mia BBC News demo's target trained for less: the base model "
        f"fine-tuned on the member articles ({cats}) with the target's recipe for {steps} of its {of} steps. "
        "Built by `mlflow-mia compare` on the demo, to compare with the full target (@candidate). It exists to "
        "be audited and is not meant for any other use.\n")


def build_short_target(*, size: str = "default", fraction: float = SHORT_FRACTION, force: bool = False,
                       progress: bool = True, data_dir=None, num_threads: int | None = None) -> str:
    """Train and register the short target as a new version of ``<prefix>target`` (alias ``@short``), or find it.

    Builds the demo first when needed (:func:`~mlflow_mia.demo.build.build_demo`).

    Parameters
    ----------
    size : {"default", "small"}
        Demo size (:data:`~mlflow_mia.demo.build.DEMO_SIZES`).
    fraction : float
        Share of the target's fine-tuning steps, in (0, 1).
    force : bool
        Train and register a new version even when ``@short`` holds one with the same key.
    progress : bool
        tqdm bar while training.
    data_dir : path-like, optional
        Passed to :func:`~mlflow_mia.demo.build.build_demo`.
    num_threads : int, optional
        Torch CPU threads while training; ``None`` uses the size's setting.

    Returns
    -------
    str
        ``models:/<prefix>target@short``.

    Raises
    ------
    ValueError
        Unknown ``size`` or a ``fraction`` outside (0, 1).
    """
    short_steps(size, 1, fraction)  # checks size and fraction before any work
    cfg = DEMO_SIZES[size]
    split = bbc.make_split(cfg.split)
    steps, short = short_steps(size, len(split.target_train), fraction)
    build_demo(size=size, progress=progress, data_dir=data_dir, num_threads=num_threads)
    digest = bbc.split_digest(split)
    client = MlflowClient()
    name, base_name = f"{cfg.prefix}target", f"{cfg.prefix}base"
    uri = f"models:/{name}@{SHORT_ALIAS}"
    base_version = str(client.get_model_version_by_alias(base_name, REFERENCE_ALIAS).version)
    settings = asdict(replace(cfg.finetune, steps=short, seed=0))
    key = record_digest({"split": digest, "size": size, "base_version": base_version, "settings": settings})
    if not force and tagged_version(client, name, SHORT_ALIAS, SHORT_KEY_TAG, key) is not None:
        logger.info("%s is registered; skipping training", uri)
        return uri
    base = resolve_model(f"models:/{base_name}/{base_version}", role="reference")
    experiment = client.get_experiment_by_name(DEFAULT_EXPERIMENT)
    experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(DEFAULT_EXPERIMENT)
    started = time.perf_counter()
    with mlflow.start_run(experiment_id=experiment_id, run_name=f"build-{size}-short-target",
                          nested=mlflow.active_run() is not None), torch_threads(num_threads or cfg.num_threads):
        mlflow.set_tags({SIZE_TAG: size, SPLIT_TAG: digest})
        mlflow.log_params({"demo.size": size, "demo.split_digest": digest, "short.fraction": fraction,
                           "short.steps": short, "short.target_steps": steps,
                           "short.base_model": f"models:/{base_name}/{base_version}"})
        model = copy.deepcopy(base.lm.model)
        trained = train_mlm(model, base.lm.tokenizer, split.target_train["text"].tolist(),
                            replace(cfg.finetune, steps=short, seed=0), progress=progress,
                            desc=f"short target ({short} of {steps} steps)")
        log_training(SHORT_ROLE, trained)
        register_model(model, base.lm.tokenizer, name=name, alias=SHORT_ALIAS, artifact_name=SHORT_ROLE,
                       tags={SPLIT_TAG: digest, SIZE_TAG: size, ROLE_TAG: SHORT_ROLE, SHORT_KEY_TAG: key},
                       client=client, model_card=_card(name, size, short, steps),
                       metadata={"mlflow_mia_demo_size": size, "mlflow_mia_demo_role": SHORT_ROLE})
        mlflow.log_param("timing.short_target_s", round(time.perf_counter() - started, 1))
    logger.info("registered %s (%d of the target's %d steps)", uri, short, steps)
    return uri
