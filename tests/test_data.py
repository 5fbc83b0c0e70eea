"""Audit inputs: reading tables, validating the pool and the population (mlflow_mia/data.py)."""

from __future__ import annotations

import pathlib

import pandas as pd
import pytest

from mlflow_mia.data import AuditDataset, PopulationSet, load_table

CANARY = "zq-canary-7f3c1e member text that must not persist"


def _files_containing(root: pathlib.Path, needle: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


@pytest.mark.parametrize("ext", ["csv", "jsonl", "parquet"])
def test_item6_tables_do_not_persist_in_the_datasets_cache(ext, tmp_path, monkeypatch):
    cache = tmp_path / "hf_datasets_cache"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    frame = pd.DataFrame({"text": [CANARY, "another text"], "is_member": [1, 0]})
    path = tmp_path / "data" / f"pool.{ext}"
    path.parent.mkdir()
    {"csv": lambda p: frame.to_csv(p, index=False), "jsonl": lambda p: frame.to_json(p, orient="records", lines=True),
     "parquet": lambda p: frame.to_parquet(p)}[ext](path)
    before = {str(p) for p in tmp_path.rglob("*")}
    table = load_table(path)
    assert table["text"].tolist() == [CANARY, "another text"] and table["is_member"].tolist() == [1, 0]
    written = [p for p in tmp_path.rglob("*") if str(p) not in before and p.is_file()]
    assert not [str(p) for p in written if CANARY.encode() in p.read_bytes()]
    assert not (cache.exists() and _files_containing(cache, CANARY))
    assert not _files_containing(tmp_path / "hf_home", CANARY) if (tmp_path / "hf_home").exists() else True
