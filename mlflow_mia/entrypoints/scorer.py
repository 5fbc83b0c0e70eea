"""A pyfunc model that returns the signal of texts (masked energy or PLL, causal mean NLL): the Databricks path.

``mlflow.pyfunc.spark_udf`` on a registered fill-mask model returns predicted
tokens, not energies. :func:`log_scorer` logs a small ``PythonModel`` holding the
target's URI (or a copy of its weights) and the signal settings, whose
``predict`` returns one row per text::

    energy (or pll, or causal) float64 nats, n_tokens int64, truncated bool

so that, in a notebook::

    info = log_scorer("models:/clinical-bert@candidate", SignalConfig(), registered_model_name="clinical-bert-mia-scorer")
    score = mlflow.pyfunc.spark_udf(spark, "models:/clinical-bert-mia-scorer/1",
                                    result_type="energy double, n_tokens long, truncated boolean")
    df.withColumn("s", score("text")).select("id", "s.*")

The values equal :func:`mlflow_mia.signals.dispatch.compute_signals` (masks come from the
seed and the text): a causal target (``text-generation``) gets the causal signal, the
mean NLL per predicted token, in a column named ``causal``. Masked-token log-probs (min-k%) are not returned; use
:func:`mlflow_mia.engines.spark_executors.spark_signals` for those, for resumable
Parquet results, and for the audit on Spark.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

import mlflow
import pandas as pd
import torch
from mlflow.models import ModelSignature
from mlflow.types import ColSpec, Schema

from mlflow_mia.config import SignalConfig
from mlflow_mia.data import surrogate_at
from mlflow_mia.engines.spark_executors import model_spec
from mlflow_mia.models.resolve import resolve_model
from mlflow_mia.signals.dispatch import compute_signals, signal_config_for

__all__: list[str] = []


def scorer_result_type(kind: str = "energy") -> str:
    """The Spark DDL of the scorer's output, for ``spark_udf(..., result_type=...)``."""
    return f"{kind} double, n_tokens long, truncated boolean"


class MiaScorer(mlflow.pyfunc.PythonModel):
    """Signal (masked energy or PLL, or causal mean NLL), token count and truncation flag of each input text.

    ``model_config`` holds ``signal`` (a :class:`SignalConfig` as a dict),
    ``model_uri`` (when the weights are not an artifact), ``model_id`` (the
    target's name when the scorer was logged), ``weights_id`` and ``tokenizer_id``
    (digests of the weights and tokenizer the scorer was logged for, both checked
    after loading: ``models:/tgt/2`` on another tracking server is another model),
    ``text_column`` and ``device``.

    Raises
    ------
    ValueError
        From ``load_context``: the model loaded where the scorer runs has other
        weights or another tokenizer than when the scorer was logged.
    """

    def load_context(self, context):
        cfg = dict(context.model_config or {})
        self._config = SignalConfig.from_dict(cfg["signal"])
        self._column = cfg.get("text_column", "text")
        self._device = cfg.get("device")
        threads = os.environ.get("OMP_NUM_THREADS")  # Spark sets it to spark.task.cpus
        if threads and threads.isdigit() and int(threads) != torch.get_num_threads():
            torch.set_num_threads(int(threads))
        source = context.artifacts.get("model") if context.artifacts else None
        self._lm = resolve_model(source or cfg["model_uri"], role="target").lm
        self._config = signal_config_for(self._lm, self._config)  # kind="causal" for a causal LM
        where = source or cfg["model_uri"]
        if cfg.get("weights_id") and self._lm.weights_id != cfg["weights_id"]:
            raise ValueError(f"the scorer's model {where!r} loaded here has other weights ({self._lm.weights_id}) "
                             f"than the model it was logged for ({cfg.get('model_id')}, {cfg['weights_id']}): the "
                             "URI names another model on this server; log the scorer with embed_weights=True")
        if cfg.get("tokenizer_id") and self._lm.tokenizer_id != cfg["tokenizer_id"]:
            raise ValueError(f"the scorer's model {where!r} loaded here has another tokenizer "
                             "than when the scorer was logged; log the scorer with embed_weights=True")

    def predict(self, context, model_input, params=None):
        """Signals of each text.

        Parameters
        ----------
        model_input : pandas.DataFrame, pandas.Series or list of str
            A DataFrame needs the text column (``text_column`` at logging; a
            one-column frame is taken as the texts).

        Returns
        -------
        pandas.DataFrame
            ``energy`` (or ``pll``, or ``causal``) float64 nats, ``n_tokens`` int64, ``truncated`` bool;
            one row per text, in input order.

        Raises
        ------
        ValueError
            No text column, or a null, non-string or empty text, or one holding a lone
            surrogate (not valid Unicode; its row is named).
        """
        if isinstance(model_input, pd.DataFrame):
            if self._column in model_input.columns:
                texts = model_input[self._column]
            elif model_input.shape[1] == 1:
                texts = model_input.iloc[:, 0]
            else:
                raise ValueError(f"the input has no text column {self._column!r}; its columns are "
                                 f"{list(model_input.columns)}")
        else:  # a plain list (not a pandas Series: its Arrow strings cannot hold a lone surrogate, checked below)
            texts = model_input
        texts = list(texts)
        for i, t in enumerate(texts):
            if isinstance(t, str) and t.strip():
                at = surrogate_at(t)
                if at is None:
                    continue
                raise ValueError(f"text at row {i} is not valid Unicode: a lone surrogate at character {at} "
                                 f"(U+{ord(t[at]):04X}); fix the encoding or drop the row")
            what = "empty" if isinstance(t, str) else "missing" if pd.isna(t) else f"not a string ({t!r})"
            raise ValueError(f"text at row {i} is {what}; give a non-empty string per row")
        res = compute_signals(self._lm, texts, self._config, device=self._device, progress=False)
        return pd.DataFrame({self._config.kind: res.values, "n_tokens": res.n_tokens, "truncated": res.truncated})


