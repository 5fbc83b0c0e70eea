"""Realistic reference models for the BBC News demo: the public base and k shadow models.

The demo's ``<prefix>reference@champion`` is an **oracle reference**: the same base, the
same recipe and the same distribution as the target, on disjoint articles. An auditor
rarely has such a model. This module adds the references an auditor can have:

- the **public base** (``<prefix>base@champion``, registered by
  :func:`mlflow_mia.demo.build.build_demo`): the pretrained checkpoint the target was
  fine-tuned from, the common real case;
- ``k`` **shadow references** (``<prefix>shadow-0@champion`` ... ``shadow-<k-1>``): the
  base fine-tuned with the target's recipe (same number of steps, batch size, learning
  rate and schedule) on a random half, by article, of public in-domain text disjoint from
  the audited pool and the population (the demo's reference-training articles,
  ``DemoSplit.reference_train``). "Shadow model" is the word of LiRA (Carlini et al.
  2022, Sec. IV) and RMIA (Zarifzadeh et al. 2024, Sec. 3); "reference model" is this
  project's (and Mireshghallah et al. 2022's). Every shadow model here is trained
  *without* every pool sample, so they suit the offline attacks only.

Shadow ``i`` draws its half of the articles with ``numpy.random.default_rng([split seed,
SHADOW_SEED_OFFSET, i])`` and trains with seed ``i + 1`` (masks, batch order, dropout;
the target and the oracle reference use seed 0). :func:`build_references` trains them on
first use and registers each with a version tag ``mlflow_mia.demo.shadow_key``: a digest
of the split, the base version, the article half and the training settings. A second
call finds every alias with its key and trains nothing.

Training goes through :func:`mlflow_mia.demo.train.train_mlm`, in one MLflow run
(``build-<size>-references`` in experiment ``mlflow-mia``, :data:`mlflow_mia.naming.DEFAULT_EXPERIMENT`,
shared with the audits) that records the seeds, article counts, settings, per-epoch losses
and timings (never text).
"""

from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from mlflow_mia.config import record_digest
from mlflow_mia.demo import bbc
from mlflow_mia.demo.build import (DEMO_SIZES, REFERENCE_ALIAS, SIZE_TAG, SPLIT_TAG, build_demo,
                                   demo_spec)
from mlflow_mia.demo.build_steps import ROLE_TAG
from mlflow_mia.demo.registry import register_model, tagged_version, torch_threads
from mlflow_mia.demo.train import train_mlm
from mlflow_mia.naming import DEFAULT_EXPERIMENT
from mlflow_mia.tracking.runs import outside_project_run
from mlflow_mia.models.resolve import resolve_model

__all__ = ["build_references", "expand_demo_references"]

logger = logging.getLogger(__name__)

SHADOW_COUNT = 4
SHADOW_KEY_TAG = "mlflow_mia.demo.shadow_key"
SHADOW_INDEX_TAG = "mlflow_mia.demo.shadow_index"
SHADOW_ROLE = "shadow_reference"
#: Second entry of the seed sequence of the article halves (keeps them apart from the split's own draws).
SHADOW_SEED_OFFSET = 7919

#: ``compare --reference`` words for the demo's references (expanded by :func:`expand_demo_references`).
DEMO_REFERENCE_WORDS = {
    "demo:oracle": "the oracle reference <prefix>reference@champion (same recipe, in-domain, disjoint articles)",
    "demo:base": "the public base <prefix>base@champion the target was fine-tuned from",
    "demo:ood": "the out-of-domain reference <prefix>reference-ood@champion",
    "demo:shadows": "the k shadow references <prefix>shadow-0..k-1@champion (built on first use)",
    "demo:shadow-<i>": "one shadow reference (built on first use)",
}


@dataclass(frozen=True)
class ReferenceSpec:
    """The demo's references by kind (registry URIs with aliases).

    Attributes
    ----------
    oracle_uri : str
        ``models:/<prefix>reference@champion``: same base, recipe and distribution as the target.
    base_uri : str
        ``models:/<prefix>base@champion``: the public checkpoint the target was fine-tuned from.
    shadow_uris : tuple of str
        ``models:/<prefix>shadow-<i>@champion``, ``i = 0..k-1``.
    size : str
    run_id : str or None
        The run that trained the shadow models (None when every one was already registered).
    """

    oracle_uri: str
    base_uri: str
    shadow_uris: tuple
    size: str = "default"
    run_id: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def shadow_names(size: str = "default", count: int = SHADOW_COUNT) -> list[str]:
    """Registered names of the shadow references: ``<prefix>shadow-0`` ... ``<prefix>shadow-<count-1>``.

    Raises
    ------
    ValueError
        Unknown ``size``, or ``count`` not a positive int.
    """
    if size not in DEMO_SIZES:
        raise ValueError(f"unknown demo size {size!r}; choose from {sorted(DEMO_SIZES)}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive int (the number of shadow references), got {count!r}")
    return [f"{DEMO_SIZES[size].prefix}shadow-{i}" for i in range(count)]


