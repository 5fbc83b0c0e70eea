"""Canary exposure of a causal target: ranks by log-perplexity (Carlini et al. 2019), against brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mlflow_mia.audits.canary import canary_audit
from mlflow_mia.canaries import Template, make_canaries
from mlflow_mia.canaries.config import CanaryAuditConfig
from mlflow_mia.signals import CausalLM
from mlflow_mia.signals.dispatch import sequence_values
from mlflow_mia.signals.testing import tiny_gpt2, tiny_gpt2_tokenizer

TEMPLATES = [Template("record", "the record is {digits:3}"), Template("dose", "the dose was {digits:3} mg")]


@pytest.fixture(scope="module")
def digit_gpt():
    tok = tiny_gpt2_tokenizer()
    tok.add_tokens([str(d) for d in range(10)])  # one token per digit
    return CausalLM(*tiny_gpt2(tok, seed=0), name="tiny-gpt")


def log_perplexity(lm, text):
    """-sum_{t>=2} log p(x_t | x_<t) in nats, from one unbatched pass in float64."""
    ids = lm.tokenizer(text)["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(lm.model(torch.tensor([ids])).logits[0].double(), dim=-1)
    return -float(logp[:-1].gather(1, torch.tensor(ids[1:])[:, None]).sum())


def test_sequence_values_of_a_causal_lm_are_log_perplexities(digit_gpt):
    texts = ["the record is 123", "the dose was 9 mg"]
    got = sequence_values(digit_gpt, texts, CanaryAuditConfig().signal_config(), progress=False)  # asks for "pll"
    np.testing.assert_allclose(got, [log_perplexity(digit_gpt, t) for t in texts], rtol=1e-6)


def test_causal_exposure_equals_a_brute_force_rank_over_the_full_space(digit_gpt):
    canaries = make_canaries(20, TEMPLATES, repetitions=(1,), seed=0)
    result = canary_audit(digit_gpt, canaries, config=CanaryAuditConfig(n_candidates=1000, bootstrap_rounds=0))
    for template in TEMPLATES:
        space = [template.render(f"{i:03d}") for i in range(1000)]
        ppl = sequence_values(digit_gpt, space, progress=False)
        for row in np.flatnonzero(np.array(canaries.template_ids) == template.id):
            own = ppl[int(canaries.secrets[row])]
            rank = int(np.sum(ppl <= own))  # candidates at least as likely: ties count against the secret
            assert result.exposure[row] == pytest.approx(math.log2(1000) - math.log2(rank))


def test_a_reference_of_the_other_kind_is_refused_before_any_model_runs(digit_gpt):
    """A masked reference for a causal target (and the reverse) is refused as in the membership audit."""
    from mlflow_mia.signals import MaskedLM
    from mlflow_mia.signals.testing import tiny_bert

    masked = MaskedLM(*tiny_bert(seed=0), name="tiny-bert")
    canaries = make_canaries(8, TEMPLATES, repetitions=(1,), seed=0)
    config = CanaryAuditConfig(n_candidates=10, bootstrap_rounds=0)
    with pytest.raises(ValueError, match=r"^the target is a causal LM but the reference model is a masked LM: .* "
                                         r"Use a causal reference model"):
        canary_audit(digit_gpt, canaries, reference=masked, config=config)
    with pytest.raises(ValueError, match=r"^the target is a masked LM but the reference model is a causal LM"):
        canary_audit(masked, canaries, reference=digit_gpt, config=config)


def test_a_masked_signal_asked_of_a_causal_canary_target_is_replaced_and_said_once(digit_gpt, caplog):
    import logging

    from mlflow_mia.signals.dispatch import signal_note

    caplog.set_level(logging.WARNING)
    canaries = make_canaries(8, TEMPLATES, repetitions=(1,), seed=0)
    result = canary_audit(digit_gpt, canaries, config=CanaryAuditConfig(signal="energy", n_candidates=10,
                                                                       bootstrap_rounds=0))
    note = signal_note(digit_gpt, "energy")
    assert note.startswith("tiny-gpt is a causal LM: signal='energy' masks tokens") and "--signal causal" in note
    assert result.warnings.count(note) == 1 and caplog.text.count("tiny-gpt is a causal LM") == 1
    assert signal_note(digit_gpt, "causal") is None
