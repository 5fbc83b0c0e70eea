"""``mlflow-mia train-shadows`` (mlflow_mia/entrypoints/shadows_cli.py) and the input checks of
``train_shadows``: names, a second user's name, the record file, the MLproject's numbers.

Every refusal here happens before any shadow trains: the trainer counts its calls.
"""

from __future__ import annotations

import json
import shlex

import mlflow
import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient

from mlflow_mia.data import AuditDataset
from mlflow_mia.demo import shadows
from mlflow_mia.demo.shadow_record import ShadowRecipe
from mlflow_mia.demo.train import TrainConfig
from mlflow_mia.entrypoints.cli import build_parser, main
from mlflow_mia.hashing import HashKey
from mlflow_mia.options.generate import mlproject_text
from mlflow_mia.signals.testing import WORDS, tiny_bert

KEY = HashKey.from_bytes(b"s" * 32, source="test")
TEXTS = [" ".join(WORDS[i:i + 6]) for i in range(0, 48, 3)]  # 16 distinct candidate texts


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """A tiny base model, its recipe file, a candidates table, a key file and a tracking store of its own."""
    model, tokenizer = tiny_bert(seed=0, hidden=16, layers=1)
    model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    recipe = ShadowRecipe(str(tmp_path / "base"), TrainConfig(steps=1, batch_size=4, max_length=16))
    recipe.to_json(tmp_path / "recipe.json")
    pd.DataFrame({"text": TEXTS}).to_csv(tmp_path / "candidates.csv", index=False)
    pd.DataFrame({"text": TEXTS[:8], "is_member": [1, 0] * 4}).to_csv(tmp_path / "pool.csv", index=False)
    key = tmp_path / "key"
    key.write_bytes(KEY.key)
    key.chmod(0o600)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    for stale in ("MLFLOW_EXPERIMENT_ID", "MLFLOW_RUN_ID"):  # an earlier test's experiment is not in this store
        monkeypatch.delenv(stale, raising=False)
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    trained = []

    def counting(model, tokenizer, texts, config, recipe, desc):
        trained.append(config.seed)
        return shadows._default_trainer(model, tokenizer, texts, config, recipe, desc)

    try:
        yield dict(tmp=tmp_path, recipe=recipe, key=key, trained=trained, trainer=counting)
    finally:
        mlflow.set_tracking_uri(previous)


def _argv(setup, *extra, name="my-shadow", record=None):
    tmp = setup["tmp"]
    return ["train-shadows", "--recipe", str(tmp / "recipe.json"), "--candidates", str(tmp / "candidates.csv"),
            "--pool", str(tmp / "pool.csv"), "--count", "2", "--name", name, "--record",
            str(record or tmp / "shadows.json"), "--hash-key-file", str(setup["key"]), "-q", *extra]


def test_a_name_with_a_newline_or_a_slash_is_refused_before_anything_is_read(setup, capsys):
    for bad in ("my-shadow\nmia.gate=pass", "team/shadow", "shadow@champion", " lead", ""):
        assert main(_argv(setup, name=bad)) == 2
        err = capsys.readouterr().err
        if bad:
            assert f"the shadows' name {bad!r} must be 1 to 100 letters, digits and _ . -" in err
    with pytest.raises(ValueError, match="must be 1 to 100 letters, digits and _ . -"):
        shadows.train_shadows(TEXTS, recipe=setup["recipe"], count=2, name="a\nb", key=KEY)
    assert not setup["trained"] and not (setup["tmp"] / "shadows.json").exists()


