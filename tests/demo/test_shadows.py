"""Tests of mlflow_mia/demo/shadows.py and shadow_record.py: recipe-matched shadows on balanced halves, resumed."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import mlflow
from mlflow import MlflowClient

from mlflow_mia.demo import shadows
from mlflow_mia.demo.shadow_record import ShadowRecipe, ShadowRecord, balanced_halves, shadow_membership
from mlflow_mia.demo.dp import DPConfig
from mlflow_mia.demo.train import TrainConfig
from mlflow_mia.data import AuditDataset
from mlflow_mia.hashing import HashKey, lookup_hash
from mlflow_mia.signals.testing import WORDS, tiny_bert

KEY = HashKey.from_bytes(b"k" * 32, source="test")
TEXTS = [" ".join(WORDS[i:i + 6]) for i in range(0, 72, 3)]  # 24 distinct candidate texts
GROUPS = [f"article-{i // 2}" for i in range(len(TEXTS))]  # two texts per article
POOL = AuditDataset(texts=TEXTS[:8], labels=[1, 0] * 4)  # the audited pool the record is bound to


def test_balanced_halves_put_each_unit_in_exactly_half_of_an_even_number_of_shadows():
    member = balanced_halves(200, 6, seed=3)
    assert member.shape == (6, 200) and member.dtype == bool
    assert (member.sum(axis=0) == 3).all()
    assert np.array_equal(member, balanced_halves(200, 6, seed=3))
    assert not np.array_equal(member, balanced_halves(200, 6, seed=4))
    assert 70 < member.sum(axis=1).min() and member.sum(axis=1).max() < 130  # each shadow: about half
    odd = balanced_halves(400, 5, seed=0).sum(axis=0)
    assert set(odd.tolist()) == {2, 3} and 150 < (odd == 3).sum() < 250
    with pytest.raises(ValueError, match="need k >= 1 shadow models"):
        balanced_halves(10, 0)


def test_recipe_round_trips_through_its_json_file_and_rejects_unknown_keys(tmp_path):
    recipe = ShadowRecipe("models:/bbc-base/1", TrainConfig(epochs=15.0, batch_size=16, learning_rate=5e-4),
                          dp=DPConfig(target_epsilon=8.0, freeze=("bert.embeddings.",)))
    recipe.to_json(tmp_path / "recipe.json")
    assert ShadowRecipe.from_json(tmp_path / "recipe.json") == recipe
    assert recipe.params()["recipe.epochs"] == 15.0 and recipe.params()["recipe.dp.target_epsilon"] == 8.0
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['lr'\] in the recipe 'train'"):
        ShadowRecipe.from_dict({"base_model": "x", "train": {"lr": 1e-3}})
    with pytest.raises(ValueError, match="base_model must name the model the target was fine-tuned from"):
        ShadowRecipe.from_dict({"train": {}})


def _audit(tmp, record_path):
    """The base as a stand-in target, audited with the registered shadows (pool: 8 candidates, population: 16)."""
    from mlflow_mia.config import AuditConfig, MetricConfig, SignalConfig
    from mlflow_mia.data import AuditDataset, PopulationSet

    pool = POOL
    population = PopulationSet(texts=TEXTS[8:])
    config = AuditConfig(attacks=("lira_online", "lira_offline", "rmia"), signal=SignalConfig(num_masks=2),
                         metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=10))
    return shadows.audit_with_shadows(str(tmp / "base"), pool, population, record=record_path, key=KEY,
                                      config=config, progress=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A killed build of 4 shadows (it dies while training the third), then the resumed build."""
    tmp = tmp_path_factory.mktemp("shadows")
    model, tokenizer = tiny_bert(seed=0, hidden=16, layers=1)
    model.save_pretrained(tmp / "base")
    tokenizer.save_pretrained(tmp / "base")
    recipe = ShadowRecipe(str(tmp / "base"), TrainConfig(steps=2, batch_size=4, max_length=16))
    seen = []

    def counting(model, tokenizer, texts, config, recipe, desc):
        if killed and len(seen) == 2:
            raise KeyboardInterrupt("killed")
        seen.append((config.seed, list(texts)))
        return shadows._default_trainer(model, tokenizer, texts, config, recipe, desc)

    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{tmp}/mlflow.db")
    try:
        args = dict(recipe=recipe, count=4, name="tiny-shadow", groups=GROUPS, seed=1, key=KEY, progress=False,
                    trainer=counting, experiment="shadows-test", pools=[POOL])
        killed = True
        with pytest.raises(KeyboardInterrupt):
            shadows.train_shadows(TEXTS, **args)
        first = list(seen)
        killed = False
        resumed = shadows.train_shadows(TEXTS, record_path=tmp / "record.json", **args)
        again = shadows.train_shadows(TEXTS, **args)
        runs = {r: MlflowClient().get_run(r) for r in resumed.run_ids}
        audit = _audit(tmp, tmp / "record.json")
        artifacts = {r: mlflow.artifacts.load_dict(f"runs:/{r}/shadow_training.json") for r in resumed.run_ids}
        yield dict(first=first, seen=seen, resumed=resumed, again=again, runs=runs, artifacts=artifacts, tmp=tmp,
                   recipe=recipe, audit=audit)
    finally:
        mlflow.set_tracking_uri(previous)


