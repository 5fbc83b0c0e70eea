"""The demo's training specs: model architectures and training settings, checked when built.

- :class:`ModelSpec`: a BERT masked LM trained from scratch (:func:`mlflow_mia.demo.train.new_model`);
- :class:`TrainConfig`: one training run (:func:`mlflow_mia.demo.train.train_mlm`, and the causal
  demo's :func:`mlflow_mia.demo.causal_train.train_causal`);
- :class:`TrainResult`: what one training run did;
- :func:`check_sizes`: the size checks every architecture spec runs (this module's :class:`ModelSpec`,
  :class:`mlflow_mia.demo.causal_train.CausalSpec`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__: list[str] = []

#: The size fields of an architecture spec, checked by :func:`check_sizes`.
SIZES = ("hidden_size", "num_layers", "num_heads", "intermediate_size", "vocab_size", "max_position_embeddings")


def check_sizes(spec, *, min_vocab_size: int = 1, vocab_note: str = "") -> None:
    """Check an architecture spec: positive int sizes, heads dividing the hidden size, dropout in [0, 1).

    Parameters
    ----------
    spec : ModelSpec or CausalSpec
        Any object with the attributes of :data:`SIZES` and ``dropout``.
    min_vocab_size : int
        The smallest vocabulary the tokenizer can have (257 for a byte-level BPE: 256 bytes and one special
        token).
    vocab_note : str
        Why ``min_vocab_size``, named in its error (e.g. ``" (256 bytes and <|endoftext|>)"``).

    Raises
    ------
    ValueError
        ``hidden_size`` not divisible by ``num_heads``; a size that is not a positive int (the vocabulary: an int
        below ``min_vocab_size``); ``dropout`` outside [0, 1).
    """
    if spec.hidden_size % spec.num_heads:
        raise ValueError(f"hidden_size {spec.hidden_size} is not divisible by num_heads {spec.num_heads}")
    for name in SIZES:
        value, low = getattr(spec, name), min_vocab_size if name == "vocab_size" else 1
        if not isinstance(value, int) or value < low:
            expected = "a positive int" if low == 1 else f"an int >= {low}{vocab_note}"
            raise ValueError(f"{name} must be {expected}, got {value!r}")
    if not 0.0 <= spec.dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {spec.dropout!r}")


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a BERT masked LM trained from scratch.

    Attributes
    ----------
    hidden_size, num_layers, num_heads, intermediate_size : int
        Transformer sizes (``hidden_size`` must be divisible by ``num_heads``).
    vocab_size : int
        Target WordPiece vocabulary size of :func:`train_tokenizer`.
    max_position_embeddings : int
        Longest input in tokens, special tokens included.
    dropout : float
        Hidden and attention dropout during training.
    """

    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 1024
    vocab_size: int = 8000
    max_position_embeddings: int = 128
    dropout: float = 0.1

    def __post_init__(self):
        check_sizes(self)


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one masked-LM training run.

    Attributes
    ----------
    epochs : float
        Passes over the training texts (fractions allowed: the last pass is cut short).
    steps : int or None
        Optimisation steps; when given it overrides ``epochs`` (the demo gives the
        target and both references the same number of steps).
    batch_size : int
        Sentences per optimisation step.
    learning_rate : float
        Peak AdamW learning rate.
    weight_decay : float
        AdamW weight decay (not applied to biases and LayerNorm weights).
    warmup_ratio : float
        Fraction of the steps with a linear warm-up; the rest decays linearly to 0.
    max_length : int
        Longer sentences are truncated to this many tokens (special tokens included).
    mlm_probability : float
        Fraction of tokens selected for masking by the collator.
    seed : int
        Seed of the batch order, the masking and the dropout.
    """

    epochs: float = 10.0
    steps: int | None = None
    batch_size: int = 32
    learning_rate: float = 1e-3
    weight_decay: float = 0.01
    warmup_ratio: float = 0.05
    max_length: int = 64
    mlm_probability: float = 0.15
    seed: int = 0

    def __post_init__(self):
        if not self.epochs > 0:
            raise ValueError(f"epochs must be > 0, got {self.epochs!r}")
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            raise ValueError(f"steps must be a positive int or None, got {self.steps!r}")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {self.batch_size!r}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio!r}")
        if not isinstance(self.max_length, int) or self.max_length < 4:
            raise ValueError(f"max_length must be an int >= 4, got {self.max_length!r}")
        if not 0.0 < self.mlm_probability < 1.0:
            raise ValueError(f"mlm_probability must be in (0, 1), got {self.mlm_probability!r}")


@dataclass(frozen=True)
class TrainResult:
    """What one training run did (numbers only: safe to log).

    Attributes
    ----------
    steps : int
        Optimisation steps.
    tokens : int
        Non-padding tokens processed (all epochs).
    seconds : float
        Wall-clock time of the loop.
    epoch_losses : tuple of float
        Mean masked-token cross-entropy (nats) of each epoch, with training-time masks.
    """

    steps: int
    tokens: int
    seconds: float
    epoch_losses: tuple[float, ...] = field(default_factory=tuple)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")

    def to_params(self, prefix: str) -> dict:
        """Flat ``{f"{prefix}.<name>": value}`` for MLflow params."""
        return {
            f"{prefix}.steps": self.steps,
            f"{prefix}.tokens": self.tokens,
            f"{prefix}.seconds": round(self.seconds, 1),
            f"{prefix}.final_loss": round(self.epoch_losses[-1], 4) if self.epoch_losses else None,
        }
