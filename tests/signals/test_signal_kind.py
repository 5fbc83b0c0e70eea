"""A new signal kind takes its module and one registration: done here once, with a throwaway kind.

The kind below (``max_token_nll``: every maskable token masked once, the largest NLL of
them) is what its module ``mlflow_mia/signals/max_token_nll.py`` would hold, the
``register_signal_kind`` call included; the fixture stands for the import line in
``mlflow_mia/signals/__init__.py``. No other module is edited, and the kind is offered
by the ``signal`` option, computed by the audit and scored by its attacks.
"""

from __future__ import annotations

import random

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import roc_auc_score

from mlflow_mia.audits.membership import run_audit
from mlflow_mia.audits.membership.report import render_report
from mlflow_mia.config import AuditConfig, MetricConfig, SignalConfig
from mlflow_mia.data import AuditDataset, PopulationSet
from mlflow_mia.signal_kinds import (SIGNAL_KINDS, SIGNAL_UNITS, register_signal_kind, signal_kind, signal_kinds,
                                     unregister_signal_kind)
from mlflow_mia.signals import MaskedLM
from mlflow_mia.signals.dispatch import compute_signals, signal_config_for
from mlflow_mia.signals.energy import masked_token_logprobs, tokenize
from mlflow_mia.signals.runtime import token_limit
from mlflow_mia.signals.testing import WORDS, tiny_bert, tiny_gpt2
from mlflow_mia.signals.causal_model import CausalLM
from mlflow_mia.signals.types import SignalResult

KIND = "max_token_nll"


# --- what mlflow_mia/signals/max_token_nll.py would hold -------------------------------------------------------
def compute_max_token_nll(lm, texts, config, *, cache=None, device=None, progress=True, chunk_size=512, desc=None,
                          mask_keys=None, text_key=None, stats=True) -> SignalResult:
    """The largest NLL (nats) over a text's maskable tokens, each masked once (no cache: a throwaway kind)."""
    texts = list(texts)
    ids, maskable, truncated = tokenize(lm, texts, max_length=token_limit(config.max_length, lm.max_length))
    copies = [(i, np.array([p])) for i, m in enumerate(maskable) for p in m]
    logp = masked_token_logprobs(lm, ids, copies, token_budget=config.token_budget, device=device)
    per_text, start = [], 0
    for m in maskable:
        per_text.append(np.concatenate(logp[start:start + len(m)]))
        start += len(m)
    values = [-float(np.min(lp)) for lp in per_text]
    return SignalResult.from_arrays(values, n_tokens=[len(m) for m in maskable], truncated=truncated,
                                    token_logprobs=per_text, kind=config.kind)
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture
def registered():
    """The kind registered as its module would register it (the import line), and withdrawn afterwards."""
    register_signal_kind(KIND, model="masked", unit="nats", compute=compute_max_token_nll)
    yield signal_kind(KIND)
    unregister_signal_kind(KIND)


def brute_force_max_nll(model, tok, texts) -> np.ndarray:
    """One forward pass per (text, token): mask the token, read -log_softmax at it, keep the largest."""
    out = []
    with torch.no_grad():
        for text in texts:
            enc = tok(text, return_tensors="pt", return_special_tokens_mask=True)
            ids, special = enc["input_ids"][0], enc["special_tokens_mask"][0].bool()
            nlls = []
            for pos in torch.nonzero(~special).flatten().tolist():
                masked = ids.clone()
                masked[pos] = tok.mask_token_id
                logits = model(input_ids=masked[None], attention_mask=torch.ones_like(masked)[None]).logits[0, pos]
                nlls.append(-torch.log_softmax(logits.double(), -1)[ids[pos]].item())
            out.append(max(nlls))
    return np.array(out)


def sentences(n, seed=0):
    rng = random.Random(seed)
    words = [w for w in WORDS if w.isalpha()]
    return list(dict.fromkeys(" ".join(rng.choice(words) for _ in range(rng.randint(4, 8))) for _ in range(3 * n)))[:n]