def test_a_resumed_build_trains_only_the_shadows_the_killed_one_did_not_register(built):
    assert [seed for seed, _ in built["first"]] == [1, 2]  # shadows 0 and 1 registered before the kill
    assert [seed for seed, _ in built["seen"]] == [1, 2, 3, 4]  # the resumed call trained shadows 2 and 3 only
    assert built["resumed"].trained == (2, 3)
    assert built["again"].trained == () and built["again"].uris == built["resumed"].uris
    assert built["resumed"].uris == tuple(f"models:/tiny-shadow-{j}/1" for j in range(4))


def test_each_shadow_trained_on_exactly_its_recorded_half_and_never_outside_it(built):
    record = ShadowRecord.from_json(built["tmp"] / "record.json")
    member = shadow_membership(record, TEXTS, KEY)  # (texts, shadows)
    assert member.shape == (24, 4)
    assert (member.sum(axis=1) == 2).all()  # the balanced design: each text IN for 2 of 4 shadows
    assert np.array_equal(member[0::2], member[1::2])  # a group (article) is IN or OUT as a whole
    for j, (_, texts) in enumerate(built["seen"]):
        assert sorted(texts) == sorted(t for t, m in zip(TEXTS, member[:, j]) if m)
    # a text that is not a candidate is OUT of every shadow
    assert not shadow_membership(record, ["a text no shadow saw"], KEY).any()
    with pytest.raises(ValueError, match="the shadow record was written under the key with check"):
        shadow_membership(record, TEXTS, b"another key of thirty-two bytes or more")


def test_the_record_and_the_runs_hold_keyed_hashes_and_the_recipe_never_the_texts(built):
    raw = (built["tmp"] / "record.json").read_text()
    assert not any(t in raw for t in TEXTS)
    record = json.loads(raw)
    assert record["text_hmacs"] == [lookup_hash(t, KEY) for t in TEXTS]
    for j, run_id in zip((2, 3), built["resumed"].run_ids):
        params = built["runs"][run_id].data.params
        assert params["shadow.index"] == str(j) and params["recipe.steps"] == "2"
        assert params["recipe.batch_size"] == "4" and params["recipe.max_length"] == "16"
        assert params["shadow.train_seed"] == str(j + 1) and params["shadow.key_check"] == KEY.check
        logged = built["artifacts"][run_id]
        assert logged["trained_on"] == sorted(lookup_hash(t, KEY) for t in built["seen"][j][1])
        assert not any(t in json.dumps(logged) for t in TEXTS)


def test_a_random_key_or_duplicate_candidates_are_refused_before_training(tmp_path):
    recipe = ShadowRecipe(str(tmp_path / "none"))
    with pytest.raises(ValueError, match="a random key would make it unreadable: set MLFLOW_MIA_HASH_KEY"):
        shadows.train_shadows(TEXTS, recipe=recipe, count=2, name="x", key=HashKey.random())
    with pytest.raises(ValueError, match="1 candidate texts are duplicates; drop them"):
        shadows.train_shadows(TEXTS + TEXTS[:1], recipe=recipe, count=2, name="x", key=KEY)


def test_an_audit_with_the_shadows_runs_lira_online_and_the_offline_attacks_on_out_halves(built):
    result = built["audit"]
    assert list(result.attacks) == ["lira_online", "lira_offline", "rmia"]
    assert np.isfinite(result.samples["score_lira_online"]).all()
    settings = result.info["attack_settings"]
    assert settings["lira_online"]["n_shadows"] == 4 and settings["lira_online"]["spread"] == "global"
    assert settings["lira_offline"]["references_used"] == "OUT halves (shadow_membership)"
    assert settings["rmia"]["offline_a_source"].startswith("fitted")
    assert [result.models[r]["identity"] for r in ("reference", "reference_2", "reference_3", "reference_4")] == [
        f"models:/tiny-shadow-{j}/1" for j in range(4)]


