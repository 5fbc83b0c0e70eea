"""The canary demo: the BBC demo's base model fine-tuned on its member sentences with canaries planted.

:func:`build_canary_demo` builds (on first use; reused after) two targets from the
demo's base model (:mod:`mlflow_mia.demo.build`), trained on the same data: the demo
target's training sentences plus the included canaries' copies
(:func:`mlflow_mia.canaries.insert`) of a set of about 1,000 canaries
(:func:`mlflow_mia.canaries.make_canaries`: the default secret-format and PII-like
templates, half of them at repetition count 1 and the rest at 2, 4, 8, 16,
inclusion probability 1/2):

- ``<prefix>canary-target@candidate``: ordinary fine-tuning (:func:`~mlflow_mia.demo.train.train_mlm`);
- ``<prefix>canary-target-dp@candidate``: the same recipe with DP-SGD
  (:func:`~mlflow_mia.demo.dp.train_mlm_dp`), its accountant's epsilon kept as the version
  tag ``mlflow_mia.demo.dp_epsilon``.

The canary set is written to ``<data_dir>/canaries.json`` (mode 0600, the auditor's
secret); MLflow gets counts, settings and a digest of that file only.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from mlflow_mia.naming import DEFAULT_EXPERIMENT
from mlflow_mia.canaries import insert, make_canaries
from mlflow_mia.demo import bbc
from mlflow_mia.demo.build import DEMO_SIZES, SIZE_TAG, build_demo
from mlflow_mia.demo.dp import DPConfig, train_mlm_dp
from mlflow_mia.demo.registry import register_model, torch_threads
from mlflow_mia.demo.train import TrainConfig, train_mlm
from mlflow_mia.models.resolve import resolve_model

__all__ = ["build_canary_demo"]

log = logging.getLogger(__name__)

DIGEST_TAG = "mlflow_mia.demo.canary_digest"
EPSILON_TAG, DELTA_TAG = "mlflow_mia.demo.dp_epsilon", "mlflow_mia.demo.dp_delta"


@dataclass(frozen=True)
class CanaryDemoSize:
    """One size of the canary demo.

    Attributes
    ----------
    demo_size : str
        The BBC demo size whose base model and member sentences are used.
    m : int
        Canaries (each included with probability 1/2).
    repetitions : tuple of int
        The mix of repetition counts (:func:`~mlflow_mia.canaries.make_canaries` cycles
        through it, so a count listed k times gets k shares): ``(1, 1, 1, 1, 2, 4, 8, 16)``
        puts half the canaries (500 of 1,000) at r = 1 and 125 at each of 2, 4, 8, 16.
        Only the r = 1 canaries give the record-level bound, and both its ceiling and its
        power grow with their number (200 at the even mix 1, 2, 4, 8, 16); 125 canaries per
        larger count still show exposure growing with repetitions.
    epochs, batch_size, learning_rate : float, int, float
        Non-private fine-tuning (passes over the members plus the canary copies). 40
        passes, as a clinical fine-tune on a small corpus runs many: a canary inserted
        once is seen 40 times (at 8 passes the 2 x 64 model told no r = 1 canary apart).
    dp_epochs, dp_batch_size, dp_learning_rate : float, int, float
        DP-SGD fine-tuning of the same data (larger Poisson batches, as DP-SGD needs).
    dp_epsilon, dp_delta : float
        Target epsilon and delta of the DP-SGD accountant.
    seed : int
        Seed of the canary set, the insertion and the training.
    """

    demo_size: str
    m: int = 1000
    repetitions: tuple = (1, 1, 1, 1, 2, 4, 8, 16)
    epochs: float = 40.0
    batch_size: int = 32
    learning_rate: float = 2e-3
    dp_epochs: float = 4.0
    dp_batch_size: int = 128
    dp_learning_rate: float = 2e-3
    dp_epsilon: float = 8.0
    dp_delta: float = 1e-5
    seed: int = 0


CANARY_DEMO_SIZES = {"small": CanaryDemoSize(demo_size="small"), "default": CanaryDemoSize(demo_size="default")}


@dataclass(frozen=True)
class CanaryDemoSpec:
    """Where the canary demo lives.

    Attributes
    ----------
    target_uri, dp_target_uri : str
        ``models:/...@candidate`` of the non-private and the DP-SGD target.
    canaries_path : str
        The canary set file (mode 0600).
    dp_epsilon, dp_delta : float
        The DP target's accountant epsilon (spent) at delta.
    experiment : str
    size : str
    seconds : dict
        Training times (non-private, DP) of the build that made these models (empty when reused).
    """

    target_uri: str
    dp_target_uri: str
    canaries_path: str
    dp_epsilon: float
    dp_delta: float
    experiment: str = DEFAULT_EXPERIMENT
    size: str = "small"
    seconds: dict = field(default_factory=dict)

    def targets(self) -> dict[str, str]:
        return {"non-private": self.target_uri, "dp-sgd": self.dp_target_uri}

    def params(self, label: str) -> dict[str, str]:
        """Run params of the audit of one target: the DP accountant's epsilon beside the DP one."""
        if label != "dp-sgd":
            return {"canary.demo_dp": "false"}
        return {"canary.demo_dp": "true", "dp.epsilon": f"{self.dp_epsilon:.4f}", "dp.delta": f"{self.dp_delta:g}"}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _existing(client, names: dict, digest: str):
    from mlflow.exceptions import MlflowException

    found = {}
    for role, name in names.items():
        try:
            mv = client.get_model_version_by_alias(name, "candidate")
        except MlflowException:
            return None
        if (mv.tags or {}).get(DIGEST_TAG) != digest:
            return None
        found[role] = mv
    return found


