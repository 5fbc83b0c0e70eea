import logging
import re

import numpy as np
import pytest
import torch

from mlflow_mia.config import AuditConfig, NeighbourhoodConfig, SignalConfig
from mlflow_mia.data import text_hash
from mlflow_mia.signals import MaskedLM, SignalCache, compute_signals
from mlflow_mia.signals import energy as energy_module
from mlflow_mia.signals import neighbours as nb_module
from mlflow_mia.signals.neighbour_text import _match_case, best_combinations
from mlflow_mia.signals.neighbour_recipe import NeighbourRecipe, neighbour_values
from mlflow_mia.signals.neighbours import (_dropout_scales, candidate_swaps, generate_neighbours, load_generator,
                                           replaceable_words)
from mlflow_mia.signals.testing import WORDS, tiny_bert, tiny_roberta

TEXTS = [
    "the cat sat on the mat .",
    "the bank said profit growth was good this year",
    "a dog ran",
    "patient note : fever and pain , dose two mg a day for a week",
]


def words_of(text):
    return re.findall(r"\w+|[^\w\s]", text.lower())


@pytest.fixture(params=["bert", "roberta"])
def gen(request):
    model, tok = (tiny_bert if request.param == "bert" else tiny_roberta)(seed=3)
    return MaskedLM(model, tok, name=request.param)


def test_dropout_hits_only_the_chosen_positions_word_embedding(gen):
    """The LayerNorm input of the embeddings is word * scale + position + type: only (copy j, word j) changes."""
    text = TEXTS[1]
    ids, words = replaceable_words(gen.tokenizer, [text], max_length=64)
    ids, words = ids[0], words[0]
    emb = gen.model.base_model.embeddings
    seen = []
    handle = emb.LayerNorm.register_forward_pre_hook(lambda mod, args: seen.append(args[0].detach().clone()))
    try:
        candidate_swaps(gen, [text], top_k=3, dropout=0.7, seed=5, token_budget=4096, progress=False)
    finally:
        handle.remove()
    (perturbed,) = seen  # one forward pass for all positions of the sample
    assert perturbed.shape[0] == len(words)
    with torch.no_grad():
        clean = []
        handle = emb.LayerNorm.register_forward_pre_hook(lambda mod, args: clean.append(args[0].detach().clone()))
        gen.model(input_ids=torch.from_numpy(ids)[None])
        handle.remove()
        word_emb = gen.model.get_input_embeddings()(torch.from_numpy(ids))
    scales = _dropout_scales(len(words), word_emb.shape[1], 0.7, 5, text_hash(text))
    for j, word in enumerate(words):
        diff = perturbed[j] - clean[0][0]
        changed = torch.nonzero(diff.abs().sum(-1) > 0).flatten().tolist()
        assert changed == [word.position]
        expected = word_emb[word.position] * (scales[j] - 1.0)
        torch.testing.assert_close(diff[word.position], expected, rtol=1e-5, atol=1e-5)


def test_dropout_masks_are_inverted_bernoulli():
    s = _dropout_scales(50, 384, 0.7, 0, "ab")
    assert torch.unique(s).tolist() == pytest.approx([0.0, 1 / 0.3])
    assert abs(float((s == 0).float().mean()) - 0.7) < 0.01
    assert torch.equal(s, _dropout_scales(50, 384, 0.7, 0, "ab"))
    assert not torch.equal(s, _dropout_scales(50, 384, 0.7, 1, "ab"))
    assert torch.equal(_dropout_scales(3, 8, 0.0, 0, "ab"), torch.ones(3, 8))


def test_swap_logprobs_match_one_pass_per_position_oracle():
    """Batched copies give the same p_swap as one forward pass per position with inputs_embeds."""
    model, tok = tiny_bert(seed=4)
    gen = MaskedLM(model, tok)
    texts = [TEXTS[0], TEXTS[2]]
    words, swaps = candidate_swaps(gen, texts, top_k=5, dropout=0.7, seed=2, token_budget=64, progress=False)
    ids, _ = replaceable_words(tok, texts, max_length=64)
    for i, text in enumerate(texts):
        scales = _dropout_scales(len(words[i]), 32, 0.7, 2, text_hash(text))
        for j, word in enumerate(words[i]):
            with torch.no_grad():
                emb = model.get_input_embeddings()(torch.from_numpy(ids[i])[None])
                emb[0, word.position] *= scales[j]
                logits = model(inputs_embeds=emb).logits[0, word.position].double()
            logits[word.token_id] = -torch.inf
            logp = logits - torch.logsumexp(logits, 0)
            got = [(s.token_id, s.logprob) for s in swaps[i][j]]
            assert len(got) == 5
            for t, lp in got:
                assert lp == pytest.approx(float(logp[t]), abs=1e-4)