def test_the_demo_recipe_is_the_targets_base_and_fine_tuning_settings():
    from mlflow_mia.demo.build import DEMO_SIZES

    recipe = shadows.demo_recipe("small")
    assert recipe.base_model == "models:/bbc-small-base@champion"
    assert recipe.train == DEMO_SIZES["small"].finetune and recipe.dp is None
    with pytest.raises(ValueError, match="unknown demo size 'huge'"):
        shadows.demo_recipe("huge")


def test_membership_is_added_only_to_signals_of_the_records_shadows_in_its_order(built):
    from mlflow_mia.data import AuditDataset, PopulationSet
    from mlflow_mia.audits.membership.signals import AuditSignals
    from mlflow_mia.signals.types import SignalResult

    record = ShadowRecord.from_json(built["tmp"] / "record.json")
    pool, population = POOL, PopulationSet(texts=TEXTS[8:])
    sig = SignalResult.from_arrays(np.arange(24.0), n_tokens=np.full(24, 5))
    roles = ("reference", "reference_2", "reference_3", "reference_4")
    swapped = [record.uris[1], record.uris[0], *record.uris[2:]]
    for uris, ok in ((record.uris, True), (swapped, False)):
        signals = AuditSignals({"target": sig, "references": [sig] * 4},
                               info={"models": {r: {"identity": u, "weights": w}
                                                for r, u, w in zip(roles, uris, record.weights)}})
        if ok:
            out = shadows.with_shadow_membership(signals, record, KEY, pool=pool, population=population)
            assert np.array_equal(out["shadow_membership"], shadow_membership(record, TEXTS, KEY))
        else:
            with pytest.raises(ValueError, match="are not the record's shadows"):
                shadows.with_shadow_membership(signals, record, KEY, pool=pool, population=population)
    with pytest.raises(ValueError, match="the signals have 2 reference models but the record has 4 shadows"):
        shadows.with_shadow_membership(AuditSignals({"target": sig, "references": [sig] * 2}), record, KEY,
                                       pool=pool, population=population)


def test_a_recipe_with_dp_sgd_trains_the_shadow_with_opacus_and_returns_its_privacy_metrics():
    pytest.importorskip("opacus")
    model, tokenizer = tiny_bert(seed=0, hidden=16, layers=1)
    recipe = ShadowRecipe("base", TrainConfig(steps=2, batch_size=4, max_length=16),
                          dp=DPConfig(target_epsilon=None, noise_multiplier=1.0))
    result, metrics = shadows._default_trainer(model, tokenizer, TEXTS[:8], recipe.train, recipe, None)
    assert result.steps == 2
    assert metrics["dp/noise_multiplier"] == 1.0 and metrics["dp/epsilon"] > 0


