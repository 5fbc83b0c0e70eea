"""Differentially private masked-LM training with DP-SGD (opacus), for the demo's defence runs.

:func:`train_mlm_dp` trains the demo's BERT masked LM like
:func:`~mlflow_mia.demo.train.train_mlm`, but with DP-SGD (Abadi et al. 2016): Poisson
sampled batches, each sample's gradient clipped to ``max_grad_norm`` and Gaussian noise
added, the noise level chosen by opacus so that the planned training spends at most
``target_epsilon`` at ``delta`` (``PrivacyEngine.make_private_with_epsilon``). It
returns the accountant's epsilon actually spent, to log as ``dp/epsilon`` and
``dp/delta``. That guarantee is per training text (one sentence): where membership was
decided per group of texts (an article), the audit's group-level bound
(``user/{attack}/epsilon_lower_bound``) must stay below the guarantee per group, which
group privacy gives (:func:`mlflow_mia.metrics.group_privacy.group_privacy`,
:func:`mlflow_mia.analyze.variants.dp_group_metrics`).

Differences from :func:`~mlflow_mia.demo.train.train_mlm`, all required by DP-SGD:

- The loss of a batch is the mean over samples of each sample's mean masked-token
  cross-entropy, so one sample's gradient does not depend on the other samples of its
  batch (the per-token mean of ``train_mlm`` would make it depend on their masked
  token counts). The LM head runs on every position, keeping the batch dimension that
  per-sample gradients need.
- Batches are Poisson samples (rate ``1 / steps_per_epoch``), not a shuffled partition,
  and not length-bucketed.
- No global norm clipping: opacus clips per sample.
- ``DPConfig.freeze`` freezes parameters by name prefix (e.g. the embeddings, which in
  BERT are tied to the MLM decoder and hold most of a small model's weights): DP noise
  is spread over the trained parameters only, so fewer of them learn more per step.
- ``DPConfig.noise_multiplier`` fixes the noise instead of a target epsilon; 0 gives the
  clip-only control (same clipping, sampling and schedule, no noise, no guarantee:
  epsilon is infinite), which tells what DP-SGD's noise does from what its recipe does.
- Parameters held directly by a layer that opacus has no per-sample gradient rule for
  are frozen during training (in BERT: the MLM head's output bias, also the decoder's
  bias; it keeps its initial value). opacus would otherwise fall back on functorch,
  which fails on these models. Their names are logged and returned.

Requires the optional extra ``dp`` (``pip install mlflow-mia[dp]``, opacus >= 1.5).

References
----------
.. [1] M. Abadi, A. Chu, I. Goodfellow, H. B. McMahan, I. Mironov, K. Talwar and L. Zhang,
   "Deep Learning with Differential Privacy", CCS 2016.
.. [2] A. Yousefpour et al., "Opacus: User-Friendly Differential Privacy Library in
   PyTorch", arXiv:2109.12298, 2021.
.. [3] J. Mattern et al., "Membership Inference Attacks against Language Models via
   Neighbourhood Comparison", Findings of ACL 2023, Table 6 (DP-SGD as a defence).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader
from mlflow_mia.progress import bar as progress_bar

from .train import TrainConfig, TrainResult, mlm_examples

__all__ = ["DPConfig", "train_mlm_dp"]

logger = logging.getLogger(__name__)

ACCOUNTANTS = ("rdp", "prv", "gdp")


@dataclass(frozen=True)
class DPConfig:
    """Privacy settings of one DP-SGD training run.

    Attributes
    ----------
    target_epsilon : float or None
        Budget the planned training may spend, > 0 (the issue's defence runs use about 8
        and 1); None when ``noise_multiplier`` is given.
    delta : float
        Delta of the guarantee, in (0, 1); should be below 1 / number of training texts.
    max_grad_norm : float
        Per-sample gradient clipping norm C, > 0.
    accountant : {"rdp", "prv", "gdp"}
        opacus accountant that picks the noise and reports the epsilon spent.
    secure_mode : bool
        opacus ``secure_mode``: cryptographically strong noise (needs ``torchcsprng``);
        runs are then not reproducible from the seed.
    noise_multiplier : float or None
        A fixed noise multiplier (>= 0) instead of ``target_epsilon`` (give one of the
        two). 0 is the clip-only control: its epsilon is infinite.
    freeze : tuple of str
        Names (prefixes) of parameters not trained, e.g. ``("bert.embeddings.",)``.
    """

    target_epsilon: float | None = 8.0
    delta: float = 1e-5
    max_grad_norm: float = 1.0
    accountant: str = "rdp"
    secure_mode: bool = False
    noise_multiplier: float | None = None
    freeze: tuple = ()

    def __post_init__(self):
        if self.noise_multiplier is not None:
            if self.target_epsilon is not None:
                raise ValueError("give target_epsilon or noise_multiplier, not both (set target_epsilon=None)")
            if not (isinstance(self.noise_multiplier, (int, float)) and 0 <= self.noise_multiplier < math.inf):
                raise ValueError(f"noise_multiplier must be a finite number >= 0, got {self.noise_multiplier!r}")
        elif not (isinstance(self.target_epsilon, (int, float)) and self.target_epsilon > 0
                  and math.isfinite(self.target_epsilon)):
            raise ValueError(f"target_epsilon must be a finite number > 0, got {self.target_epsilon!r}")
        object.__setattr__(self, "freeze", tuple(self.freeze))
        if not (isinstance(self.delta, (int, float)) and 0.0 < self.delta < 1.0):
            raise ValueError(f"delta must be in (0, 1), e.g. 1e-5, got {self.delta!r}")
        if not (isinstance(self.max_grad_norm, (int, float)) and self.max_grad_norm > 0):
            raise ValueError(f"max_grad_norm must be > 0, got {self.max_grad_norm!r}")
        if self.accountant not in ACCOUNTANTS:
            raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {self.accountant!r}")


@dataclass(frozen=True)
class DPTrainResult:
    """What a DP-SGD run did and the privacy it spent (numbers only: safe to log).

    Attributes
    ----------
    train : TrainResult
        Steps, tokens, time and per-epoch losses (mean per-sample masked-token NLL, nats).
    epsilon : float
        Epsilon spent at ``delta``, as the accountant reports it after the last step
        (<= ``target_epsilon``); ``inf`` without noise.
    delta : float
    target_epsilon : float or None
    noise_multiplier : float
        Noise standard deviation divided by ``max_grad_norm``.
    sample_rate : float
        Poisson sampling rate of each step (expected batch size / number of texts).
    max_grad_norm : float
    accountant : str
    frozen : tuple of str
        Parameters left untrained (``DPConfig.freeze`` and those without a per-sample
        gradient rule; see the module notes).
    """

    train: TrainResult
    epsilon: float
    delta: float
    target_epsilon: float
    noise_multiplier: float
    sample_rate: float
    max_grad_norm: float
    accountant: str
    frozen: tuple = ()

    def metrics(self, prefix: str = "dp/") -> dict[str, float]:
        """``{"dp/epsilon": ..., "dp/delta": ..., "dp/noise_multiplier": ...}`` for MLflow (no epsilon when infinite)."""
        out = {f"{prefix}delta": self.delta, f"{prefix}noise_multiplier": self.noise_multiplier}
        if math.isfinite(self.epsilon):
            out[f"{prefix}epsilon"] = self.epsilon
        return out

    def to_params(self, prefix: str = "dp") -> dict:
        """Flat MLflow params of the privacy settings."""
        return {f"{prefix}.target_epsilon": self.target_epsilon or "none", f"{prefix}.noise_multiplier":
                round(self.noise_multiplier, 6), f"{prefix}.sample_rate": round(self.sample_rate, 6),
                f"{prefix}.max_grad_norm": self.max_grad_norm, f"{prefix}.accountant": self.accountant}


def _per_sample_loss(model, input_ids, attention_mask, labels, *, explicit_ids: bool):
    """Mean over the batch of each sample's mean masked-token cross-entropy (0 for an empty batch).

    With ``explicit_ids`` (BERT), position and token-type ids are passed with the batch
    dimension: BERT's default ids have batch size 1, and opacus needs every layer's input
    to be per sample.
    """
    extra = {}
    if explicit_ids:
        extra["position_ids"] = torch.arange(input_ids.shape[1]).expand_as(input_ids)
        extra["token_type_ids"] = torch.zeros_like(input_ids)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, **extra).logits
    nll = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), labels, ignore_index=-100,
                                            reduction="none")
    per_sample = nll.sum(1) / (labels != -100).sum(1).clamp(min=1)
    return per_sample.sum() / max(len(per_sample), 1)


def _freeze_named(model, prefixes) -> list:
    """Freeze the trainable parameters whose names start with one of ``prefixes``; return them."""
    frozen = []
    for name, param in model.named_parameters():
        if param.requires_grad and any(name.startswith(p) for p in prefixes):
            param.requires_grad_(False)
            frozen.append((name, param))
    return frozen


def _freeze_unsupported(model) -> list:
    """Freeze trainable parameters owned by layers without an opacus grad sampler; return them."""
    from opacus.grad_sample import GradSampleModule

    frozen, seen = [], set()
    for module_name, module in model.named_modules():
        if type(module) in GradSampleModule.GRAD_SAMPLERS:
            continue
        for name, param in module.named_parameters(recurse=False):
            if param.requires_grad and id(param) not in seen:
                seen.add(id(param))
                param.requires_grad_(False)
                frozen.append((f"{module_name}.{name}" if module_name else name, param))
    return frozen


def _optimizer(model, config: TrainConfig):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if param.ndim < 2 or "LayerNorm" in name or name.endswith("bias") else decay).append(param)
    return torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=config.learning_rate)


def train_mlm_dp(model, tokenizer, texts: Sequence[str], config: TrainConfig, dp: DPConfig, *,
                 progress: bool = True, desc: str = "train-dp") -> DPTrainResult:
    """Train ``model`` in place with the masked-LM objective and DP-SGD.

    Parameters
    ----------
    model : transformers.BertForMaskedLM
        Trained in place; left unwrapped (no opacus hooks) and in eval mode.
    tokenizer : transformers.PreTrainedTokenizerBase
        Must define a mask token.
    texts : sequence of str
        The private training texts, one example each, truncated to ``config.max_length``.
    config : TrainConfig
        ``batch_size`` is the expected (Poisson) batch size; ``steps`` or ``epochs`` the
        length. opacus plans the noise for ``ceil(steps / steps_per_epoch)`` whole epochs.
    dp : DPConfig
    progress : bool
        Show a tqdm bar over steps.
    desc : str
        Label of the progress bar and log lines.

    Returns
    -------
    DPTrainResult
        With the accountant's ``epsilon`` at ``dp.delta``.

    Raises
    ------
    ValueError
        No texts, a tokenizer without a mask token, or invalid settings.
    ImportError
        opacus is not installed (``pip install mlflow-mia[dp]``).
    """
    try:
        from opacus import PrivacyEngine
    except ImportError as err:
        raise ImportError("DP-SGD training needs opacus: pip install 'mlflow-mia[dp]'") from err
    from transformers import get_linear_schedule_with_warmup

    examples, collator = mlm_examples(tokenizer, texts, config, caller="train_mlm_dp")
    loader = DataLoader(examples, batch_size=config.batch_size, collate_fn=collator)
    steps_per_epoch = len(loader)
    total_steps = config.steps or max(1, math.ceil(config.epochs * steps_per_epoch))
    epochs = math.ceil(total_steps / steps_per_epoch)

    step, tokens, epoch_losses = 0, 0, []
    start = time.perf_counter()
    bar = progress_bar(total=total_steps, desc=desc, unit="step", progress=progress, leave=False)
    engine = PrivacyEngine(accountant=dp.accountant, secure_mode=dp.secure_mode)
    explicit_ids = getattr(model.config, "model_type", None) == "bert"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)  # dropout and the Poisson sampler
        noise = None if dp.secure_mode else torch.Generator().manual_seed(config.seed)
        model.train()
        frozen = _freeze_named(model, dp.freeze) + _freeze_unsupported(model)
        if frozen:
            logger.info("%s: frozen for DP-SGD: %s", desc, [n for n, _ in frozen])
        optimizer = _optimizer(model, config)
        common = dict(module=model, optimizer=optimizer, data_loader=loader, max_grad_norm=dp.max_grad_norm,
                      poisson_sampling=True, noise_generator=noise)
        if dp.noise_multiplier is None:
            private, optimizer, loader = engine.make_private_with_epsilon(
                target_epsilon=dp.target_epsilon, target_delta=dp.delta, epochs=epochs, **common)
        else:
            private, optimizer, loader = engine.make_private(noise_multiplier=dp.noise_multiplier, **common)
        scheduler = get_linear_schedule_with_warmup(optimizer, int(config.warmup_ratio * total_steps), total_steps)
        try:
            while step < total_steps:
                losses = []
                for batch in loader:
                    if step >= total_steps:
                        break
                    input_ids = batch["input_ids"]
                    attention_mask = (input_ids != tokenizer.pad_token_id).long()
                    loss = _per_sample_loss(private, input_ids, attention_mask, batch["labels"],
                                            explicit_ids=explicit_ids)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    scheduler.step()
                    step += 1
                    tokens += int(attention_mask.sum())
                    if len(input_ids):
                        losses.append(loss.item())
                    bar.update(1)
                epoch_losses.append(float(np.mean(losses)) if losses else float("nan"))
        finally:
            bar.close()
            optimizer.zero_grad(set_to_none=True)  # drops the per-sample gradients too
            private.to_standard_module()  # removes the hooks; ``model`` holds the trained weights
            for _, param in frozen:
                param.requires_grad_(True)
            model.eval()
    epsilon = float(engine.get_epsilon(dp.delta)) if optimizer.noise_multiplier > 0 else math.inf
    train = TrainResult(steps=step, tokens=tokens, seconds=time.perf_counter() - start,
                        epoch_losses=tuple(epoch_losses))
    result = DPTrainResult(train=train, epsilon=epsilon, delta=dp.delta, target_epsilon=dp.target_epsilon,
                           noise_multiplier=float(optimizer.noise_multiplier), sample_rate=1 / steps_per_epoch,
                           max_grad_norm=dp.max_grad_norm, accountant=dp.accountant,
                           frozen=tuple(n for n, _ in frozen))
    logger.info("%s: %d DP-SGD steps in %.1f s, noise multiplier %.3f, epsilon %.3f at delta %g (target %g)",
                desc, step, train.seconds, result.noise_multiplier, epsilon, dp.delta, dp.target_epsilon)
    return result