def test_a_second_users_name_is_refused_and_the_first_users_shadows_keep_champion(setup):
    pool = AuditDataset(texts=TEXTS[:8], labels=[1, 0] * 4)
    args = dict(recipe=setup["recipe"], count=2, name="shared-shadow", key=KEY, progress=False, pools=[pool],
                trainer=setup["trainer"], experiment="shadows-cli-test")
    first = shadows.train_shadows(TEXTS, **args)
    assert first.trained == (0, 1) and len(setup["trained"]) == 2
    client = MlflowClient()
    champions = [client.get_model_version_by_alias(f"shared-shadow-{j}", "champion").version for j in range(2)]
    # a second user: other candidates, the same name. Refused before training; champion does not move.
    other = TEXTS[:12]
    with pytest.raises(ValueError, match=r"shared-shadow-0@champion \(version 1, shadow key [0-9a-f]{12}\), "
                                         r"shared-shadow-1@champion .* already hold\(s\) another set's model .*"
                                         r"Choose another --name, or give --force"):
        shadows.train_shadows(other, **args)
    assert len(setup["trained"]) == 2
    assert [client.get_model_version_by_alias(f"shared-shadow-{j}", "champion").version
            for j in range(2)] == champions
    # the first user's resume retrains nothing
    assert shadows.train_shadows(TEXTS, **args).trained == () and len(setup["trained"]) == 2
    # replacing them is a stated choice
    replaced = shadows.train_shadows(other, replace_others=True, **args)
    assert replaced.trained == (0, 1) and replaced.uris == ("models:/shared-shadow-0/2", "models:/shared-shadow-1/2")
    # and now the first user's run is refused in turn, naming the set that holds champion: it retrains nothing
    with pytest.raises(ValueError, match=r"shared-shadow-0@champion \(version 2, shadow key"):
        shadows.train_shadows(TEXTS, **args)
    assert len(setup["trained"]) == 4


def test_the_record_is_checked_before_training_and_never_overwrites_another_file(setup, capsys):
    tmp = setup["tmp"]
    # a record in a missing folder: refused before any shadow trains (no registered model appears)
    assert main(_argv(setup, record=tmp / "missing" / "shadows.json")) == 2
    err = capsys.readouterr().err
    assert f"the folder of --record {tmp / 'missing' / 'shadows.json'} does not exist: create {tmp / 'missing'}" in err
    assert not MlflowClient().search_registered_models()
    # a folder as the record
    assert main(_argv(setup, record=tmp)) == 2
    assert "is a folder; give the path of the record file" in capsys.readouterr().err
    # an existing file that is not these shadows' record: refused, left as it was
    precious = tmp / "notes.txt"
    precious.write_text("my notes")
    assert main(_argv(setup, record=precious)) == 2
    assert (f"--record {precious} exists and is not the record of these shadows (same candidates, recipe, --count, "
            "--halves-seed and hash key): it would be overwritten. Give another --record, or --force"
            in capsys.readouterr().err)
    assert precious.read_text() == "my notes" and not MlflowClient().search_registered_models()
    # the build writes its record; running it again (nothing to train) may rewrite its own record
    assert main(_argv(setup)) == 0
    record = json.loads((tmp / "shadows.json").read_text())
    assert main(_argv(setup)) == 0
    assert "2 shadows (0 trained now)" in capsys.readouterr().out
    assert json.loads((tmp / "shadows.json").read_text()) == record
    # another set's record (another halves seed) is not overwritten without --force
    assert main(_argv(setup, "--halves-seed", "3", name="other-shadow")) == 2
    assert "exists and is not the record of these shadows" in capsys.readouterr().err
    assert json.loads((tmp / "shadows.json").read_text()) == record
    assert main(_argv(setup, "--force", record=precious)) == 0
    assert json.loads(precious.read_text())["text_hmacs"] == record["text_hmacs"]


def test_the_mlproject_entry_passes_count_and_halves_seed_as_floats_and_the_command_takes_them():
    """MLproject has no int type: its float parameters reach the command as 4.0 when given so."""
    entry = yaml.safe_load(mlproject_text())["entry_points"]["train-shadows"]
    assert entry["parameters"]["count"]["type"] == "float" and entry["parameters"]["halves_seed"]["type"] == "float"
    values = {name: spec.get("default") for name, spec in entry["parameters"].items()}
    values.update(count=4.0, halves_seed=2.0)
    command = entry["command"].format(**{k: shlex.quote(str(v)) for k, v in values.items()})
    command += " --recipe r.json --candidates c.csv --name s --record s.json"  # passed on by -P name=value
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert (args.count, args.halves_seed) == (4, 2) and isinstance(args.count, int)
    for flag, bad in (("--count", "4.5"), ("--count", "0"), ("--halves-seed", "-1"), ("--count", "four")):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["train-shadows", flag, bad])
