"""Neighbour-generation throughput: batched copies vs one forward pass per position.

Run::

    python benchmarks/bench_neighbours.py            # MiniLM-sized BERT, 32 + 128 BBC sentences
    python benchmarks/bench_neighbours.py --quick    # smaller, for a quick look

What it prints, on the same model, data and machine (next to ``bench_energy.py``):

* sentences per second of the candidate search (dropout at one position, the MLM
  distribution there, ``p_swap`` and the top substitutes) done the straightforward
  way -- one forward pass per replaceable word at batch size 1 with the full LM
  head at every position, as the paper's released code and mimir do -- and the
  batched way of :func:`mlflow_mia.signals.neighbours.candidate_swaps` (all copies
  of a sample in one pass, packed across samples, the head only at the perturbed
  positions), with the speed ratio and a check that both find the same substitutes;
* sentences per second of the whole :func:`generate_neighbours` (candidates, best
  combinations, neighbour texts) for ``m = 1`` and ``m = 2`` replacements.

Each sample needs one copy per replaceable word whatever the batching (attention
spreads the perturbation to every position, so copies share no work): the gain
comes from the LM head and from per-pass overhead, not from fewer encoder FLOPs.

Model: BERT with 6 layers, hidden 384, intermediate 1536, vocabulary 30,522 (the
MiniLM-L6 shape), randomly initialised (speed does not depend on the weights),
with the MiniLM WordPiece tokenizer. Data: real BBC News sentences.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_energy import bbc_sentences, build_model, tokenizer  # noqa: E402


def one_pass_per_position(lm, texts, *, top_k, dropout=0.7, seed=0):
    """Per text, per replaceable word: one batch-1 forward pass with the full LM head."""
    from mlflow_mia.data import text_hash
    from mlflow_mia.signals.neighbour_text import replaceable_words, vocab_tables as _vocab_tables
    from mlflow_mia.signals.neighbours import _dropout_scales

    model, tok = lm.model, lm.tokenizer
    vocab = model.get_output_embeddings().weight.shape[0]
    allowed, surfaces, _ = _vocab_tables(tok, vocab)
    allowed = torch.from_numpy(allowed)
    ids, words = replaceable_words(tok, texts, max_length=lm.max_length)
    embedding = model.get_input_embeddings()
    out = []
    with torch.no_grad():
        for text, seq, ws in zip(texts, ids, words):
            scales = _dropout_scales(len(ws), embedding.weight.shape[1], dropout, seed, text_hash(text))
            per_text = []
            for j, w in enumerate(ws):
                def hook(module, inputs, output, pos=w.position, scale=scales[j]):
                    output = output.clone()
                    output[0, pos] = output[0, pos] * scale
                    return output

                handle = embedding.register_forward_hook(hook)
                logits = model(input_ids=torch.from_numpy(seq)[None]).logits[0]  # full head, every position
                handle.remove()
                row = logits[w.position].float()
                row[w.token_id] = -torch.inf
                logp = (row - torch.logsumexp(row, 0)).masked_fill(~allowed, -torch.inf)
                lp, idx = torch.topk(logp, top_k + 4)
                word = text[w.start:w.end].lower()  # substitutes equal to the original word are dropped
                kept = [(i, v) for i, v in zip(idx.tolist(), lp.tolist()) if surfaces[i].lower() != word][:top_k]
                per_text.append(([i for i, _ in kept], [v for _, v in kept]))
            out.append(per_text)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer sentences (a rough look)")
    parser.add_argument("--baseline-samples", type=int, default=32, help="sentences timed with one pass per position")
    parser.add_argument("--samples", type=int, default=128, help="sentences timed with the batched generator")
    parser.add_argument("--neighbours", type=int, default=25, help="n, neighbours per sentence")
    parser.add_argument("--token-budget", type=int, default=4096, help="padded tokens per forward pass")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    if args.quick:
        args.baseline_samples, args.samples = 8, 32

    from mlflow_mia.config import NeighbourhoodConfig
    from mlflow_mia.signals import MaskedLM
    from mlflow_mia.signals.neighbours import candidate_swaps, generate_neighbours, replaceable_words

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, device {device}")
    lm = MaskedLM(build_model(), tokenizer(), model_id="bench", name="bench")
    texts = bbc_sentences(max(args.samples, args.baseline_samples))
    lengths = [len(lm.tokenizer(t)["input_ids"]) for t in texts]
    n_words = [len(w) for w in replaceable_words(lm.tokenizer, texts, max_length=512)[1]]
    print(f"data: {len(texts)} BBC sentences, {min(lengths)}-{max(lengths)} tokens (median {int(np.median(lengths))}),"
          f" {int(np.median(n_words))} replaceable words (median)")
    n = args.neighbours

    base_texts = texts[:args.baseline_samples]
    lm.model.to(device)
    if device.type == "cpu":
        start = time.perf_counter()
        base = one_pass_per_position(lm, base_texts, top_k=n)
        base_s = time.perf_counter() - start
    candidate_swaps(lm, base_texts[:2], top_k=n, progress=False, device=device)  # warm-up
    start = time.perf_counter()
    _, ours = candidate_swaps(lm, base_texts, top_k=n, token_budget=args.token_budget, device=device, progress=False)
    ours_s = time.perf_counter() - start
    if device.type == "cpu":
        same = total = 0
        for b_text, o_text in zip(base, ours):
            for (b_ids, b_lp), o in zip(b_text, o_text):
                total += 1
                same += b_ids == [s.token_id for s in o]  # same substitutes in the same order
                np.testing.assert_allclose([s.logprob for s in o], b_lp, atol=2e-3)
        print(f"one pass per position: {len(base_texts) / base_s:7.2f} sentences/s  "
              f"({base_s:.1f} s for {len(base_texts)})")
        print(f"batched (mlflow-mia) : {len(base_texts) / ours_s:7.2f} sentences/s  ({ours_s:.1f} s)  "
              f"-> speed ratio {base_s / ours_s:.1f}x  (same substitutes for {same}/{total} words, "
              f"log-probs agree to 2e-3)")
    else:
        print(f"batched (mlflow-mia) : {len(base_texts) / ours_s:7.2f} sentences/s  ({ours_s:.1f} s)")

    for m in (1, 2):
        cfg = NeighbourhoodConfig(num_neighbours=n, num_replacements=m)
        start = time.perf_counter()
        out = generate_neighbours(lm, texts[:args.samples], config=cfg, device=device, progress=False,
                                  token_budget=args.token_budget)
        seconds = time.perf_counter() - start
        got = [len(x) for x in out]
        print(f"generate_neighbours n={n} m={m} on {args.samples} sentences: {args.samples / seconds:.2f} "
              f"sentences/s ({seconds:.1f} s; {int(np.median(got))} neighbours per sentence, median)")


if __name__ == "__main__":
    main()
