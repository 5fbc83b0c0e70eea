"""A NER audit's verdict on its registry version: the membership audit's sealed records, chain, tags and description.

A tiny token classifier is registered in the session's sqlite tracking and registry store
(``tests/registered_models.py``) and audited through ``mlflow-mia ner-audit``; the attacker is
another process with MLflow's client only (:func:`test_registry_forgery._attacker`).
"""

from __future__ import annotations

import re

import mlflow
import pytest
from mlflow import MlflowClient

from mlflow_mia.metrics.gate_record import GateRecord
from ner_tables import HAND, PROMPTS, names_table
from test_registry_forgery import _attacker, _tags


@pytest.fixture
def tagger(tracking, tmp_path):
    """``register(name) -> version``: a tiny token classifier registered under ``name``; ``register.args``: the audit's
    command line."""
    from mlflow_mia.signals.ner_testing import tiny_token_classifier

    paths = {k: tmp_path / f"{k}.csv" for k in ("names", "prompts", "hand")}
    names_table().to_csv(paths["names"], index=False)
    PROMPTS.to_csv(paths["prompts"], index=False)
    HAND.to_csv(paths["hand"], index=False)

    def register(name: str) -> str:
        # weights of its own per name: a blocking verdict carries over to every model with the same weights
        model, tok = tiny_token_classifier(seed=sum(map(ord, name)))
        with mlflow.start_run(run_name=f"log {name}"):
            info = mlflow.transformers.log_model(transformers_model={"model": model, "tokenizer": tok}, name="model",
                                                 task="token-classification", registered_model_name=name,
                                                 pip_requirements=["torch", "transformers"])
        return str(info.registered_model_version)

    def args(name: str, version: str, *extra: str) -> list[str]:
        return ["ner-audit", "--model", f"models:/{name}/{version}", "--names", str(paths["names"]),
                "--prompts", str(paths["prompts"]), "--handwritten-prompts", str(paths["hand"]),
                "--bootstrap-rounds", "20", "--fprs", "0.2", "--no-token-removal",
                "--cache-dir", str(tracking.cache_dir), "-q", *extra]

    register.args = args
    return register


def _run_id(out: str) -> str:
    return re.search(r"; run: .+ \(([0-9a-f]{32})\)$", out, re.M).group(1)


def test_a_gated_ner_audit_leaves_the_sealed_verdict_and_a_description_on_its_version(tagger, capsys):
    from mlflow_mia.entrypoints.cli import main

    version = tagger("ner-gated")
    code = main(tagger.args("ner-gated", version, "--max-tpr-at-fpr", "0.2:0.5"))
    out = capsys.readouterr().out
    assert code == 3  # 12 member and 12 non-member names show neither that the budget holds nor that it fails
    assert "mia.gate=inconclusive: ner/PER/best_prompt/tpr_at_fpr_0.2 = " in out
    run_id = _run_id(out)
    tags = _tags("ner-gated", version)
    assert tags["mia.gate"] == "inconclusive" and tags["mia.verdict"] == "inconclusive"
    assert tags["mia.gate.run_id"] == run_id and tags["mia.gate.attacks"] == "ner/PER/best_prompt"
    record = GateRecord.from_tag(tags[f"mia.gate.run.{run_id}"])
    assert record.attacks == ("ner/PER/best_prompt",) and record.budgets == ((0.2, 0.5),)
    assert (record.members, record.non_members, record.confidence) == (12, 12, 0.95)
    assert record.mac and record.key and record.pool and record.signal and record.weights.startswith("sha256:")
    assert any(k.startswith("mia.gate.chain.") for k in tags)
    assert tags["mia.ner.audit_run_id"] == run_id and tags["mia.ner.entity_types"] == "PER"
    run = MlflowClient().get_run(run_id)
    assert float(tags["mia.ner.PER.best_prompt_mmem"]) == pytest.approx(
        run.data.metrics["ner/PER/best_prompt_mmem"], abs=1e-4)
    assert run.data.tags["mia.gate"] == "inconclusive" and run.data.params["ner.gate"] == "0.2:0.5"
    assert "ner/PER/best_prompt/tpr_at_fpr_0.2_upper_binomial" in run.data.metrics
    description = MlflowClient().get_model_version("ner-gated", version).description
    assert description.startswith("**Verdict: inconclusive** (release gate inconclusive: ")
    assert "**Release gate: INCONCLUSIVE**" in run.data.tags["mlflow.note.content"]  # the run's: what would resolve it
    assert "For `PER` names" in description and run_id in description
    assert not any(n in description + str(tags) for n in names_table().name)  # no name leaves the audit
    # a looser budget passes, but a pass lifts a blocking verdict only when at least as strong
    code = main(tagger.args("ner-gated", version, "--max-tpr-at-fpr", "0.2:0.99", "--allow-loose-budget"))
    out = capsys.readouterr().out
    assert code == 0 and "mia.gate=pass" in out
    tags = _tags("ner-gated", version)
    assert tags["mia.gate"] == "inconclusive" and tags["mia.gate.run_id"] == run_id


