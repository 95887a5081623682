"""A tiny character-level transformer language model with ggmlgrad, trained on text generated here
(a small grammar of sentences), that samples text at the end.

    python examples/char_transformer.py                 # capture_step training (default)
    python examples/char_transformer.py --mode graph    # the same training in graph mode
    python examples/char_transformer.py --quick         # a short run (CI): must beat the unigram baseline

Model: character embedding + sinusoidal positions, ``gg.nn.TransformerEncoder`` of pre-norm
causal layers (``is_causal=True``), a final LayerNorm and a linear head; AdamW. Prints a progress
bar, the training loss, the held-out loss (in nats per character, against the unigram
baseline), the median step time, and a sample.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

import ggmlgrad as gg
from lstm_classifier import Progress   # the same one-line progress bar as the LSTM example

SUBJECTS = ["the cat", "a dog", "the old man", "my sister", "the bird", "a small child", "the teacher"]
VERBS = ["sees", "likes", "finds", "follows", "paints", "calls", "watches"]
OBJECTS = ["the red ball", "a green tree", "the river", "an apple", "the moon", "a quiet house", "the garden"]
ENDINGS = [".", " today.", " again.", " at night.", " in the morning."]


def make_text(n_sentences: int, rng: np.random.Generator) -> str:
    """Sentences from a small grammar: the model can learn its words and their order."""
    out = []
    for _ in range(n_sentences):
        s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{rng.choice(ENDINGS)}"
        out.append(s[0].upper() + s[1:])
    return " ".join(out) + " "


def sinusoidal_positions(length: int, d_model: int) -> np.ndarray:
    """The fixed position code of "Attention Is All You Need": sin / cos at geometric frequencies."""
    pos = np.arange(length)[:, None]
    div = np.exp(np.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = np.zeros((length, d_model), np.float32)
    pe[:, 0::2] = np.sin(pos * div)
    pe[:, 1::2] = np.cos(pos * div)
    return pe


class CharTransformer(gg.nn.Module):
    def __init__(self, vocab: int, context: int, d_model: int = 64, nhead: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = gg.nn.Embedding(vocab, d_model)
        self.register_buffer("positions", gg.tensor(sinusoidal_positions(context, d_model)))
        layer = gg.nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=2 * d_model, dropout=0.0,
                                              activation="gelu", batch_first=True, norm_first=True)
        self.encoder = gg.nn.TransformerEncoder(layer, layers)
        self.norm = gg.nn.LayerNorm(d_model)
        self.head = gg.nn.Linear(d_model, vocab)
        self.scale = math.sqrt(d_model)

    def forward(self, idx: gg.Tensor) -> gg.Tensor:
        x = self.embed(idx) * self.scale + self.positions
        return self.head(self.norm(self.encoder(x, is_causal=True)))


def batches(data: np.ndarray, context: int, batch: int, rng: np.random.Generator):
    starts = rng.integers(0, len(data) - context - 1, batch)
    x = np.stack([data[s:s + context] for s in starts])
    y = np.stack([data[s + 1:s + context + 1] for s in starts])
    return x.astype(np.int32), y.astype(np.int32)


def train(mode: str, steps: int, seed: int, progress: bool, sample_chars: int = 200) -> tuple[float, float, str]:
    rng = np.random.default_rng(seed)
    gg.manual_seed(seed)
    text = make_text(3000, rng)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = np.array([stoi[c] for c in text], np.int32)
    split = int(0.9 * len(data))
    train_data, val_data = data[:split], data[split:]
    context, batch, vocab = 32, 32, len(chars)
    model = CharTransformer(vocab, context)
    opt = gg.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)

    def loss_fn(xb, yb):
        logits = model(xb)
        return gg.nn.functional.cross_entropy(logits.reshape(-1, vocab), yb.reshape(-1))

    if mode == "capture":
        step = gg.capture_step(loss_fn, opt)
        evaluate = gg.capture(loss_fn)
    else:
        def step(xb, yb):
            with gg.graph_mode(mode == "graph"):
                opt.zero_grad()
                loss = loss_fn(gg.tensor(xb), gg.tensor(yb))
                loss.backward()
                opt.step()
                return loss.item()

        def evaluate(xb, yb):
            with gg.graph_mode(mode == "graph"), gg.no_grad():
                return loss_fn(gg.tensor(xb), gg.tensor(yb)).item()

    bar = Progress(steps, f"char transformer ({mode})", progress)
    times, losses = [], []
    for i in range(steps):
        xb, yb = batches(train_data, context, batch, rng)
        t0 = time.perf_counter()
        losses.append(float(step(xb, yb)))
        times.append(time.perf_counter() - t0)
        bar.update(1, f"loss {losses[-1]:.3f}")
    bar.close()
    model.eval()
    val_rng = np.random.default_rng(seed + 1)
    val = float(np.mean([float(evaluate(*batches(val_data, context, batch, val_rng))) for _ in range(8)]))
    print(f"train loss {np.mean(losses[-20:]):.3f}  held-out loss {val:.3f} nats/char  "
          f"step {np.median(times) * 1e3:.2f} ms (median of {steps})", flush=True)
    return val, _unigram_loss(train_data, val_data, vocab), _sample(model, data[:context], chars, sample_chars, seed)


def _unigram_loss(train_data: np.ndarray, val_data: np.ndarray, vocab: int) -> float:
    p = (np.bincount(train_data, minlength=vocab) + 1) / (len(train_data) + vocab)
    return float(-np.log(p[val_data]).mean())


def _sample(model: CharTransformer, prompt: np.ndarray, chars: list, n: int, seed: int) -> str:
    """Generate ``n`` characters after ``prompt`` (temperature 0.8), one captured forward per character."""
    rng = np.random.default_rng(seed)
    next_logits = gg.capture(lambda idx: model(idx)[:, -1])
    window = list(prompt)
    out = []
    for _ in range(n):
        logits = np.asarray(next_logits(np.array([window], np.int32)))[0].astype(np.float64) / 0.8
        p = np.exp(logits - logits.max())
        c = int(rng.choice(len(p), p=p / p.sum()))
        out.append(chars[c])
        window = window[1:] + [c]
    return "".join(chars[i] for i in prompt) + "|" + "".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["capture", "graph", "eager"], default="capture")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="150 steps; must beat the unigram baseline clearly")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    val, unigram, sample = train(args.mode, 150 if args.quick else args.steps, args.seed, not args.no_progress)
    print(f"held-out loss {val:.3f} vs unigram baseline {unigram:.3f} nats/char")
    print("sample (prompt|generated):")
    print(sample)
    if args.quick and val > 0.6 * unigram:
        print("the model did not learn: held-out loss above 60% of the unigram baseline", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
