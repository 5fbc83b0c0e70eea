"""Canary report and console text (tracking/canary_log.py, entrypoints/canary_cli.py): n/a for unresolved
numbers, never nan; ``>=`` for a rank-based exposure that holds the sample's cap."""

from __future__ import annotations

import math

import pytest

from mlflow_mia.audits.canary import canary_audit
from mlflow_mia.canaries import Template, make_canaries
from mlflow_mia.canaries.config import CanaryAuditConfig
from mlflow_mia.entrypoints.canary_cli import _headline, _table_lines
from mlflow_mia.signals import MaskedLM
from mlflow_mia.signals.testing import tiny_bert, tiny_bert_tokenizer
from mlflow_mia.tracking.canary_log import _report, canary_brief, exposure_text, rank_exposure_text
from mlflow_mia.tracking.verdict import canary_verdict

TEMPLATES = [Template("record", "the record is {digits:3}"), Template("dose", "the dose was {digits:3} mg")]


@pytest.fixture(scope="module")
def sampled():
    tok = tiny_bert_tokenizer()
    tok.add_tokens([str(d) for d in range(10)])
    model, tok = tiny_bert(tok, seed=0)
    canaries = make_canaries(40, TEMPLATES, repetitions=(1, 2), seed=3)  # some included secret beats all 20
    config = CanaryAuditConfig(n_candidates=20, bootstrap_rounds=20, fprs=(0.1, 0.01))
    return canary_audit(MaskedLM(model, tok, name="tiny"), canaries, config=config), canaries


def test_rank_exposure_is_marked_at_least_when_capped():
    m = {"canary/r4/exposure_mean": 12.4, "canary/r4/exposure_rank_mean": 9.967, "canary/r4/exposure_rank_n_capped": 3,
         "canary/r4/exposure_n_extrapolated": 40}
    assert rank_exposure_text(m, "canary/r4") == ">= 9.97"
    assert exposure_text(m, "canary/r4") == "12.40 bits (rank-based >= 9.97)"
    m["canary/r4/exposure_rank_n_capped"] = 0
    assert exposure_text(m, "canary/r4") == "12.40 bits (rank-based 9.97)"
    exact = {"canary/r1/exposure_mean": 3.0, "canary/r1/exposure_rank_mean": 3.0, "canary/r1/exposure_rank_n_capped": 0,
             "canary/r1/exposure_n_extrapolated": 0}
    assert exposure_text(exact, "canary/r1") == "3.00 bits"  # exact ranks: the headline is the rank
    assert exposure_text({}, "canary/r1") == "n/a" and rank_exposure_text({}, "canary/r1") == "n/a"


def test_report_and_console_print_n_a_with_the_reason_and_at_least_for_capped_exposure(sampled):
    result, canaries = sampled
    assert result.exposure_capped.any() and "canary/r1/tpr_at_fpr_0.01" in result.unresolved
    report = _report(result, None, canaries, canary_verdict(result.metrics))
    lines = _table_lines(result, "tiny")
    text = report + "\n".join(lines) + _headline(result) + canary_brief(result)
    assert "nan" not in text.lower()
    n_excluded = int((~canaries.included[canaries.repetitions == 1]).sum())
    why = f"{n_excluded} excluded canaries < 100 needed for FPR 0.01"
    assert f"canary/r1/tpr_at_fpr_0.01 ({why})" in report and f"  n/a: canary/r1/tpr_at_fpr_0.01 ({why})" in lines
    r1_row = next(line for line in report.splitlines() if line.startswith("| r1 |"))
    assert r1_row.split(" | ")[5] == "n/a"  # the TPR at FPR 0.01 column
    capped_groups = [g for g in ("r1", "r2") if result.metrics[f"canary/{g}/exposure_rank_n_capped"] > 0]
    assert capped_groups
    for g in capped_groups:
        rank = f">= {result.metrics[f'canary/{g}/exposure_rank_mean']:.2f}"
        assert rank in next(line for line in report.splitlines() if line.startswith(f"| {g} |"))
        assert f"(rank-based {rank})" in next(line for line in lines if line.startswith(f"  {g} "))
    assert "log2(20 + 1) = 4.39 bits" in report and "skew-normal extrapolation" in report
    assert math.isnan(result.metrics["canary/r1/tpr_at_fpr_0.01"])
    assert r1_row.split(" | ")[4] == f"{result.metrics['canary/r1/tpr_at_fpr_0.1']:.3f}"  # 12 excluded resolve 0.1


def test_logging_without_the_canary_set_names_the_fix():
    from mlflow_mia.hashing import HashKey
    from mlflow_mia.tracking.canary_log import log_canary_audit
    from mlflow_mia.tracking.log_settings import LogSettings

    with pytest.raises(ValueError, match=r"log_canary_audit needs the audited canary set: pass "
                                         r"LogSettings\(canaries=\.\.\.\)"):
        log_canary_audit(None, "no-run", settings=LogSettings(hash_key=HashKey.random()))