def test_an_ungated_ner_audit_tags_its_version_and_describes_it(tagger, capsys):
    from mlflow_mia.entrypoints.cli import main

    version = tagger("ner-plain")
    assert main(tagger.args("ner-plain", version)) == 0
    run_id = _run_id(capsys.readouterr().out)
    tags = _tags("ner-plain", version)
    assert tags["mia.ner.audit_run_id"] == run_id and "mia.ner.PER.best_prompt_mmem" in tags
    assert tags["mia.verdict"] == MlflowClient().get_run(run_id).data.tags["mia.verdict"]
    assert "mia.gate" not in tags and not any(k.startswith("mia.gate.run.") for k in tags)
    description = MlflowClient().get_model_version("ner-plain", version).description
    assert description.startswith(f"**Verdict: {tags['mia.verdict']}**")


def test_a_forged_ner_record_is_not_believed(tagger, tmp_path, capsys):
    """A pass record for the NER scores written by another process (no seal key, no run), and a deleted record."""
    from mlflow_mia.entrypoints.cli import main

    version = tagger("ner-forged")
    assert main(tagger.args("ner-forged", version, "--max-tpr-at-fpr", "0.2:0.5")) == 3
    honest = _run_id(capsys.readouterr().out)
    weights = _tags("ner-forged", version)["mia.weights_sha256"]
    forged = GateRecord("pass", attacks=("ner/PER/best_prompt",), budgets=((0.2, 0.21),), confidence=0.999,
                        members=10_000, non_members=10_000, weights=weights, started=4_133_980_800_000,
                        written=4_133_980_800_000, clear=True)
    _attacker(tmp_path, ("set", "ner-forged", version, "mia.gate.run.0123456789abcdef0123456789abcdef",
                         forged.to_tag()), ("set", "ner-forged", version, "mia.gate", "pass"))
    assert main(tagger.args("ner-forged", version, "--max-tpr-at-fpr", "0.2:0.5")) == 3
    tags = _tags("ner-forged", version)
    assert tags["mia.gate"] == "inconclusive" and tags["mia.verdict"] == "inconclusive"
    assert "the record of run 0123456789abcdef0123456789abcdef" in tags["mia.gate.notes"]
    assert "0123456789abcdef0123456789abcdef" in MlflowClient().get_model_version("ner-forged", version).description
    # the honest record deleted: the chain shows it
    latest = tags["mia.gate.run_id"]
    assert latest != honest
    _attacker(tmp_path, ("delete", "ner-forged", version, f"mia.gate.run.{latest}", None))
    main(tagger.args("ner-forged", version, "--max-tpr-at-fpr", "0.2:0.99", "--allow-loose-budget"))
    tags = _tags("ner-forged", version)
    assert tags["mia.gate"] == "tampered" and tags["mia.verdict"] == "tampered"
