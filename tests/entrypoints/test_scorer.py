"""The energy scorer pyfunc (``entrypoints/scorer.py``): logged, registered, loaded, equal to compute_signals."""

from __future__ import annotations

import mlflow
import numpy as np
import pandas as pd
import pytest

from mlflow_mia.config import SignalConfig
from mlflow_mia.models.resolve import resolve_model
from mlflow_mia.entrypoints.scorer import log_scorer
from mlflow_mia.signals import compute_signals

CONFIG = SignalConfig(num_masks=2)


@pytest.mark.parametrize("embed", [False, True])
def test_registered_scorer_returns_compute_signals(tracking, embed):
    texts = list(tracking.pool["text"][:6])
    name = f"tgt-mia-scorer-{int(embed)}"
    with mlflow.start_run():
        log_scorer("models:/tgt@candidate", CONFIG, registered_model_name=name, embed_weights=embed)
    scorer = mlflow.pyfunc.load_model(f"models:/{name}/1")
    out = scorer.predict(pd.DataFrame({"text": texts}))
    expected = compute_signals(resolve_model("models:/tgt/2").lm, texts, CONFIG, progress=False)
    assert list(out.columns) == ["energy", "n_tokens", "truncated"]
    np.testing.assert_allclose(out["energy"].to_numpy(), expected.values, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(out["n_tokens"].to_numpy(), expected.n_tokens)
    config = scorer.model_config
    assert config.get("model_uri", "models:/tgt/2") == "models:/tgt/2"  # the alias is pinned to its version
    assert ("model_uri" in config) != embed
    with pytest.raises(ValueError, match="text at row 1 is missing"):
        scorer.predict(pd.DataFrame({"text": ["the cat", None]}))


def test_the_scorer_checks_the_model_weights_not_only_the_tokenizer(tracking):
    """The scorer's model_uri names other weights where it runs (another server's models:/tgt/2): refused."""
    from mlflow.pyfunc import PythonModelContext

    from mlflow_mia.entrypoints.scorer import MiaScorer

    with mlflow.start_run():
        info = log_scorer("models:/tgt@candidate", CONFIG)
    config = dict(mlflow.pyfunc.load_model(info.model_uri).model_config)
    assert config["weights_id"] == resolve_model("models:/tgt/2").lm.weights_id
    elsewhere = {**config, "model_uri": "models:/tgt/1"}  # same tokenizer, other weights
    with pytest.raises(ValueError, match=r"loaded here has other weights .* than the model it was logged for "
                                         r"\(models:/tgt/2, "):
        MiaScorer().load_context(PythonModelContext(artifacts={}, model_config=elsewhere))
    scorer = MiaScorer()
    scorer.load_context(PythonModelContext(artifacts={}, model_config=config))
    assert scorer._lm.weights_id == config["weights_id"]


def test_a_lone_surrogate_is_refused_with_its_row():
    """A text that is not valid Unicode (a lone surrogate, as an unpaired JSON escape gives) names its row."""
    from mlflow_mia.entrypoints.scorer import MiaScorer

    scorer = MiaScorer()
    scorer._column, scorer._config, scorer._device, scorer._lm = "text", CONFIG, None, None  # never reached
    with pytest.raises(ValueError, match=r"^text at row 1 is not valid Unicode: a lone surrogate at character 4 "
                                         r"\(U\+D800\); fix the encoding or drop the row$"):
        scorer.predict(None, ["the cat", "the \ud800dog"])
    with pytest.raises(ValueError, match=r"^text at row 0 is not valid Unicode"):
        scorer.predict(None, pd.DataFrame({"text": pd.Series(["\udfff"], dtype=object)}))
