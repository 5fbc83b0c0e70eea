"""Signals on Apache Spark (``engines/spark_executors.py``) and the audit on top (``spark_audit.py``).

One local[2] session for the whole module; skipped with a reason when pyspark or
a Java runtime is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'mlflow-mia[spark]')")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java runtime (java on PATH or JAVA_HOME): Spark cannot start", allow_module_level=True)

from mlflow_mia.config import SignalConfig  # noqa: E402
from mlflow_mia.signals.cache import CacheCorruptError  # noqa: E402
from mlflow_mia.engines.spark_executors import (SparkSignalError, _score_batches, collect_signals,  # noqa: E402
                                           model_spec, spark_signals)
from mlflow_mia.signals import MaskedLM, compute_signals  # noqa: E402
from mlflow_mia.signals.testing import WORDS, tiny_bert  # noqa: E402
from mlflow_mia.tracking.descriptions import name_without_verdict  # noqa: E402

CONFIG = SignalConfig(num_masks=3)
LONG = " ".join(["cat"] * 80)  # longer than the tiny model's 64 tokens: truncated


def _texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = [w for w in WORDS if w.isalpha()]
    return [" ".join(rng.choice(words, size=int(rng.integers(3, 20)))) + f" {i}" for i in range(n)]


@pytest.fixture(scope="module")
def spark():
    """A local[2] session whose workers run this interpreter and import this copy of mlflow_mia."""
    import mlflow_mia
    from mlflow_mia.engines.spark import spark_session

    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYTHONPATH", "TRANSFORMERS_VERBOSITY")}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    root = str(Path(mlflow_mia.__file__).resolve().parents[1])
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, saved["PYTHONPATH"]) if p)
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    session = spark_session("local[2]", app_name="mlflow-mia-tests", conf={
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _saved_tiny_bert(tmp_path_factory, name: str, seed: int) -> str:
    """A folder holding a tiny random BERT and its tokenizer (what an executor loads)."""
    model, tok = tiny_bert(seed=seed)
    path = tmp_path_factory.mktemp(name)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return _saved_tiny_bert(tmp_path_factory, "spark_model", seed=3)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return _texts(39) + [LONG]


@pytest.fixture(scope="module")
def local(model_dir, texts):
    """``compute_signals`` in this process: the oracle."""
    return compute_signals(MaskedLM.from_pretrained(model_dir), texts, CONFIG, progress=False)


def _frame(spark, texts, ids=None):
    ids = list(range(len(texts))) if ids is None else ids
    return spark.createDataFrame(pd.DataFrame({"id": ids, "text": texts}))


def _assert_equal(res, local, rows=None):
    rows = np.arange(len(local)) if rows is None else np.asarray(rows)
    assert np.max(np.abs(res.values - local.values[rows])) <= 1e-5
    np.testing.assert_array_equal(res.n_tokens, local.n_tokens[rows])
    np.testing.assert_array_equal(res.truncated, local.truncated[rows])
    for a, i in zip(res.token_logprobs, rows):
        np.testing.assert_allclose(a, local.token_logprobs[i], atol=1e-5, rtol=0)
    for name in ("token_mu", "token_sigma"):  # Min-K%++'s statistics travel with the log-probs
        for a, i in zip(getattr(res, name), rows):
            np.testing.assert_allclose(a, getattr(local, name)[i], atol=1e-5, rtol=0)


@pytest.mark.parametrize("partitions,batch", [(1, 10000), (4, 3)])
def test_spark_energies_equal_compute_signals(spark, model_dir, texts, local, partitions, batch):
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch))
    try:
        df = _frame(spark, texts).repartition(partitions)
        assert df.rdd.getNumPartitions() == partitions
        job = spark_signals(df, model_dir, CONFIG, check_ids=False)
        order = list(range(len(texts)))[::-1]  # any order: rows are matched by id
        res = collect_signals(job.frame, order)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert job.frame.columns == ["id", "text_hash", "energy", "n_tokens", "truncated", "token_logprobs", "token_mu",
                                 "token_sigma"]
    assert res.truncated[0] and res.n_truncated == 1  # LONG, now first
    _assert_equal(res, local, order)


def test_store_rerun_writes_nothing_and_superset_computes_only_new(spark, model_dir, texts, local, tmp_path):
    store = str(tmp_path / "store")
    first = spark_signals(_frame(spark, texts[:20]), model_dir, CONFIG, store=store)
    assert first.computed == 20
    files = sorted(p for p in Path(store).rglob("*.parquet"))
    assert 1 <= len(files) <= 2  # one wave, one file per core of local[2] (was one per shuffle partition: ~200)
    assert files and all(f"model_key={first.model_key}" in str(p) and f"settings={first.settings}" in str(p)
                         for p in files)
    again = spark_signals(_frame(spark, texts[:20]), model_dir, CONFIG, store=store)
    assert again.computed == 0 and sorted(Path(store).rglob("*.parquet")) == files
    # a superset, with one text twice under two ids: only the 20 new distinct texts are computed
    ids = [f"t{i}" for i in range(len(texts))] + ["dup"]
    superset = spark_signals(_frame(spark, texts + [texts[25]], ids), model_dir, CONFIG, store=store, waves=2)
    assert superset.computed == 20
    assert spark.read.parquet(store).count() == len(texts)  # one row per text hash, no duplicates
    res = collect_signals(superset.frame, ids)
    _assert_equal(res, local, list(range(len(texts))) + [25])
    # other settings are another partition: nothing of the first is reused
    other = spark_signals(_frame(spark, texts[:5]), model_dir, SignalConfig(num_masks=2), store=store)
    assert other.computed == 5 and other.settings != first.settings


def test_statistics_only_when_asked_and_a_job_that_needs_them_upgrades_the_store(spark, model_dir, texts, local,
                                                                                 tmp_path):
    store, few = str(tmp_path / "store"), texts[:6]
    plain = spark_signals(_frame(spark, few), model_dir, CONFIG, store=store, stats=False)
    assert plain.computed == 6
    assert spark.read.parquet(store).where("token_mu IS NOT NULL OR token_sigma IS NOT NULL").count() == 0
    res = collect_signals(plain.frame, range(6))
    assert not res.has_token_stats
    np.testing.assert_allclose(res.values, local.values[:6], atol=1e-5, rtol=0)  # equal to a local run
    for a, b in zip(res.token_logprobs, local.token_logprobs[:6]):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    assert spark_signals(_frame(spark, few), model_dir, CONFIG, store=store, stats=False).computed == 0
    full = spark_signals(_frame(spark, few), model_dir, CONFIG, store=store)  # rows without them are recomputed
    assert full.computed == 6
    _assert_equal(collect_signals(full.frame, range(6)), local, range(6))
    for stats in (True, False):  # the superset rows now serve both
        assert spark_signals(_frame(spark, few), model_dir, CONFIG, store=store, stats=stats).computed == 0


def test_bad_input_is_a_clear_error_on_the_driver(spark, model_dir):
    df = _frame(spark, ["the cat sat", "a dog ran"])
    with pytest.raises(SparkSignalError, match="no text column 'body'"):
        spark_signals(df, model_dir, CONFIG, text_column="body")
    with pytest.raises(SparkSignalError, match="type bigint, not string"):
        spark_signals(df, model_dir, CONFIG, text_column="id", id_column="text")
    with pytest.raises(SparkSignalError, match="id 'a' occurs 2 times"):
        spark_signals(_frame(spark, ["the cat", "the dog"], ["a", "a"]), model_dir, CONFIG)
    nulls = spark.createDataFrame(pd.DataFrame({"id": ["x1", "x2"], "text": ["the cat sat", None]}))
    job = spark_signals(nulls, model_dir, CONFIG)
    with pytest.raises(SparkSignalError, match="text of id 'x2' is null"):
        collect_signals(job.frame, ["x1", "x2"])


def test_executor_errors_name_the_text_and_the_model(model_dir):
    """The executor side of the checks, run in-process (no Spark job)."""
    # no tracking or registry URI: in this process they would be set for the tests that follow
    spec = {**model_spec(model_dir, CONFIG), "device": None, "tracking_uri": None, "registry_uri": None}

    def run(spec_, pdf):
        return list(_score_batches(iter([pdf]), spec_, "id", "text"))

    batch = pd.DataFrame({"id": [7, 8], "text": ["the cat", "   "], "text_hash": ["0" * 64, "1" * 64]})
    with pytest.raises(SparkSignalError, match="text of id 8 is empty"):
        run(spec, batch)
    out = run(spec, batch.iloc[:1])[0]
    assert list(out.columns) == ["id", "text_hash", "energy", "n_tokens", "truncated", "token_logprobs", "token_mu",
                                 "token_sigma"]
    with pytest.raises(SparkSignalError, match="cannot load the target model '/no/such/model'"):
        run({**spec, "load_uri": "/no/such/model"}, batch)
    with pytest.raises(SparkSignalError, match="another tokenizer than on the driver"):
        run({**spec, "load_uri": spec["load_uri"] + "/.", "tokenizer_id": "f" * 64}, batch)
    with pytest.raises(ValueError, match="model URI or a folder"):
        model_spec(tiny_bert(), CONFIG)


def test_unloadable_model_on_an_executor_surfaces_on_the_driver(spark, model_dir):
    spec = {**model_spec(model_dir, CONFIG), "load_uri": "/no/such/model"}
    job = spark_signals(_frame(spark, ["the cat sat"]), None, CONFIG, spec=spec)
    with pytest.raises(SparkSignalError, match="an executor cannot load the target model '/no/such/model'") as err:
        collect_signals(job.frame, [0])
    assert len(str(err.value).splitlines()) == 1


def test_cli_audit_on_spark_logs_the_local_metrics(spark, tracking):
    from mlflow import MlflowClient

    from mlflow_mia.entrypoints.cli import main

    args = ["audit", "--target", "models:/tgt@candidate", *tracking.cli_args()]
    assert main([*args, "--run-name", "local"]) == 0
    assert main([*args, "--engine", "spark", "--spark-master", "local[2]", "--run-name", "spark"]) == 0
    runs = {name_without_verdict(r.info.run_name): r
            for r in MlflowClient().search_runs([os.environ["MLFLOW_EXPERIMENT_ID"]])}
    local, remote = runs["local"].data.metrics, runs["spark"].data.metrics
    keys = [k for k in local if k.endswith("/auc") or "/tpr_at_fpr_" in k or "_at_pop_fpr_" in k]
    assert {"loss/auc", "likelihood_ratio/auc", "likelihood_ratio/tpr_at_fpr_0.05"} <= set(keys)
    assert {k: remote[k] for k in keys} == pytest.approx({k: local[k] for k in keys}, abs=1e-9)


@pytest.fixture(scope="module")
def reference_dir(tmp_path_factory) -> str:
    return _saved_tiny_bert(tmp_path_factory, "spark_reference", seed=4)


@pytest.fixture(scope="module")
def audit_data():
    from mlflow_mia.data import AuditDataset, PopulationSet

    texts = _texts(70, seed=5)
    return AuditDataset(texts=texts[:30], labels=[1] * 15 + [0] * 15), PopulationSet(texts=texts[30:])


def _audit_config(**overrides):
    from mlflow_mia.config import AuditConfig, MetricConfig

    settings = {"attacks": ("loss", "likelihood_ratio", "min_k", "zlib"), "signal": CONFIG,
                "metrics": MetricConfig(fprs=(0.1,), bootstrap_rounds=20, length_bins=((0, 8), (8, 64)))}
    return AuditConfig(**{**settings, **overrides})


def _bad_inputs(pool, population):
    """Bad inputs of an audit: (name, run_audit keyword overrides, the error's pattern)."""
    from mlflow_mia.config import MetricConfig
    from mlflow_mia.data import AuditDataset, PopulationSet

    return [
        ("unknown attack", {"config": _audit_config(attacks=("loss", "lira"))}, r"unknown attack\(s\) \['lira'\]"),
        ("missing reference", {"references": None}, r"\['likelihood_ratio'\] need a reference model"),
        ("one class", {"pool": AuditDataset(texts=pool.texts[:15], labels=[1] * 15)}, r"no non-members"),
        ("small population", {"config": _audit_config(metrics=MetricConfig(fprs=(0.01,)))},
         r"has 40 samples; a threshold at FPR 0.01 needs at least 100"),
        ("overlap", {"population": PopulationSet(texts=population.texts + pool.texts[:2])},
         r"2 text\(s\) are both in the target pool and the population set"),
    ]


def test_both_engines_raise_the_same_errors_in_the_same_order(spark, model_dir, reference_dir, audit_data,
                                                               monkeypatch):
    from mlflow_mia.audits.membership import run_audit
    from mlflow_mia.engines import spark as spark_audit
    from mlflow_mia.engines.spark import SparkEngine

    pool, population = audit_data
    monkeypatch.setattr(spark_audit, "spark_model_signals", lambda *a, **k: pytest.fail("a Spark job ran"))
    for name, overrides, pattern in _bad_inputs(pool, population):
        errors = {}
        for engine in ("local", "spark"):
            kwargs = {"references": [reference_dir], "config": _audit_config(), "pool": pool,
                      "population": population, **overrides}
            with pytest.raises(ValueError) as err:
                run_audit(model_dir, kwargs.pop("pool"), kwargs.pop("population"),
                          engine=SparkEngine(spark) if engine == "spark" else engine, progress=False, **kwargs)
            errors[engine] = str(err.value)
        assert errors["local"] == errors["spark"], name
        assert re.search(pattern, errors["local"]), (name, errors["local"])
    # several bad inputs at once: the first check wins, whatever the engine
    both = {"references": None, "config": _audit_config(metrics={"fprs": (0.01,)})}
    for engine in ("local", "spark"):
        with pytest.raises(ValueError, match=r"need a reference model"):
            run_audit(model_dir, pool, population, engine=SparkEngine(spark) if engine == "spark" else engine,
                      progress=False, **both)


def test_spark_engine_refuses_neighbour_attacks_before_any_model_loads(spark, tmp_path):
    from mlflow_mia.audits.membership import run_audit
    from mlflow_mia.config import AuditConfig
    from mlflow_mia.engines.spark import SparkEngine

    with pytest.raises(ValueError, match=r"attack\(s\) \['neighbourhood'\] do not run on the Spark engine yet: "
                                         r"their input\(s\) \['neighbour_values'\]"):
        run_audit(str(tmp_path / "no-such-model"), None, None, config=AuditConfig(attacks=("neighbourhood",)),
                  engine=SparkEngine(spark))


def test_local_and_spark_engines_give_equal_metrics(spark, model_dir, reference_dir, audit_data, tmp_path):
    from mlflow_mia.audits.membership import run_audit
    from mlflow_mia.engines.spark import SparkEngine

    pool, population = audit_data
    config = _audit_config()
    local = run_audit(model_dir, pool, population, references=[reference_dir], config=config, progress=False)
    remote = run_audit(model_dir, pool, population, references=[reference_dir], config=config,
                       engine=SparkEngine(spark, store=str(tmp_path / "store")), progress=False)
    assert (local.info["engine"], remote.info["engine"]) == ("local", "spark")
    assert "signals_spark_s" in remote.info["timings"]
    assert list(remote.metrics) == list(local.metrics)
    assert remote.metrics == pytest.approx(local.metrics, abs=1e-5, nan_ok=True)
    for name in config.attacks:
        np.testing.assert_allclose(remote.samples[f"score_{name}"], local.samples[f"score_{name}"], atol=1e-5)
    assert {r: m["identity"] for r, m in remote.models.items()} == {r: m["identity"] for r, m in local.models.items()}
    assert remote.warnings == local.warnings  # the same tables, skipped for the same reasons
    assert not any("token ids" in w for w in remote.warnings)  # token ids from the driver's tokenizer
    # no attack of the config declares Min-K%++'s statistics: the executors did not compute them
    assert spark.read.parquet(str(tmp_path / "store")).where("token_mu IS NOT NULL").count() == 0
    # the engine's name (its defaults: the active session, no store) takes the same path as the object
    again = run_audit(model_dir, pool, population, references=[reference_dir], config=config, engine="spark",
                      progress=False)
    assert again.metrics == pytest.approx(remote.metrics, abs=1e-12, nan_ok=True)


def test_reference_set_signals_on_the_executors_equal_local(spark, model_dir, reference_dir, audit_data, tmp_path):
    from mlflow_mia.audits.membership import run_audit
    from mlflow_mia.engines.spark import SparkEngine

    second = tmp_path / "second_reference"
    model, tok = tiny_bert(seed=6)
    model.save_pretrained(second)
    tok.save_pretrained(second)
    pool, population = audit_data
    config = _audit_config(attacks=("likelihood_ratio", "lira_offline", "rmia"))
    refs = [reference_dir, str(second)]
    local = run_audit(model_dir, pool, population, references=refs, config=config, progress=False)
    remote = run_audit(model_dir, pool, population, references=refs, config=config, engine=SparkEngine(spark),
                       progress=False)
    assert list(remote.attacks) == ["likelihood_ratio", "likelihood_ratio.reference_2", "lira_offline", "rmia"]
    # Each reference's signals came from the executors: its likelihood ratio equals the local one.
    for name in remote.attacks:
        np.testing.assert_allclose(remote.samples[f"score_{name}"], local.samples[f"score_{name}"], atol=1e-5)
    assert remote.metrics == pytest.approx(local.metrics, abs=1e-5, nan_ok=True)
    assert {r: m["identity"] for r, m in remote.models.items()} == {r: m["identity"] for r, m in local.models.items()}
    assert {"reference", "reference_2"} <= set(remote.models)


def test_scorer_as_spark_udf_returns_compute_signals(spark, tracking):
    import mlflow

    from mlflow_mia.models.resolve import resolve_model
    from mlflow_mia.entrypoints.scorer import log_scorer, scorer_result_type

    texts = list(tracking.pool["text"][:8])
    with mlflow.start_run():
        log_scorer("models:/tgt@candidate", CONFIG, registered_model_name="tgt-mia-scorer-udf")
    score = mlflow.pyfunc.spark_udf(spark, "models:/tgt-mia-scorer-udf/1", result_type=scorer_result_type(),
                                    env_manager="local")
    out = _frame(spark, texts).withColumn("s", score("text")).select("id", "s.*").toPandas().sort_values("id")
    expected = compute_signals(resolve_model("models:/tgt/2").lm, texts, CONFIG, progress=False)
    assert np.max(np.abs(out["energy"].to_numpy() - expected.values)) <= 1e-5
    np.testing.assert_array_equal(out["n_tokens"].to_numpy(), expected.n_tokens)


@pytest.fixture(scope="module")
def six_texts_store(spark, model_dir, texts, tmp_path_factory) -> Path:
    """A store holding the signals of ``texts[:6]`` (filled once; tests attack copies of it)."""
    store = tmp_path_factory.mktemp("six") / "store"
    spark_signals(_frame(spark, texts[:6]), model_dir, CONFIG, store=str(store), waves=1)
    return store


def _copy_of(store: Path, tmp_path) -> tuple[str, list[Path]]:
    """A copy of ``store`` and its Parquet files."""
    shutil.copytree(store, tmp_path / "store")
    files = sorted((tmp_path / "store").rglob("*.parquet"))
    assert 1 <= len(files) <= 2  # one wave: at most one file per core
    return str(tmp_path / "store"), files


def _rewrite(path: Path, **columns) -> None:
    """An attacker's edit of a store file: new column values, Hadoop's .crc files deleted."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    for name, values in columns.items():
        field = table.schema.field(name)
        table = table.set_column(table.schema.get_field_index(name), field, pa.array(values, type=field.type))
    pq.write_table(table, path)
    for crc in path.parent.glob(".*.crc"):
        crc.unlink()


def test_poisoned_spark_store_rows_are_refused_naming_the_file(spark, model_dir, texts, six_texts_store, tmp_path):
    """Every stored energy set to one value, with a MAC recomputed under the attacker's own key: refused."""
    import pyarrow.parquet as pq

    from mlflow_mia.signals.store_key import derive_key, row_mac

    store, files = _copy_of(six_texts_store, tmp_path)
    spec = model_spec(model_dir, CONFIG)
    forged = derive_key(b"attacker" * 4, f"spark-store/{spec['model_key']}/{spec['settings']}")
    for path in files:
        rows = pq.read_table(path).to_pandas()
        macs = [row_mac(forged, ["spark-store", spec["model_key"], spec["settings"], h, 1.0, int(n), bool(t),
                                 np.asarray(lp, dtype="<f4").tobytes()])
                for h, n, t, lp in zip(rows["text_hash"], rows["n_tokens"], rows["truncated"], rows["token_logprobs"])]
        _rewrite(path, signal=[1.0] * len(rows), mac=macs)
    with pytest.raises(CacheCorruptError, match=r"Spark store file file:\S*/part-\S+\.parquet holds \d row\(s\) whose "
                                                r"MAC does not verify.*Delete the file") as err:
        collect_signals(spark_signals(_frame(spark, texts[:8]), model_dir, CONFIG, store=store).frame, range(8))
    assert len(str(err.value).splitlines()) == 1


def test_spark_store_read_with_another_key_is_refused(spark, model_dir, texts, six_texts_store, tmp_path,
                                                      monkeypatch):
    store, _ = _copy_of(six_texts_store, tmp_path)
    monkeypatch.setenv("MLFLOW_MIA_STORE_KEY_FILE", str(tmp_path / "other" / "store.key"))
    with pytest.raises(CacheCorruptError, match="written under another key"):
        spark_signals(_frame(spark, texts[:4]), model_dir, CONFIG, store=store)


def test_damaged_spark_store_file_is_named_without_a_java_trace(spark, model_dir, texts, six_texts_store, tmp_path):
    store, files = _copy_of(six_texts_store, tmp_path)
    path = files[0]
    path.write_bytes(b"garbage" * 100)
    for crc in path.parent.glob(".*.crc"):
        crc.unlink()
    with pytest.raises(CacheCorruptError, match=rf"the Spark store file \S*{path.name} is damaged .*delete it") as err:
        spark_signals(_frame(spark, texts[:4]), model_dir, CONFIG, store=store)
    assert len(str(err.value).splitlines()) == 1 and "at org.apache" not in str(err.value)


def test_local_master_retries_a_task_whose_python_worker_was_killed(spark):
    from mlflow_mia.engines.spark import local_with_retries

    assert spark.sparkContext.master == "local[2,4]" == local_with_retries("local[2]")

    def die_on_first_attempt(batches):
        from pyspark import TaskContext

        if TaskContext.get().attemptNumber() == 0:
            os._exit(1)  # the Python worker dies as if killed
        yield from batches

    assert spark.range(6).repartition(2).mapInPandas(die_on_first_attempt, "id long").count() == 6
    with pytest.raises(ValueError, match="maxFailures must be a positive int, got '0'"):
        local_with_retries("local[2]", "0")


def test_a_failed_wave_says_what_the_store_kept(spark, model_dir, texts, tmp_path):
    from pyspark.sql import functions as F

    waves = 3
    blanks = [" " * k for k in range(1, 30)]
    wave_of = (spark.createDataFrame(pd.DataFrame({"t": blanks}))
               .select("t", F.pmod(F.xxhash64(F.sha2("t", 256)), F.lit(waves)).alias("w")).toPandas())
    blank = wave_of.loc[wave_of["w"] == waves - 1, "t"].iloc[0]  # in the last wave: the others are kept
    store = str(tmp_path / "store")
    expected = (rf"text of id 12 is empty; .* \(wave {waves} of {waves} failed; (\d+) of the 13 text\(s\) "
                rf"to compute were kept in the store {re.escape(store)} \(waves 1-{waves - 1} committed\) "
                r"and a re-run computes only the rest")
    with pytest.raises(SparkSignalError, match=expected) as err:
        spark_signals(_frame(spark, texts[:12] + [blank]), model_dir, CONFIG, store=store, waves=waves)
    kept = int(str(err.value).split("failed; ")[1].split(" of")[0])
    assert kept == spark.read.parquet(store).count() and 0 < kept < 12
    again = spark_signals(_frame(spark, texts[:12]), model_dir, CONFIG, store=store, waves=waves)
    assert again.computed == 12 - kept


def test_config_twin_gets_its_own_store_partition(model_dir, tmp_path):
    twin = tmp_path / "twin"
    shutil.copytree(model_dir, twin)
    config = json.loads((twin / "config.json").read_text())
    (twin / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    original, other = model_spec(model_dir, CONFIG), model_spec(str(twin), CONFIG)
    assert other["weights_id"] == original["weights_id"]
    assert other["model_key"] != original["model_key"] and other["config_id"] != original["config_id"]


SHIPPED_CODE = '''
from transformers import BertConfig, BertForMaskedLM


class ShippedConfig(BertConfig):
    model_type = "shipped"


class ShippedForMaskedLM(BertForMaskedLM):
    config_class = ShippedConfig
'''


def test_trusted_remote_code_model_loads_on_the_executors(spark, model_dir, tmp_path):
    """--trust-remote-code --engine spark: executors load the model as the driver did (no 'pass the flag')."""
    from mlflow_mia.models.resolve import resolve_model
    from mlflow_mia.engines.spark import spark_model_signals

    model, tok = tiny_bert(seed=5)
    folder = tmp_path / "shipped"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    auto_map = {"AutoConfig": "shipped.ShippedConfig", "AutoModelForMaskedLM": "shipped.ShippedForMaskedLM"}
    config.update(architectures=["ShippedForMaskedLM"], model_type="shipped", auto_map=auto_map)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "shipped.py").write_text(SHIPPED_CODE)
    with pytest.raises(ValueError, match="trust-remote-code"):
        model_spec(str(folder), CONFIG)
    resolved = resolve_model(str(folder), trust_remote_code=True)
    assert model_spec(resolved, CONFIG)["trust_remote_code"] is True
    assert model_spec(model_dir, CONFIG)["trust_remote_code"] is False  # executors load it without running code
    texts = _texts(4)
    got = spark_model_signals(spark, texts, {"target": resolved}, CONFIG)["target"]
    want = compute_signals(resolved.lm, texts, CONFIG, progress=False)
    assert np.max(np.abs(got.values - want.values)) <= 1e-5


@pytest.mark.parametrize("waves", [0, True, 2.5])
def test_waves_must_be_a_positive_int_or_none(waves):
    with pytest.raises(ValueError, match="waves must be a positive int or None"):
        spark_signals(None, None, CONFIG, waves=waves)


def test_store_partitions_from_before_the_token_stats_are_not_read(model_dir):
    """Rows without token_mu/token_sigma live under the former settings digest; the new layout has its own."""
    from mlflow_mia.config import record_digest
    from mlflow_mia.engines.spark_store import settings_digests
    from mlflow_mia.signals.energy import value_settings

    spec = model_spec(model_dir, CONFIG)
    settings = value_settings(MaskedLM.from_pretrained(model_dir), CONFIG)
    assert spec["settings_before_token_stats"] == record_digest(settings)  # the digest earlier releases wrote
    assert spec["settings"] == settings_digests(settings)[0] != spec["settings_before_token_stats"]