def shadow_uris(size: str = "default", count: int = SHADOW_COUNT) -> list[str]:
    """``models:/<prefix>shadow-<i>@champion`` for ``i < count`` (nothing is checked or built)."""
    return [f"models:/{name}@{REFERENCE_ALIAS}" for name in shadow_names(size, count)]


def shadow_halves(split: bbc.DemoSplit, count: int = SHADOW_COUNT) -> list:
    """The training sentences of each shadow reference: a seeded random half of the reference articles.

    Parameters
    ----------
    split : mlflow_mia.demo.bbc.DemoSplit
        Its ``reference_train`` (every sentence of the in-domain reference articles,
        disjoint by article and text from the pool and the population) is halved.
    count : int
        Number of shadow references.

    Returns
    -------
    list of pandas.DataFrame
        ``count`` frames (columns of ``reference_train``); frame ``i`` holds every sentence
        of ``floor(n_articles / 2)`` articles drawn with
        ``default_rng([split.config.seed, SHADOW_SEED_OFFSET, i])``. Same split and ``i``
        -> same half, whatever ``count`` is.

    Notes
    -----
    LiRA (Carlini et al. 2022, Sec. IV-B) and RMIA (Zarifzadeh et al. 2024, Sec. 3) train
    each shadow model on a random half of a data pool. The pool here is the demo's
    reference articles, and the unit is the article (the demo's membership unit), so a
    shadow model sees all or none of an article's sentences.
    """
    frame = split.reference_train
    articles = np.array(sorted(frame["article_id"].astype(str).unique()))
    if len(articles) < 2:
        raise ValueError(f"the reference articles ({len(articles)}) cannot be halved: the split needs at least 2")
    halves = []
    for i in range(count):
        rng = np.random.default_rng([split.config.seed, SHADOW_SEED_OFFSET, i])
        chosen = set(articles[rng.permutation(len(articles))[:len(articles) // 2]])
        halves.append(frame.loc[frame["article_id"].astype(str).isin(chosen)].reset_index(drop=True))
    return halves


def _settings(cfg, n_target: int, index: int) -> dict:
    """Training settings of shadow ``index``: the target's recipe and steps, its own seed."""
    steps = max(1, math.ceil(cfg.finetune.epochs * n_target / cfg.finetune.batch_size))
    return asdict(replace(cfg.finetune, steps=steps, seed=index + 1))


def _shadow_key(*, digest: str, size: str, base_version: str, index: int, articles: list, settings: dict) -> str:
    return record_digest({"split": digest, "size": size, "base_version": base_version, "index": index,
                          "articles": record_digest(articles), "settings": settings})


def _card(name: str, index: int, size, n_articles: int, steps: int):
    from huggingface_hub import ModelCard

    return ModelCard(
        "---\nlanguage: en\npipeline_tag: fill-mask\ntags:\n- mlflow-mia\n- membership-inference-demo\n---\n"
        f"# {name}\n\nShadow reference {index} of the mlflow-mia BBC News demo: the demo's base model fine-tuned "
        f"with the target's recipe ({steps} steps) on a random half ({n_articles} articles) of in-domain "
        f"({', '.join(size.split.in_domain)}) articles disjoint from the audited pool. Built by "
        "`mlflow-mia build-demo --references`. It exists to audit the demo target and is not meant for any "
        "other use.\n")


def _start_run(client, size: str):
    import mlflow

    experiment = client.get_experiment_by_name(DEFAULT_EXPERIMENT)
    experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(DEFAULT_EXPERIMENT)
    return mlflow.start_run(experiment_id=experiment_id, run_name=f"build-{size}-references",
                            nested=mlflow.active_run() is not None)


def build_references(*, size: str = "default", count: int = SHADOW_COUNT, force: bool = False,
                     progress: bool = True, data_dir=None, num_threads: int | None = None) -> ReferenceSpec:
    """Train and register the demo's shadow references, or find them built; build the demo first if needed.

    Parameters
    ----------
    size : {"default", "small"}
        Demo size (:data:`mlflow_mia.demo.build.DEMO_SIZES`).
    count : int
        Shadow references ``0..count-1`` (default 4, the issue's k).
    force : bool
        Train and register new versions even when matching ones exist.
    progress : bool
        tqdm bars while training.
    data_dir : path-like, optional
        Passed to :func:`~mlflow_mia.demo.build.build_demo`.
    num_threads : int, optional
        Torch CPU threads while training; ``None`` uses the size's setting.

    Returns
    -------
    ReferenceSpec
        The oracle, base and shadow URIs.

    Raises
    ------
    ValueError
        Unknown ``size`` or a bad ``count``.

    Notes
    -----
    Each shadow model takes as long to train as the oracle reference (same steps); on the
    default demo the four took the time given in ``docs/results/demo_sizing.md``.
    """
    import mlflow
    from mlflow import MlflowClient

    names = shadow_names(size, count)
    cfg = DEMO_SIZES[size]
    spec = build_demo(size=size, progress=progress, data_dir=data_dir, num_threads=num_threads)
    split = bbc.make_split(cfg.split)
    digest = bbc.split_digest(split)
    client = MlflowClient()
    base_name = f"{cfg.prefix}base"
    base_version = str(client.get_model_version_by_alias(base_name, REFERENCE_ALIAS).version)
    halves = shadow_halves(split, count)
    plan = []
    for index, (name, half) in enumerate(zip(names, halves)):
        settings = _settings(cfg, len(split.target_train), index)
        articles = sorted(half["article_id"].astype(str).unique())
        key = _shadow_key(digest=digest, size=size, base_version=base_version, index=index, articles=articles,
                          settings=settings)
        found = None if force else tagged_version(client, name, REFERENCE_ALIAS, SHADOW_KEY_TAG, key)
        plan.append((index, name, half, settings, key, len(articles), found))
    result = ReferenceSpec(oracle_uri=spec.reference_uri, base_uri=spec.base_uri,
                           shadow_uris=tuple(shadow_uris(size, count)), size=size)
    missing = [p for p in plan if p[-1] is None]
    if not missing:
        logger.info("the %d shadow references of demo %r are registered; skipping training", count, size)
        return result
    base = resolve_model(f"models:/{base_name}/{base_version}", role="reference")
    started = time.perf_counter()
    with _start_run(client, size) as run, torch_threads(num_threads or cfg.num_threads):
        mlflow.set_tags({SIZE_TAG: size, SPLIT_TAG: digest})
        mlflow.log_params({"demo.size": size, "demo.split_digest": digest, "shadow.count": count,
                           "shadow.base_model": f"models:/{base_name}/{base_version}",
                           "shadow.seed_offset": SHADOW_SEED_OFFSET, "shadow.half_unit": "article"})
        for index, name, half, settings, key, n_articles, _ in missing:
            model = copy.deepcopy(base.lm.model)
            trained = train_mlm(model, base.lm.tokenizer, half["text"].tolist(), replace(cfg.finetune, **settings),
                                progress=progress, desc=f"shadow reference {index}")
            role = f"shadow_{index}"
            mlflow.log_params({f"{role}.articles": n_articles, f"{role}.sentences": len(half),
                               f"{role}.train_seed": settings["seed"], f"{role}.steps": trained.steps,
                               f"{role}.train_s": round(trained.seconds, 1)})
            for epoch, loss in enumerate(trained.epoch_losses, start=1):
                mlflow.log_metric(f"{role}/train_loss", loss, step=epoch)
            register_model(model, base.lm.tokenizer, name=name, alias=REFERENCE_ALIAS, artifact_name=role,
                           tags={SPLIT_TAG: digest, SIZE_TAG: size, ROLE_TAG: SHADOW_ROLE, SHADOW_KEY_TAG: key,
                                 SHADOW_INDEX_TAG: index},
                           client=client, model_card=_card(name, index, cfg, n_articles, trained.steps),
                           metadata={"mlflow_mia_demo_size": size, "mlflow_mia_demo_role": SHADOW_ROLE})
            logger.info("registered %s@%s", name, REFERENCE_ALIAS)
        mlflow.log_param("timing.shadow_total_s", round(time.perf_counter() - started, 1))
    return replace(result, run_id=run.info.run_id)


def expand_demo_references(uris, size: str = "default", *, progress: bool = True) -> list:
    """Replace the words of :data:`DEMO_REFERENCE_WORDS` in a reference list by registry URIs.

    ``demo:oracle``, ``demo:base`` and ``demo:ood`` map to the demo's registered models;
    ``demo:shadows`` to the :data:`SHADOW_COUNT` shadow references and ``demo:shadow-<i>``
    to one (both built on first use by :func:`build_references`, in a run of their own
    even under ``mlflow run``). Other entries pass through unchanged, in order.

    Raises
    ------
    ValueError
        An unknown ``demo:`` word (the message lists the known ones).
    """
    spec = demo_spec(size)
    fixed = {"demo:oracle": spec.reference_uri, "demo:base": spec.base_uri, "demo:ood": spec.ood_reference_uri}
    out, shadows = [], None
    for uri in uris:
        word = uri.strip().lower() if isinstance(uri, str) else None
        if word is None or not word.startswith("demo:"):
            out.append(uri)
        elif word in fixed:
            out.append(fixed[word])
        elif word == "demo:shadows" or (word.startswith("demo:shadow-") and word[12:].isdigit()):
            needed = SHADOW_COUNT if word == "demo:shadows" else int(word[12:]) + 1
            if shadows is None or len(shadows) < needed:
                # Under ``mlflow run`` the audit's run is in MLFLOW_RUN_ID: the training run must not resume it.
                with outside_project_run():
                    shadows = list(build_references(size=size, count=needed, progress=progress).shadow_uris)
            out += shadows[:SHADOW_COUNT] if word == "demo:shadows" else [shadows[int(word[12:])]]
        else:
            raise ValueError(f"unknown demo reference {uri!r}; use one of {', '.join(DEMO_REFERENCE_WORDS)} "
                             "or a model URI")
    return out