def test_original_token_is_never_its_own_replacement(gen):
    """Even when the model is sure of the original token, it is excluded and the rest renormalised."""
    tok = gen.tokenizer
    cat = tok.convert_tokens_to_ids("cat")
    head = gen.model.get_output_embeddings()
    with torch.no_grad():
        head.bias[cat] += 50.0  # 'cat' dominates every position
    words, swaps = candidate_swaps(gen, ["the cat sat on the mat"], top_k=1000, progress=False)
    text = "the cat sat on the mat"
    for word, cands in zip(words[0], swaps[0]):
        assert word.token_id not in [s.token_id for s in cands]
        assert all(s.replacement.lower() != text[word.start:word.end] for s in cands)
        total = sum(np.exp(s.logprob) for s in cands)
        assert total <= 1.0 + 1e-6
        if text[word.start:word.end] == "cat":
            assert total > 0.5  # renormalised without the dominant original token
        else:
            assert cands[0].token_id == cat


def test_candidates_in_descending_probability(gen):
    words, swaps = candidate_swaps(gen, TEXTS, top_k=20, progress=False)
    for per_text in swaps:
        for cands in per_text:
            lps = [s.logprob for s in cands]
            assert len(lps) == 20 and lps == sorted(lps, reverse=True)
    # The neighbours are the n best single swaps over all positions, in order.
    n = 12
    got = generate_neighbours(gen, [TEXTS[1]], config=NeighbourhoodConfig(num_neighbours=n), progress=False)[0]
    flat = sorted((s for cands in swaps[1] for s in cands), key=lambda s: -s.logprob)
    w = words[1]
    expected = [TEXTS[1][:w[s.word].start] + s.replacement + TEXTS[1][w[s.word].end:] for s in flat][:n]
    assert got == expected


@pytest.mark.parametrize("m", [1, 2, 3])
def test_neighbours_differ_in_exactly_m_words(gen, m):
    n = 10
    out = generate_neighbours(gen, TEXTS, config=NeighbourhoodConfig(num_neighbours=n, num_replacements=m),
                              progress=False)
    for text, nbs in zip(TEXTS, out):
        if len(replaceable_words(gen.tokenizer, [text], max_length=64)[1][0]) < m:
            assert nbs == []
            continue
        assert len(nbs) == n and len(set(nbs)) == n and text not in nbs
        for x in nbs:
            a, b = words_of(text), words_of(x)
            assert len(a) == len(b)
            assert sum(u != v for u, v in zip(a, b)) == m


def test_multi_replacement_is_best_joint_probability():
    model, tok = tiny_bert(seed=7)
    gen = MaskedLM(model, tok)
    text = "a dog ran on the mat"
    words, swaps = candidate_swaps(gen, [text], top_k=40, progress=False)
    best = best_combinations(swaps[0], n=15, m=2)
    brute = sorted(a.logprob + b.logprob for j, ca in enumerate(swaps[0]) for k, cb in enumerate(swaps[0]) if j < k
                   for a in ca for b in cb)[::-1][:15]
    np.testing.assert_allclose([s for s, _ in best], brute, rtol=1e-12)
    assert all(len({sw.word for sw in combo}) == 2 for _, combo in best)


def test_best_single_swaps_are_the_brute_force_order_with_ties_by_word_then_rank():
    from mlflow_mia.signals.neighbour_text import Swap

    # ties across words (-1.0 twice, -2.0 three times) are broken by word, then by rank within the word
    lps = [[-1.0, -2.0, -2.0], [], [-1.0, -2.0, -7.5], [-0.5]]
    swaps = [[Swap(word=w, token_id=10 * w + r, replacement=f"w{w}r{r}", logprob=lp) for r, lp in enumerate(row)]
             for w, row in enumerate(lps)]
    brute = sorted(((sw.logprob, sw) for cands in swaps for r, sw in enumerate(cands)),
                   key=lambda item: (-item[0], item[1].word, item[1].token_id))
    for n in (1, 4, 6, 20):
        assert best_combinations(swaps, n=n, m=1) == [(lp, (sw,)) for lp, sw in brute[:n]]
    assert [combo[0].replacement for _, combo in best_combinations(swaps, n=5, m=1)] == [
        "w3r0", "w0r0", "w2r0", "w0r1", "w0r2"]