def build_canary_demo(*, size: str = "small", force: bool = False, progress: bool = True,
                      data_dir=None) -> CanaryDemoSpec:
    """Build (or find built) the canary demo's two targets; see the module docstring.

    Raises
    ------
    ValueError
        Unknown size.
    ImportError
        opacus (the ``dp`` extra) or the demo corpus is not installed.
    """
    import mlflow
    from mlflow import MlflowClient

    if size not in CANARY_DEMO_SIZES:
        raise ValueError(f"unknown canary demo size {size!r}; choose from {sorted(CANARY_DEMO_SIZES)}")
    cfg = CANARY_DEMO_SIZES[size]
    demo = build_demo(size=cfg.demo_size, progress=progress)
    base_cfg = DEMO_SIZES[cfg.demo_size]
    folder = Path(data_dir or Path(demo.pool_path).parent)
    path = folder / "canaries.json"
    canaries = make_canaries(cfg.m, repetitions=cfg.repetitions, seed=cfg.seed)
    canaries.save(path)  # deterministic from the seed: the same file every time
    digest = _digest(path)
    prefix = base_cfg.prefix
    names = {"target": f"{prefix}canary-target", "dp": f"{prefix}canary-target-dp"}
    client = MlflowClient()
    mlflow.set_experiment(DEFAULT_EXPERIMENT)
    found = None if force else _existing(client, names, digest)
    if found is not None:
        tags = found["dp"].tags
        return CanaryDemoSpec(target_uri=f"models:/{names['target']}@candidate",
                              dp_target_uri=f"models:/{names['dp']}@candidate", canaries_path=str(path),
                              dp_epsilon=float(tags[EPSILON_TAG]), dp_delta=float(tags[DELTA_TAG]),
                              experiment=DEFAULT_EXPERIMENT, size=size)
    if importlib.util.find_spec("opacus") is None:  # before the first target trains, not after it
        raise ImportError("the canary demo trains a DP-SGD target, which needs opacus: pip install -e '.[demo]' "
                          "(or pip install 'mlflow-mia[dp]')")
    texts = bbc.make_split(base_cfg.split).target_train["text"].tolist()
    train_texts = insert(texts, canaries, seed=cfg.seed)
    base = resolve_model(demo.base_uri, role="base").lm
    seconds = {}
    with mlflow.start_run(run_name=f"build canary demo ({size})"), torch_threads(base_cfg.num_threads):
        mlflow.log_params({"canary_demo.size": size, "canary_demo.m": cfg.m, "canary_demo.digest": digest,
                           "canary_demo.n_member_texts": len(texts), "canary_demo.n_copies": canaries.n_copies,
                           **{f"canary_demo.{k}": v for k, v in canaries.counts().items() if "/" not in k}})
        plain = TrainConfig(epochs=cfg.epochs, batch_size=cfg.batch_size, learning_rate=cfg.learning_rate,
                            seed=cfg.seed)
        model = copy.deepcopy(base.model)
        started = time.perf_counter()
        train_mlm(model, base.tokenizer, train_texts, plain, progress=progress, desc="canary target")
        seconds["train_target"] = time.perf_counter() - started
        dp_train = TrainConfig(epochs=cfg.dp_epochs, batch_size=cfg.dp_batch_size,
                               learning_rate=cfg.dp_learning_rate, seed=cfg.seed)
        dp_model = copy.deepcopy(base.model)
        started = time.perf_counter()
        dp = train_mlm_dp(dp_model, base.tokenizer, train_texts, dp_train,
                          DPConfig(target_epsilon=cfg.dp_epsilon, delta=cfg.dp_delta), progress=progress,
                          desc="canary target (DP-SGD)")
        seconds["train_dp_target"] = time.perf_counter() - started
        mlflow.log_metrics({"dp/epsilon": dp.epsilon, "dp/delta": dp.delta})
        mlflow.log_params({f"timing.{k}_s": round(v, 1) for k, v in seconds.items()})
        common = {DIGEST_TAG: digest, SIZE_TAG: size}
        register_model(model, base.tokenizer, name=names["target"], alias="candidate", artifact_name="canary_target",
                       tags=common, client=client)
        register_model(dp_model, base.tokenizer, name=names["dp"], alias="candidate",
                       artifact_name="canary_target_dp", client=client,
                       tags={**common, EPSILON_TAG: f"{dp.epsilon:.6f}", DELTA_TAG: f"{dp.delta:g}"})
    log.info("canary demo %r built: %s", size, seconds)
    return replace(CanaryDemoSpec(target_uri=f"models:/{names['target']}@candidate",
                                  dp_target_uri=f"models:/{names['dp']}@candidate", canaries_path=str(path),
                                  dp_epsilon=dp.epsilon, dp_delta=dp.delta, experiment=DEFAULT_EXPERIMENT,
                                  size=size), seconds=seconds)