def log_scorer(model, config: SignalConfig | None = None, *, name: str = "mia-scorer",
               registered_model_name: str | None = None, embed_weights: bool = False, text_column: str = "text",
               device: str | None = None, pip_requirements=None):
    """Log a :class:`MiaScorer` for ``model`` to the active run (or a new one).

    Parameters
    ----------
    model : str or ResolvedModel
        The target: ``models:/name@alias`` (pinned here to its version),
        ``runs:/...`` or a folder.
    config : SignalConfig, optional
    name : str
        Name of the logged model.
    registered_model_name : str, optional
        Register it, e.g. ``"<name>-mia-scorer"``.
    embed_weights : bool
        Store a copy of the weights and tokenizer in the scorer (no registry access
        needed where it runs) instead of the target's URI.
    text_column : str
        Column read by ``predict`` from a DataFrame.
    device : str, optional
        Torch device where the scorer runs (default: CUDA when available, else CPU).
    pip_requirements : list of str, optional
        Default: mlflow-mia, torch and transformers.

    Returns
    -------
    mlflow.models.model.ModelInfo
    """
    resolved = resolve_model(model, role="target")
    config = signal_config_for(resolved.lm, config or SignalConfig())  # kind="causal" for a causal LM
    spec = model_spec(resolved, config)
    model_config = {"signal": dataclasses.asdict(config), "model_id": spec["model_id"],
                    "weights_id": spec["weights_id"], "tokenizer_id": spec["tokenizer_id"],
                    "text_column": text_column, "device": device}
    signature = ModelSignature(
        inputs=Schema([ColSpec("string", text_column)]),
        outputs=Schema([ColSpec("double", config.kind), ColSpec("long", "n_tokens"), ColSpec("boolean", "truncated")]))
    requirements = pip_requirements or ["mlflow-mia", "torch", "transformers"]
    with tempfile.TemporaryDirectory(prefix="mia-scorer-") as tmp:
        artifacts = None
        if embed_weights:
            resolved.lm.model.save_pretrained(tmp)
            resolved.lm.tokenizer.save_pretrained(tmp)
            artifacts = {"model": tmp}
        else:
            model_config["model_uri"] = spec["load_uri"]
        return mlflow.pyfunc.log_model(name=name, python_model=MiaScorer(), artifacts=artifacts,
                                       model_config=model_config, signature=signature,
                                       registered_model_name=registered_model_name, pip_requirements=requirements)