def test_determinism_by_seed(gen):
    cfg = NeighbourhoodConfig(num_neighbours=8)
    a = generate_neighbours(gen, TEXTS, config=cfg, seed=1, progress=False)
    # other batching, other order, other chunking: same neighbours
    b = generate_neighbours(gen, TEXTS[::-1], config=cfg, seed=1, progress=False, token_budget=48, chunk_size=3)
    assert a == b[::-1]
    c = generate_neighbours(gen, TEXTS, config=cfg, seed=2, progress=False)
    assert a != c


def test_whole_words_only_and_case_kept():
    model, tok = tiny_bert(seed=0)
    text = "The cat's hat , dog-day 20 cats ."
    _, words = replaceable_words(tok, [text], max_length=64)
    assert [text[w.start:w.end] for w in words[0]] == ["The", "hat", "cats"]
    out = generate_neighbours((model, tok), [text], config=NeighbourhoodConfig(num_neighbours=60), progress=False)[0]
    assert len(out) == 60
    vocab_words = {w for w in WORDS if w.isalpha()}
    for x in out:
        changed = [(u, v) for u, v in zip(text.split(), x.split()) if u != v]
        assert len(changed) == 1 and len(x.split()) == len(text.split())
        orig, new = changed[0]
        if orig == "The":
            assert new[0].isupper() and new.lower() in vocab_words
        else:
            assert new in vocab_words  # a whole word (no '##' piece), lower case like the original
    assert _match_case("shares", "Stocks") == "Shares" and _match_case("hsbc", "IBM") == "HSBC"


def test_byte_level_bpe_substitutes_are_whole_words():
    from tokenizers import ByteLevelBPETokenizer, processors
    from transformers import PreTrainedTokenizerFast

    corpus = [" ".join(WORDS[i:i + 7]) for i in range(0, len(WORDS), 3)] * 3 + ["the market unbelievably sharing"]
    bt = ByteLevelBPETokenizer()
    bt.train_from_iterator(corpus, vocab_size=300, min_frequency=1,
                           special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], show_progress=False)
    bt._tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True)
    tok = PreTrainedTokenizerFast(tokenizer_object=bt._tokenizer, bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>", cls_token="<s>", sep_token="</s>", pad_token="<pad>",
                                  mask_token="<mask>", model_max_length=64)
    model, _ = tiny_roberta(tok, seed=0)
    text = "Stocks fall, the market's profit unbelievably good."
    words, swaps = candidate_swaps((model, tok), [text], top_k=10, progress=False)
    assert [text[w.start:w.end] for w in words[0]] == ["Stocks", "fall", "the", "profit", "unbelievably", "good"]
    for cands in swaps[0]:
        for s in cands:
            assert tok.convert_ids_to_tokens(s.token_id).startswith("Ġ") and s.replacement.isalpha()


def test_no_replaceable_word_gives_nan_and_a_count(caplog):
    model, tok = tiny_bert(seed=0)
    target = MaskedLM(*tiny_bert(seed=1))
    texts = ["the cat sat", "1 2 3 .", "10 , 20"]
    with caplog.at_level(logging.WARNING, logger="mlflow_mia.signals.neighbours"):
        nbs = generate_neighbours((model, tok), texts, config=NeighbourhoodConfig(num_neighbours=4), progress=False)
        e = neighbour_values(target, texts, generator=(model, tok),
                               neighbourhood=NeighbourhoodConfig(num_neighbours=4), progress=False)
    assert [len(x) for x in nbs] == [4, 0, 0]
    assert "2 of 3 text(s) have no replaceable word" in caplog.text
    assert np.isfinite(e[0]) and np.isnan(e[1:]).all()
    expected = compute_signals(target, nbs[0], SignalConfig(), progress=False,
                               mask_keys=[text_hash(texts[0])] * 4).values.mean()
    assert e[0] == pytest.approx(expected, rel=1e-12)
    independent = neighbour_values(target, texts[:1], generator=(model, tok), progress=False,
                                     neighbourhood=NeighbourhoodConfig(num_neighbours=4, shared_masks=False))
    assert independent[0] == pytest.approx(compute_signals(target, nbs[0], progress=False).values.mean(), rel=1e-12)