@pytest.fixture(scope="module")
def models():
    target, tok = tiny_bert(seed=1, hidden=16, layers=1)
    reference, _ = tiny_bert(tok, seed=2, hidden=16, layers=1)
    return target, reference, tok


def test_the_kind_is_a_choice_of_the_signal_option_only_while_registered(registered, tmp_path):
    from mlflow_mia.options.generate import generated_files

    reference = generated_files(tmp_path)[tmp_path / "docs/reference/options.md"]
    assert f"(one of `energy`, `pll`, `causal`, `{KIND}`) |" in reference  # the signal row of the options reference
    assert tuple(SIGNAL_KINDS) == ("energy", "pll", "causal", KIND)
    assert signal_kinds("masked") == ("energy", "pll", KIND) and signal_kinds("causal") == ("causal",)
    assert SIGNAL_UNITS[KIND] == "nats" and SignalConfig(kind=KIND).kind == KIND
    unregister_signal_kind(KIND)
    try:
        assert tuple(SIGNAL_KINDS) == ("energy", "pll", "causal") and KIND not in SIGNAL_UNITS
        with pytest.raises(ValueError, match=rf"kind must be one of 'energy', 'pll', 'causal', got '{KIND}'"):
            SignalConfig(kind=KIND)
    finally:
        register_signal_kind(KIND, model="masked", unit="nats", compute=compute_max_token_nll)


def test_an_unregistered_name_is_refused_naming_the_registered_kinds(registered):
    with pytest.raises(ValueError, match=rf"unknown signal kind 'nope'; the registered kinds are 'energy', 'pll', "
                                         rf"'causal', '{KIND}'\. A kind registers itself with .*register_signal_kind"):
        signal_kind("nope")
    with pytest.raises(ValueError, match=rf"kind must be one of 'energy', 'pll', 'causal', '{KIND}', got 'nope'"):
        SignalConfig(kind="nope")
    with pytest.raises(ValueError, match=r"signal kind must be one of \('energy', 'pll', 'causal', 'max_token_nll'\)"):
        SignalResult.from_arrays([1.0], n_tokens=[1], kind="nope")


def test_registration_refuses_a_taken_name_a_bad_name_and_a_builtin_withdrawal(registered):
    with pytest.raises(ValueError, match="'energy' is already registered by mlflow_mia.signals.energy.compute_signals"):
        register_signal_kind("energy", model="masked", unit="nats", compute=compute_max_token_nll)
    with pytest.raises(ValueError, match=r"must match \[a-z\]\[a-z0-9_\]\*"):
        register_signal_kind("Max-NLL", model="masked", unit="nats", compute=compute_max_token_nll)
    with pytest.raises(ValueError, match=r"model of signal kind 'x' must be one of \('masked', 'causal'\)"):
        register_signal_kind("x", model="seq2seq", unit="nats", compute=compute_max_token_nll)
    with pytest.raises(ValueError, match="'pll' is a built-in signal kind"):
        unregister_signal_kind("pll")
    # the same function again (a re-imported module) is no conflict
    assert register_signal_kind(KIND, model="masked", unit="nats", compute=compute_max_token_nll) == registered


def test_the_kind_fits_masked_models_only(registered, models):
    target, _, tok = models
    assert signal_config_for(MaskedLM(target, tok), SignalConfig(kind=KIND)).kind == KIND
    with pytest.raises(ValueError, match=rf"is a causal LM and signal='{KIND}' masks tokens.*use signal='causal'"):
        signal_config_for(CausalLM(*tiny_gpt2()), SignalConfig(kind=KIND))
    with pytest.raises(ValueError, match=rf"masked LM and signal='causal' needs a causal LM.*use signal='energy' or "
                                         rf"'pll' or '{KIND}' for a masked LM"):
        signal_config_for(MaskedLM(target, tok), SignalConfig(kind="causal"))


