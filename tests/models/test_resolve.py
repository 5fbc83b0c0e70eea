"""Model references -> MaskedLM with a version-pinned cache identity and registry info."""

from __future__ import annotations

import mlflow
import pytest

from mlflow_mia.models.resolve import ResolvedModel, resolve_model
from mlflow_mia.signals import MaskedLM


@pytest.mark.parametrize("uri, pinned, registry", [
    ("models:/tgt/1", "models:/tgt/1", ("tgt", "1")),
    ("models:/tgt@champion", "models:/tgt/1", ("tgt", "1")),
    ("models:/tgt@candidate", "models:/tgt/2", ("tgt", "2")),
    ("models:/tgt/latest", "models:/tgt/2", ("tgt", "2")),
])
def test_registry_uris_pin_the_version(tracking, uri, pinned, registry):
    resolved = resolve_model(uri)
    assert isinstance(resolved, ResolvedModel) and isinstance(resolved.lm, MaskedLM)
    assert resolved.resolved_uri == resolved.lm.model_id == pinned
    assert resolved.registry == registry
    assert resolved.requested == uri
    assert resolved.params("target")["target_model_version"] == registry[1]


def test_run_and_logged_model_uris_find_their_registry_version(tracking):
    by_run = resolve_model(f"runs:/{tracking.run_ids['tgt/1']}/model")
    assert by_run.resolved_uri == "models:/tgt/1" and by_run.registry == ("tgt", "1")
    by_id = resolve_model(f"models:/{tracking.model_ids['ref/1']}", role="reference")
    assert by_id.resolved_uri == "models:/ref/1"
    assert by_id.lm.name.startswith("reference ")


def test_local_mlflow_folder(tracking, tmp_path):
    path = mlflow.artifacts.download_artifacts("models:/tgt/2", dst_path=str(tmp_path / "saved"))
    resolved = resolve_model(path)
    assert resolved.resolved_uri == "models:/tgt/2"


def test_local_hugging_face_folder_is_keyed_by_weights(tmp_path):
    from mlflow_mia.signals.testing import tiny_bert

    model, tok = tiny_bert(seed=3)
    model.save_pretrained(tmp_path / "hf")
    tok.save_pretrained(tmp_path / "hf")
    resolved = resolve_model(tmp_path / "hf")
    assert resolved.resolved_uri.startswith("sha256:") and resolved.registry is None
    assert resolve_model(str(tmp_path / "hf")).resolved_uri == resolved.resolved_uri


def test_pyfunc_model_as_handed_over_by_evaluate(tracking):
    pyfunc = mlflow.pyfunc.load_model("models:/tgt@candidate")
    raw = pyfunc.get_raw_model()
    assert hasattr(raw, "model") and hasattr(raw, "tokenizer")  # the transformers pipeline
    resolved = resolve_model(pyfunc)
    assert resolved.resolved_uri == "models:/tgt/2" and resolved.registry == ("tgt", "2")
    assert resolved.lm.model is raw.model


def test_in_memory_models():
    from mlflow_mia.signals.testing import tiny_bert

    pair = tiny_bert(seed=4)
    resolved = resolve_model(pair)
    assert resolved.resolved_uri.startswith("sha256:")
    assert resolve_model(resolved.lm).lm is resolved.lm


def test_errors_are_explicit(tracking, tmp_path):
    with pytest.raises(ValueError, match="nope"):
        resolve_model("models:/tgt@nope")
    with pytest.raises(ValueError, match="neither a local folder nor a model URI"):
        resolve_model(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="MLmodel"):
        resolve_model(tmp_path / "empty")
    with pytest.raises(TypeError):
        resolve_model(42)


def test_a_misspelt_registered_name_gets_did_you_mean_and_the_listing_command(tracking):
    import re

    from mlflow import MlflowClient

    names = [m.name for m in MlflowClient().search_registered_models(max_results=1000)]
    assert "tgt" in names
    with pytest.raises(ValueError) as info:
        resolve_model("models:/tgtt@candidate")
    message = str(info.value)
    assert message.startswith(f"cannot resolve 'models:/tgtt@candidate' in the model registry at "
                              f"{tracking.tracking_uri}: ")
    suggested = re.search(r"; did you mean (.*)\?; list them all with: ", message).group(1)
    assert "'tgt'" in suggested.split(" or ")[0].split(", ")  # the closest name comes first
    assert message.endswith(f"mlflow.set_tracking_uri('{tracking.tracking_uri}'); "
                            "print([m.name for m in mlflow.search_registered_models()])\"")
    # A name that exists with an alias that does not: MLflow's message alone, no suggestion.
    with pytest.raises(ValueError) as info:
        resolve_model("models:/tgt@no-such-alias")
    assert "did you mean" not in str(info.value) and "list them all" not in str(info.value)
    # Nothing alike: said so, with the listing command.
    with pytest.raises(ValueError, match=r"no registered model has a name like 'zzzzqqqq'; list them all with"):
        resolve_model("models:/zzzzqqqq/1")