def test_shared_masks_put_a_neighbour_masks_where_its_sample_has_them(monkeypatch):
    """Common random numbers: a neighbour with the sample's token count is masked at the sample's positions."""
    target = MaskedLM(*tiny_bert(seed=1))
    sample, neighbour = "the cat sat on the mat today", "the dog sat on the mat today"
    assert len(target.tokenizer(sample)["input_ids"]) == len(target.tokenizer(neighbour)["input_ids"])
    seen = []
    real = energy_module.masked_token_logprobs

    def spy(lm, ids, copies, **kw):
        seen.append([tuple(p.tolist()) for _, p in copies])
        return real(lm, ids, copies, **kw)

    monkeypatch.setattr(energy_module, "masked_token_logprobs", spy)
    compute_signals(target, [sample], progress=False)
    compute_signals(target, [neighbour], progress=False, mask_keys=[text_hash(sample)])
    compute_signals(target, [neighbour], progress=False)
    assert seen[0] == seen[1] and seen[0] != seen[2]


def test_keyed_rows_are_cached_apart_from_plain_rows(tmp_path):
    target = MaskedLM(*tiny_bert(seed=1))
    cache = SignalCache(str(tmp_path))
    text = "the cat sat on the mat today"
    plain = compute_signals(target, [text], cache=cache, progress=False).values
    keyed = compute_signals(target, [text], cache=cache, progress=False, mask_keys=[text_hash("another sample")]).values
    assert keyed[0] != plain[0]
    again = compute_signals(target, [text, text], cache=cache, progress=False,
                            mask_keys=[text_hash("another sample"), text_hash(text)])
    assert again.values[0] == keyed[0] and again.values[1] == pytest.approx(plain[0], rel=1e-12)
    with pytest.raises(ValueError, match="mask_keys has 1 entries for 2 texts"):
        compute_signals(target, [text, "a dog"], progress=False, mask_keys=[text_hash(text)])
    with pytest.raises(ValueError, match="mask_keys must be hex text hashes"):
        compute_signals(target, [text], progress=False, mask_keys=["another sample"])


def test_more_neighbours_asked_than_exist(caplog):
    model, tok = tiny_bert(seed=0)
    with caplog.at_level(logging.WARNING, logger="mlflow_mia.signals.neighbours"):
        out = generate_neighbours((model, tok), ["a dog ran", "the cat sat on the mat"],
                                  config=NeighbourhoodConfig(num_neighbours=1000), progress=False)
    allowed = sum(1 for w in set(WORDS) if w.isalpha())
    assert 0 < len(out[0]) < 1000 and len(out[0]) <= 3 * allowed and len(set(out[0])) == len(out[0])
    assert "2 of 2 text(s) have fewer than 1000 possible neighbours" in caplog.text


def test_generator_without_mlm_head_is_rejected(tmp_path):
    from transformers import BertConfig, BertModel

    _, tok = tiny_bert()
    encoder = BertModel(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=32, max_position_embeddings=64))
    with pytest.raises(ValueError, match="neighbour generator must be a masked LM.*masked-LM head"):
        load_generator((encoder, tok))
    encoder.save_pretrained(tmp_path / "enc")
    tok.save_pretrained(tmp_path / "enc")
    with pytest.raises(ValueError, match="no trained masked-LM head"):
        generate_neighbours(str(tmp_path / "enc"), ["the cat sat"], progress=False)
    config = AuditConfig(neighbourhood={"generator_model": str(tmp_path / "enc")})
    with pytest.raises(ValueError, match="no trained masked-LM head"):
        neighbour_values(MaskedLM(*tiny_bert()), ["the cat sat"], neighbourhood=config.neighbourhood, progress=False)


def test_generator_falls_back_to_config_path_or_says_how(tmp_path):
    model, tok = tiny_bert(seed=2)
    target = MaskedLM(*tiny_bert(seed=1))
    with pytest.raises(ValueError, match=r"references=\[.*generator_model"):
        neighbour_values(target, ["the cat sat"], neighbourhood=AuditConfig().neighbourhood, progress=False)
    model.save_pretrained(tmp_path / "gen")
    tok.save_pretrained(tmp_path / "gen")
    cfg = AuditConfig(neighbourhood={"generator_model": str(tmp_path / "gen"), "num_neighbours": 5})
    from_path = neighbour_values(target, TEXTS[:2], neighbourhood=cfg.neighbourhood, progress=False)
    direct = neighbour_values(target, TEXTS[:2], generator=(model, tok), neighbourhood=cfg.neighbourhood, progress=False)
    np.testing.assert_array_equal(from_path, direct)