def test_dispatch_computes_the_registered_function_equal_to_brute_force(registered, models):
    target, _, tok = models
    texts = sentences(5)
    res = compute_signals(MaskedLM(target, tok), texts, SignalConfig(kind=KIND), progress=False)
    assert res.kind == KIND
    np.testing.assert_allclose(res.values, brute_force_max_nll(target, tok, texts), rtol=1e-5)
    np.testing.assert_array_equal(res.n_tokens, [len(tok(t)["input_ids"]) - 2 for t in texts])


def test_an_audit_with_the_kind_scores_brute_force_values(registered, models):
    target, reference, tok = models
    texts = sentences(40)
    pool = AuditDataset(texts=texts[:20], labels=[1] * 10 + [0] * 10)
    config = AuditConfig(signal=SignalConfig(kind=KIND), metrics=MetricConfig(fprs=(0.1,), bootstrap_rounds=0))
    res = run_audit(MaskedLM(target, tok, name="target"), pool, PopulationSet(texts=texts[20:]),
                    references=[MaskedLM(reference, tok, name="reference")], config=config, progress=False)
    e_target = brute_force_max_nll(target, tok, pool.texts)
    e_reference = brute_force_max_nll(reference, tok, pool.texts)
    np.testing.assert_allclose(res.samples["score_loss"], -e_target, rtol=1e-5)  # score = -energy: higher = member
    np.testing.assert_allclose(res.samples["score_likelihood_ratio"], -(e_target - e_reference), atol=1e-5)
    assert res.config.signal.kind == KIND
    assert f"| Signal | {KIND} |" in render_report(res)  # not described as the energy's masks or the PLL's
    for attack, scores in (("loss", -e_target), ("likelihood_ratio", e_reference - e_target)):
        assert res.metrics[f"{attack}/auc"] == pytest.approx(roc_auc_score(pool.labels, scores))


def test_the_cli_offers_and_runs_the_kind(registered, models, tmp_path, monkeypatch, capsys):
    from mlflow_mia.entrypoints.cli import build_parser, main

    audit = next(a for a in build_parser()._actions if a.dest == "command").choices["audit"]
    assert f"{{energy,pll,causal,{KIND}}}" in audit.format_help()
    target, _, tok = models
    target.save_pretrained(tmp_path / "target")
    tok.save_pretrained(tmp_path / "target")
    texts = sentences(40)
    pd.DataFrame({"text": texts[:20], "is_member": [1] * 10 + [0] * 10}).to_csv(tmp_path / "pool.csv", index=False)
    pd.DataFrame({"text": texts[20:]}).to_csv(tmp_path / "population.csv", index=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    old = mlflow.get_tracking_uri()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    argv = ["audit", "--target", str(tmp_path / "target"), "--data", str(tmp_path / "pool.csv"),
            "--population", str(tmp_path / "population.csv"), "--attacks", "loss", "--fprs", "0.1",
            "--bootstrap-rounds", "0", "--quiet", "--tracking-uri", uri, "--no-tag-model-version"]
    try:
        assert main([*argv, "--signal", "nope"]) == 2
        assert f"signal must be one of 'energy', 'pll', 'causal', '{KIND}', got 'nope'" in capsys.readouterr().err
        assert main([*argv, "--signal", KIND]) == 0
        client = mlflow.MlflowClient(uri)
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    finally:
        while mlflow.active_run() is not None:
            mlflow.end_run()
        mlflow.set_tracking_uri(old)
    assert len(runs) == 1 and runs[0].data.params["signal"] == KIND
    expected = roc_auc_score([1] * 10 + [0] * 10, -brute_force_max_nll(target, tok, texts[:20]))
    assert runs[0].data.metrics["loss/auc"] == pytest.approx(expected, abs=5e-4)  # logged to 4 significant digits