def test_the_audit_command_with_the_shadows_record_runs_lira_online_in_the_gates_attack_set(built, tmp_path, capsys):
    import pandas as pd

    from mlflow_mia.entrypoints.cli import main

    tmp, uris = built["tmp"], built["resumed"].uris
    pd.DataFrame({"text": TEXTS[:8], "is_member": [1, 0] * 4}).to_csv(tmp_path / "pool.csv", index=False)
    pd.DataFrame({"text": TEXTS[8:]}).to_csv(tmp_path / "population.csv", index=False)
    key = tmp_path / "key"
    key.write_bytes(KEY.key)
    key.chmod(0o600)
    common = ["audit", "--target", str(tmp / "base"), "--data", str(tmp_path / "pool.csv"), "--population",
              str(tmp_path / "population.csv"), "--reference", ",".join(uris), "--shadow-record",
              str(tmp / "record.json"), "--num-masks", "2", "--fprs", "0.1", "--bootstrap-rounds", "10", "-q",
              "--no-progress"]
    code = main(common + ["--hash-key-file", str(key), "--max-tpr-at-fpr", "0.1:0.5", "--run-name", "online"])
    assert code in (0, 3), capsys.readouterr().err  # passed or inconclusive on 8 texts; never an error
    run = mlflow.search_runs(filter_string="attributes.run_name LIKE '%] online'", search_all_experiments=True,
                             output_format="list")[0]
    attacks = json.loads(mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/audit_config.json"))["attacks"]
    assert attacks == ["loss", "zlib", "min_k", "min_k_plus_plus", "likelihood_ratio", "lira_offline", "rmia",
                       "lira_online"]
    assert any(k.startswith("lira_online") for k in run.data.metrics)
    # which record decided: its digest in the run's tags and in audit_config.json, with the direction check
    digest = ShadowRecord.from_json(tmp / "record.json").digest
    assert run.data.tags["mia.shadow_record.digest"] == digest and "shadow_record.digest" not in run.data.params
    logged = json.loads(mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/audit_config.json"))["models"]
    assert logged["shadow_record"]["digest"] == digest and logged["shadow_record"]["direction"]["n_units"] > 0
    # the record read under another key, or with the shadows in another order: a usage error naming the fix
    other = tmp_path / "other"
    other.write_bytes(b"o" * 32)
    other.chmod(0o600)
    assert main(common + ["--hash-key-file", str(other)]) == 2
    assert "give the key the shadows were trained with" in capsys.readouterr().err
    swapped = [uris[1], uris[0], *uris[2:]]
    assert main(common + ["--hash-key-file", str(key), "--reference", ",".join(swapped)]) == 2
    assert "give the record's shadows as the references, in its order" in capsys.readouterr().err


def test_the_train_shadows_command_resumes_the_registered_shadows_and_writes_their_record(built, tmp_path, capsys):
    import pandas as pd

    from mlflow_mia.entrypoints.cli import main

    built["recipe"].to_json(tmp_path / "recipe.json")
    pd.DataFrame({"text": TEXTS, "article": GROUPS}).to_csv(tmp_path / "pool.csv", index=False)
    pd.DataFrame({"text": POOL.texts, "is_member": POOL.labels}).to_csv(tmp_path / "audited.csv", index=False)
    key = tmp_path / "key"
    key.write_bytes(KEY.key)
    key.chmod(0o600)
    argv = ["train-shadows", "--recipe", str(tmp_path / "recipe.json"), "--candidates", str(tmp_path / "pool.csv"),
            "--candidates-group-column", "article", "--count", "4", "--name", "tiny-shadow", "--halves-seed", "1",
            "--record",
            str(tmp_path / "shadows.json"), "--hash-key-file", str(key), "--pool", str(tmp_path / "audited.csv"), "-q"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "4 shadows (0 trained now)" in out  # every shadow was registered with its key: nothing retrained
    assert f"--reference {','.join(built['resumed'].uris)} --shadow-record {tmp_path / 'shadows.json'}" in out
    assert json.loads((tmp_path / "shadows.json").read_text()) == json.loads((built["tmp"] / "record.json").read_text())
    assert main(argv[:5] + ["--count", "4"]) == 2
    assert "train-shadows needs --name, --record, --pool" in capsys.readouterr().err


def test_demo_shadows_need_an_even_count_of_four_or_more_and_the_demo_target(tmp_path):
    from types import SimpleNamespace

    from mlflow_mia.demo.online_shadows import build_demo_shadows, demo_key_file
    from mlflow_mia.entrypoints.common import demo_shadows_for_audit

    for count in (2, 5, True):
        with pytest.raises(ValueError, match="need an even count >= 4 .* e.g. --demo-shadows 4"):
            build_demo_shadows(count, size="small")
    demo = SimpleNamespace(target_uri="models:/bbc-small-target@candidate", size="small")
    args = SimpleNamespace(demo_shadows=4, reference=None, shadow_record=None, no_progress=True)
    with pytest.raises(ValueError, match="--demo-shadows trains shadows of the demo target; for your own model"):
        demo_shadows_for_audit(args, {}, None, "models:/mine/1")
    with pytest.raises(ValueError, match="leave out --reference and --shadow-record"):
        demo_shadows_for_audit(SimpleNamespace(**{**vars(args), "reference": "models:/r/1"}), {}, demo,
                               demo.target_uri)
    path = demo_key_file(tmp_path)
    with open(path, "rb") as fh:
        first = fh.read()
    assert (os.stat(path).st_mode & 0o777) == 0o600 and len(first) == 32
    assert demo_key_file(tmp_path) == path
    with open(path, "rb") as fh:
        assert fh.read() == first  # kept: the record stays readable by later audits