def test_neighbours_and_their_values_are_cached(tmp_path, monkeypatch):
    gen = MaskedLM(*tiny_bert(seed=2))
    cache = SignalCache(tmp_path)
    cfg = AuditConfig(neighbourhood={"num_neighbours": 5})
    target = MaskedLM(*tiny_bert(seed=1))
    first = neighbour_values(target, TEXTS, generator=gen, neighbourhood=cfg.neighbourhood, cache=cache, progress=False)
    rows = cache.count()
    assert (tmp_path / "neighbours.sqlite").exists()
    raw = (tmp_path / "neighbours.sqlite").read_bytes()
    assert b"patient note" not in raw  # edits, not texts

    def boom(*args, **kwargs):
        raise AssertionError("recomputed")

    monkeypatch.setattr(nb_module, "_candidate_swaps", boom)
    monkeypatch.setattr("mlflow_mia.signals.energy.masked_token_logprobs", boom)
    again = neighbour_values(target, TEXTS, generator=gen, neighbourhood=cfg.neighbourhood, cache=cache, progress=False)
    np.testing.assert_array_equal(first, again)
    assert cache.count() == rows
    # a new target reuses the neighbours, computes only its own energies
    monkeypatch.undo()
    monkeypatch.setattr(nb_module, "_candidate_swaps", boom)
    other = neighbour_values(MaskedLM(*tiny_bert(seed=9)), TEXTS, generator=gen, neighbourhood=cfg.neighbourhood, cache=cache,
                               progress=False)
    assert np.isfinite(other).all() and not np.array_equal(other, first)


def test_recipe_computes_each_text_once_and_every_consumer_reads_the_same_numbers(monkeypatch):
    """The one neighbour recipe: a second consumer (a subset, another order) runs no model, even without a cache."""
    import doctest

    from mlflow_mia.signals import neighbour_recipe

    gen, target = MaskedLM(*tiny_bert(seed=2)), MaskedLM(*tiny_bert(seed=1))
    nc, sc = NeighbourhoodConfig(num_neighbours=4), SignalConfig(num_masks=2, seed=3)
    recipe = NeighbourRecipe(gen, neighbourhood=nc, signal=sc, target=target, progress=False)
    first = recipe.values(TEXTS)
    # by hand: generate_neighbours with the audit's settings, then the target's values with the sample's mask key
    by_hand = generate_neighbours(gen, TEXTS, config=nc, seed=sc.seed, progress=False)
    assert recipe.neighbours(TEXTS) == by_hand
    for text, nbs, got in zip(TEXTS, by_hand, first):
        expected = compute_signals(target, nbs, sc, progress=False, mask_keys=[text_hash(text)] * len(nbs)).values
        np.testing.assert_allclose(got, expected, rtol=1e-6)

    def boom(*args, **kwargs):
        raise AssertionError("a model ran again")

    monkeypatch.setattr(nb_module, "_candidate_swaps", boom)
    monkeypatch.setattr(energy_module, "masked_token_logprobs", boom)
    again = recipe.values(TEXTS[::-1][:2])
    np.testing.assert_array_equal(again[0], first[-1])
    np.testing.assert_array_equal(again[1], first[-2])
    means = recipe.mean_values(TEXTS)
    assert means.tolist() == [float(np.mean(v)) for v in first]
    with pytest.raises(ValueError, match=r"neighbour values need the target model"):
        NeighbourRecipe(gen).values(TEXTS)
    monkeypatch.undo()
    assert doctest.testmod(neighbour_recipe).failed == 0


def test_literal_special_token_strings_are_not_special_for_the_generator(gen):
    tok = gen.tokenizer
    ids, words = replaceable_words(tok, [f"the {tok.mask_token} cat"], max_length=64)
    assert tok.mask_token_id not in ids[0].tolist()
    assert [w.token_id for w in words[0]][:1] == [tok.convert_tokens_to_ids("the")]
