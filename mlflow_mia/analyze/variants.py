"""Train, register and find the target variants of ``mlflow-mia analyze``.

Every variant starts from the demo's registered base model (``<prefix>base@champion``)
and its tokenizer (or from another variant, its ``start``), and is fine-tuned on the
demo's member articles (``DemoSplit.target_train``) with the demo target's recipe at the
suite's seed, except for the one change the finding studies
(:class:`~mlflow_mia.analyze.plan.Variant`):

- ``plain``: nothing changed but the seed (the demo's target is seed 0);
- ``short``: ``short_fraction`` of the target's fine-tuning steps (Base vs Base++);
- ``large_base``: a deeper model (``large_layers``) trained from scratch on the base's
  data with the base recipe at ``large_lr_scale`` times its learning rate;
  ``large_reference`` and ``large``: that base fine-tuned like the demo's reference and
  target (same steps, the scaled learning rate). Each size thus has its own base and
  its own reference (Base vs Large);
- ``names``: each member sentence with its article's synthetic person name prepended
  (:func:`insert_names`; the paper's Base-b, where each patient's name is prepended
  to every note). The audited pool and population carry names in the same slot
  (:func:`names_frames`: fresh names for non-members and population), so the audit
  measures memorization of a member's name, not the presence of a name;
- ``dp``: DP-SGD at a target epsilon, or with a fixed noise multiplier (0: the
  clip-only control), embeddings frozen (:func:`mlflow_mia.demo.dp.train_mlm_dp`).

A variant is registered as ``<prefix>analyze-<name>@candidate`` with a version tag
``mia.analyze.variant_key``: a digest of the base version, the split and the training
settings. :func:`find_variant` returns an existing version with the same key, so a
resumed suite trains nothing twice.
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import asdict, replace
from mlflow_mia.config import record_digest
from mlflow_mia.demo.dp import DPConfig, train_mlm_dp
from mlflow_mia.demo.train import ModelSpec, TrainConfig, new_model, train_mlm
from mlflow_mia.metrics.group_privacy import group_privacy

__all__ = ["insert_names", "names_frames", "names_pool"]

log = logging.getLogger(__name__)

VARIANT_ALIAS = "candidate"
VARIANT_KEY_TAG = "mia.analyze.variant_key"
DP_TAGS = ("mia.analyze.dp_epsilon", "mia.analyze.dp_delta")
NAMES_SEED = 0  # seed of the inserted names: the training texts and the audited pool must agree


def insert_names(frame, *, seed: int = 0, group_column: str = "article_id", text_column: str = "text",
                 exclude=()):
    """Prepend one synthetic person's name (``faker``) to every text, the same name per group.

    The paper's Base-b (Mireshghallah et al. 2022, Sec. 4.3.1, Table 6): each patient's
    first and last name prepended to each of their training samples. Here the group is
    the article.

    Parameters
    ----------
    frame : pandas.DataFrame
        With ``text_column`` and ``group_column``.
    seed : int
        Seed of the name generator: same seed and groups -> same names.
    exclude : collection of str
        Names not to give (e.g. the members' names, when naming non-members).

    Returns
    -------
    (pandas.DataFrame, dict of str to str)
        A copy of ``frame`` whose texts read ``"<First> <Last> <text>"``, and the name
        given to each group (in memory only: never logged).

    Raises
    ------
    ImportError
        ``faker`` is not installed (``pip install 'mlflow-mia[demo]'``).
    """
    try:
        from faker import Faker
    except ImportError as err:
        raise ImportError("name insertion needs faker: pip install 'mlflow-mia[demo]'") from err
    fake = Faker("en_US")
    fake.seed_instance(seed)
    names: dict[str, str] = {}
    exclude = set(exclude)
    for group in sorted(set(frame[group_column].astype(str))):
        name = f"{fake.first_name()} {fake.last_name()}"
        while name in exclude:
            name = f"{fake.first_name()} {fake.last_name()}"
        names[group] = name
    out = frame.copy()
    out[text_column] = [f"{names[str(g)]} {t}" for g, t in zip(frame[group_column], frame[text_column])]
    return out, names


def names_frames(pool, population, target_train, *, seed: int = NAMES_SEED, label_column: str = "is_member"):
    """The demo pool and population with a synthetic name prepended to every sentence.

    Members get their article's name as the ``names`` variant saw it in training
    (:func:`insert_names` on ``target_train``, matched by ``sample_id``). Non-member and
    population articles get fresh names (another seed; none of the members' names), one
    per article, in the same slot. Every audited sentence then starts with a name, so a
    difference between members and non-members is the memorized name, not the presence
    of a name.

    Returns
    -------
    (pandas.DataFrame, pandas.DataFrame)
        Copies of ``pool`` and ``population`` with named texts.

    Raises
    ------
    ValueError
        A member sentence that is not in ``target_train``.
    """
    named, member_names = insert_names(target_train, seed=seed)
    by_id = dict(zip(named["sample_id"], named["text"]))
    members = pool[label_column] == 1
    missing = set(pool.loc[members, "sample_id"]) - set(by_id)
    if missing:
        raise ValueError(f"{len(missing)} member sentences of the pool are not in the target's training data")
    out = pool.copy()
    out.loc[members, "text"] = [by_id[i] for i in pool.loc[members, "sample_id"]]
    used = set(member_names.values())
    fresh_pool, names = insert_names(pool.loc[~members], seed=seed + 1, exclude=used)
    out.loc[~members, "text"] = fresh_pool["text"].to_numpy()
    used |= set(names.values())
    fresh_population, _ = insert_names(population, seed=seed + 2, exclude=used)
    return out, fresh_population


def names_pool(pool, target_train, *, seed: int = NAMES_SEED, label_column: str = "is_member"):
    """The pool of :func:`names_frames` alone (members: their training names; non-members: fresh names)."""
    empty = pool.iloc[:0].drop(columns=[label_column])
    return names_frames(pool, empty, target_train, seed=seed, label_column=label_column)[0]


def dp_group_size(split) -> int:
    """The most training records of one article in a DP variant's training data: k of group privacy.

    A DP variant trains on ``split.target_train``, one record per sentence, and membership
    was decided per article, so a guarantee per article must cover the largest one.

    Parameters
    ----------
    split : mlflow_mia.demo.bbc.DemoSplit

    Returns
    -------
    int
        Sentences of the member article with the most sentences (the default demo: 251).
    """
    return int(split.target_train.groupby("article_id").size().max())


def dp_group_metrics(epsilon: float, delta: float, group_size: int) -> dict[str, float]:
    """The DP metrics per article: ``dp/max_group_size``, ``dp/group_epsilon``, ``dp/group_delta``.

    Parameters
    ----------
    epsilon, delta : float
        The accountant's per-record (sentence) guarantee; an infinite epsilon (no noise)
        gives the group size only.
    group_size : int
        :func:`dp_group_size`.

    Returns
    -------
    dict of str to float
        ``dp/group_epsilon`` (nats) and ``dp/group_delta`` by group privacy
        (:func:`mlflow_mia.metrics.group_privacy.group_privacy`: k eps, k e^((k - 1) eps) delta);
        ``dp/group_delta`` is capped at 1 (a delta of 1 or more guarantees nothing).
    """
    out = {"dp/max_group_size": float(group_size)}
    if math.isfinite(epsilon):
        g = group_privacy(epsilon, delta, group_size=int(group_size))
        out.update({"dp/group_epsilon": g.epsilon, "dp/group_delta": min(g.delta, 1.0)})
    return out


def variant_name(prefix: str, variant) -> str:
    """Registered name of a variant: ``<prefix>analyze-<name>``."""
    return f"{prefix}analyze-{variant.name}"


_KIND_TEXT = {
    "plain": "fine-tuned on the member articles with the demo target's recipe at another seed",
    "large_base": "a deeper base model trained from scratch on the general (out-of-domain) articles",
    "large_reference": "the deeper base fine-tuned on the in-domain reference articles",
    "short": "fine-tuned on the member articles for a shorter schedule than the demo target",
    "large": "a deeper model trained from scratch on the base data, then fine-tuned on the member articles",
    "names": "fine-tuned on the member articles with a synthetic person name prepended to each sentence",
    "dp": "fine-tuned on the member articles with DP-SGD",
}


def variant_card(name: str, variant):
    """A local model card for a variant (passing one also keeps MLflow from asking the Hugging Face hub)."""
    from huggingface_hub import ModelCard

    eps = f" at target epsilon {variant.epsilon:g}" if variant.epsilon is not None else (
        f" with noise multiplier {variant.noise_multiplier:g}" if variant.noise_multiplier is not None else "")
    return ModelCard(
        "---\nlanguage: en\npipeline_tag: fill-mask\ntags:\n- mlflow-mia\n- membership-inference-demo\n---\n"
        f"# {name}\n\nA target variant of the mlflow-mia BBC News demo, built by `mlflow-mia analyze`: "
        f"{_KIND_TEXT[variant.kind]}{eps}. It exists to be audited and is not meant for any other use.\n")


def variant_key(variant, *, base_uri: str, split_digest: str, settings: dict) -> str:
    """16-hex digest of what a variant's weights depend on: base version, split, training settings."""
    return record_digest({"variant": asdict(variant), "base": base_uri, "split": split_digest, "settings": settings})


def find_variant(client, name: str, key: str):
    """The registered version of ``name`` whose variant key is ``key`` (newest first), or None."""
    from mlflow.exceptions import MlflowException

    try:
        versions = client.search_model_versions(f"name = '{name}'")
    except MlflowException:
        return None
    for mv in sorted(versions, key=lambda v: int(v.version), reverse=True):
        if (mv.tags or {}).get(VARIANT_KEY_TAG) == key:
            return mv
    return None


def training_settings(variant, demo_size, size, n_train: int, *, seed: int = 0) -> dict:
    """The training recipe of a variant at a seed (part of its key and logged as params).

    ``n_train`` is the number of member training sentences: the demo target's steps are
    ``ceil(epochs * n_train / batch_size)``, and every non-DP variant but ``short`` takes
    as many. ``seed`` sets the fine-tuning seed (batch order, masks, dropout, DP noise) of
    seeded variants; the others train at seed 0.
    """
    seed = seed if variant.seeded else 0
    steps = max(1, math.ceil(demo_size.finetune.epochs * n_train / demo_size.finetune.batch_size))
    out = {"finetune": asdict(replace(demo_size.finetune, steps=steps, seed=seed))}
    if variant.kind == "short":
        out["finetune"]["steps"] = max(1, math.ceil(size.short_fraction * steps))
    elif variant.kind in ("large_base", "large_reference", "large"):
        out["finetune"]["learning_rate"] = demo_size.finetune.learning_rate * size.large_lr_scale
        if variant.kind == "large_base":
            out = {"model": asdict(replace(demo_size.model, num_layers=size.large_layers)),
                   "base": asdict(replace(demo_size.base, learning_rate=demo_size.base.learning_rate
                                          * size.large_lr_scale))}
    elif variant.kind == "names":
        out["names_seed"] = NAMES_SEED
    elif variant.kind == "dp":
        out["finetune"] = asdict(replace(demo_size.finetune, steps=None, epochs=size.dp_epochs, seed=seed,
                                         batch_size=size.dp_batch_size, learning_rate=size.dp_learning_rate))
        out["dp"] = {"target_epsilon": variant.epsilon, "noise_multiplier": variant.noise_multiplier,
                     "delta": size.dp_delta, "max_grad_norm": 1.0, "freeze": list(size.dp_freeze)}
    return out


def train_variant(variant, start_lm, split, settings: dict, demo_size, *, progress: bool = True):
    """Train one variant from its starting model; log its training to the active run.

    Parameters
    ----------
    variant : Variant
    start_lm : MaskedLM
        The model it starts from (the demo's base, or the larger base) and its tokenizer
        (left unchanged: a copy is trained; a ``large_base`` only takes the tokenizer).
    split : mlflow_mia.demo.bbc.DemoSplit
    settings : dict
        :func:`training_settings` of the variant.
    demo_size : DemoSize

    Returns
    -------
    (transformers model, dict of str to float)
        The trained model and the metrics to log (for DP: ``dp/epsilon`` and ``dp/delta``
        per sentence, and per article :func:`dp_group_metrics`).
    """
    import mlflow

    tokenizer = start_lm.tokenizer
    metrics: dict[str, float] = {}
    if variant.kind == "large_base":
        model = new_model(tokenizer, ModelSpec(**settings["model"]), seed=demo_size.seed)
        result = train_mlm(model, tokenizer, split.base_train["text"].tolist(), TrainConfig(**settings["base"]),
                           progress=progress, desc="larger base (out-of-domain)")
    else:
        model = copy.deepcopy(start_lm.model)
        finetune = TrainConfig(**settings["finetune"])
        data = split.reference_train if variant.kind == "large_reference" else split.target_train
        texts = data["text"].tolist()
        if variant.kind == "names":
            texts = insert_names(split.target_train, seed=settings["names_seed"])[0]["text"].tolist()
        if variant.kind == "dp":
            dp_settings = {**settings["dp"], "freeze": tuple(settings["dp"]["freeze"])}
            dp = train_mlm_dp(model, tokenizer, texts, finetune, DPConfig(**dp_settings), progress=progress,
                              desc=f"target, DP-SGD ({variant.name})")
            mlflow.log_params(dp.to_params())
            metrics.update(dp.metrics())
            metrics.update(dp_group_metrics(dp.epsilon, dp.delta, dp_group_size(split)))
            result = dp.train
        else:
            result = train_mlm(model, tokenizer, texts, finetune, progress=progress, desc=f"{variant.name}")
    metrics["train/final_loss"] = result.epoch_losses[-1]
    metrics["train/steps"] = result.steps
    metrics["train/seconds"] = result.seconds
    model.eval()
    return model, metrics
