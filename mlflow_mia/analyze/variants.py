"""Train, register and find the target variants of ``mlflow-mia analyze``.

Every variant starts from the demo's registered base model (``<prefix>base@champion``)
and its tokenizer, and is fine-tuned on the demo's member articles
(``DemoSplit.target_train``) with the demo target's recipe except for the one change
the finding studies (:class:`~mlflow_mia.analyze.plan.Variant`):

- ``short``: ``short_fraction`` of the target's fine-tuning steps (Base vs Base++);
- ``large``: a deeper model (``large_layers``) trained from scratch on the base's data
  with the base recipe, then fine-tuned like the target (Base vs Large);
- ``names``: each member sentence with its article's synthetic person name prepended
  (:func:`insert_names`; the paper's Base-b, where each patient's name is prepended
  to every note);
- ``dp``: DP-SGD at a target epsilon (:func:`mlflow_mia.demo.dp.train_mlm_dp`).

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

__all__ = ["VARIANT_ALIAS", "VARIANT_KEY_TAG", "find_variant", "insert_names", "names_pool", "train_variant",
           "training_settings", "variant_card", "variant_key", "variant_name"]

log = logging.getLogger(__name__)

VARIANT_ALIAS = "candidate"
VARIANT_KEY_TAG = "mia.analyze.variant_key"
DP_TAGS = ("mia.analyze.dp_epsilon", "mia.analyze.dp_delta")
NAMES_SEED = 0  # seed of the inserted names: the training texts and the audited pool must agree


def insert_names(frame, *, seed: int = 0, group_column: str = "article_id", text_column: str = "text"):
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
    for group in sorted(set(frame[group_column].astype(str))):
        names[group] = f"{fake.first_name()} {fake.last_name()}"
    out = frame.copy()
    out[text_column] = [f"{names[str(g)]} {t}" for g, t in zip(frame[group_column], frame[text_column])]
    return out, names


def names_pool(pool, target_train, *, seed: int = NAMES_SEED, label_column: str = "is_member"):
    """The demo pool with each member sentence as the ``names`` variant saw it in training.

    Members get their article's inserted name (:func:`insert_names` on ``target_train``,
    matched by ``sample_id``); non-members are left as they are, as in the paper, where the
    held-out notes carry no names.

    Raises
    ------
    ValueError
        A member sentence that is not in ``target_train``.
    """
    named, _ = insert_names(target_train, seed=seed)
    by_id = dict(zip(named["sample_id"], named["text"]))
    members = pool[label_column] == 1
    missing = set(pool.loc[members, "sample_id"]) - set(by_id)
    if missing:
        raise ValueError(f"{len(missing)} member sentences of the pool are not in the target's training data")
    out = pool.copy()
    out.loc[members, "text"] = [by_id[i] for i in pool.loc[members, "sample_id"]]
    return out


def variant_name(prefix: str, variant) -> str:
    """Registered name of a variant: ``<prefix>analyze-<name>``."""
    return f"{prefix}analyze-{variant.name}"


_KIND_TEXT = {
    "short": "fine-tuned on the member articles for a shorter schedule than the demo target",
    "large": "a deeper model trained from scratch on the base data, then fine-tuned on the member articles",
    "names": "fine-tuned on the member articles with a synthetic person name prepended to each sentence",
    "dp": "fine-tuned on the member articles with DP-SGD",
}


def variant_card(name: str, variant):
    """A local model card for a variant (passing one also keeps MLflow from asking the Hugging Face hub)."""
    from huggingface_hub import ModelCard

    eps = f" at target epsilon {variant.epsilon:g}" if variant.epsilon is not None else ""
    return ModelCard(
        "---\nlanguage: en\npipeline_tag: fill-mask\ntags:\n- mlflow-mia\n- membership-inference-demo\n---\n"
        f"# {name}\n\nA target variant of the mlflow-mia BBC News demo, built by `mlflow-mia analyze`: "
        f"{_KIND_TEXT[variant.kind]}{eps}. It exists to be audited and is not meant for any other use.\n")


def variant_key(variant, *, base_uri: str, split_digest: str, settings: dict) -> str:
    """16-hex digest of what a variant's weights depend on: base version, split, training settings."""
    from mlflow_mia.config import record_digest

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


def training_settings(variant, demo_size, size, n_train: int) -> dict:
    """The training recipe of a variant (part of its key and logged as params).

    ``n_train`` is the number of member training sentences: the demo target's steps are
    ``ceil(epochs * n_train / batch_size)``, and every non-DP variant but ``short`` takes as many.
    """
    steps = max(1, math.ceil(demo_size.finetune.epochs * n_train / demo_size.finetune.batch_size))
    out = {"finetune": asdict(replace(demo_size.finetune, steps=steps))}
    if variant.kind == "short":
        out["finetune"]["steps"] = max(1, math.ceil(size.short_fraction * steps))
    elif variant.kind == "large":
        out["model"] = asdict(replace(demo_size.model, num_layers=size.large_layers))
        out["base"] = asdict(demo_size.base)
    elif variant.kind == "names":
        out["names_seed"] = NAMES_SEED
    elif variant.kind == "dp":
        out["finetune"] = asdict(replace(demo_size.finetune, steps=None, epochs=size.dp_epochs,
                                         batch_size=size.dp_batch_size, learning_rate=size.dp_learning_rate))
        out["dp"] = {"target_epsilon": variant.epsilon, "delta": size.dp_delta, "max_grad_norm": 1.0}
    return out


def train_variant(variant, base_lm, split, settings: dict, demo_size, *, progress: bool = True):
    """Train one variant from the base model; log its training to the active run.

    Parameters
    ----------
    variant : Variant
    base_lm : MaskedLM
        The demo's base model and tokenizer (left unchanged: a copy is trained).
    split : mlflow_mia.demo.bbc.DemoSplit
    settings : dict
        :func:`training_settings` of the variant.
    demo_size : DemoSize

    Returns
    -------
    (transformers model, dict of str to float)
        The trained model and the metrics to log (``dp/epsilon`` and ``dp/delta`` for DP).
    """
    import mlflow

    from mlflow_mia.demo.train import ModelSpec, TrainConfig, new_model, train_mlm

    tokenizer = base_lm.tokenizer
    finetune = TrainConfig(**settings["finetune"])
    texts = split.target_train["text"].tolist()
    metrics: dict[str, float] = {}
    if variant.kind == "large":
        model = new_model(tokenizer, ModelSpec(**settings["model"]), seed=demo_size.seed)
        result = train_mlm(model, tokenizer, split.base_train["text"].tolist(), TrainConfig(**settings["base"]),
                           progress=progress, desc="larger base (out-of-domain)")
        metrics["train/base_final_loss"] = result.epoch_losses[-1]
    else:
        model = copy.deepcopy(base_lm.model)
    if variant.kind == "names":
        texts = insert_names(split.target_train, seed=settings["names_seed"])[0]["text"].tolist()
    if variant.kind == "dp":
        from mlflow_mia.demo.dp import DPConfig, train_mlm_dp

        dp = train_mlm_dp(model, tokenizer, texts, finetune, DPConfig(**settings["dp"]), progress=progress,
                          desc=f"target, DP-SGD eps {variant.epsilon:g}")
        mlflow.log_params(dp.to_params())
        metrics.update(dp.metrics())
        result = dp.train
    else:
        result = train_mlm(model, tokenizer, texts, finetune, progress=progress, desc=f"target ({variant.name})")
    metrics["train/final_loss"] = result.epoch_losses[-1]
    metrics["train/steps"] = result.steps
    metrics["train/seconds"] = result.seconds
    model.eval()
    return model, metrics
