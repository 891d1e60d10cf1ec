"""How-to: a HuggingFace transformer → σN-Ens → fit on dict batches.

Run it:  python docs/howto/huggingface.py           (about a minute on one CPU thread)
         python docs/howto/huggingface.py --small   (a few seconds; what the test suite runs)

Nothing is downloaded: the model is built from a tiny ``BertConfig``. With a pretrained checkpoint
the only change is ``BertForSequenceClassification.from_pretrained(name, num_labels=...)`` —
``sigma_ensemble`` copies the pretrained LayerNorm weights into every member.

1. ``ez.sigma_ensemble(bert, members=4)``: every ``nn.LayerNorm`` becomes a per-member σLayerNorm.
   The ensemble repeats every batch-sized input (``input_ids``, ``attention_mask``) for the members
   and returns the model's own output type with ``logits`` of shape ``(B, M, num_labels)``.
2. ``ez.training.fit`` takes the data as a dict of tensors with a ``"labels"`` entry; the model is
   called as ``model(**inputs)`` WITHOUT the labels (so the HF model does not compute its own loss)
   and ensemblize applies the per-member cross-entropy to ``output.logits``.
3. ``ez.training.predict`` on the same kind of dict gives member probabilities ``(N, M, C)``.

The toy task: is token 7 more frequent than token 8 in a random, padded sequence? A transformer
learns it by counting.
"""

from __future__ import annotations

import argparse

import torch

import ensemblize as ez

#: Public names this how-to needs (the test suite checks they exist before running it).
REQUIRES = (
    "ensemblize.sigma_ensemble",
    "ensemblize.training.fit",
    "ensemblize.training.predict",
    "transformers",
)


def make_data(n: int, *, seq_len: int = 16, vocab: int = 12, seed: int = 0) -> dict[str, torch.Tensor]:
    """Token sequences with padding; label 1 when token 7 occurs more often than token 8."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (n, seq_len), generator=g)
    lengths = torch.randint(seq_len // 2, seq_len + 1, (n,), generator=g)
    mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()
    ids = ids.masked_fill(mask == 0, 0)  # 0 = [PAD]
    labels = ((ids == 7).sum(1) > (ids == 8).sum(1)).long()
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def main(small: bool = False) -> dict[str, float]:
    from transformers import BertConfig, BertForSequenceClassification

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=32, num_labels=2,
    )  # fmt: skip
    bert = BertForSequenceClassification(config)  # or .from_pretrained("bert-base-uncased", num_labels=2)

    ensemble = ez.sigma_ensemble(bert, members=4, seed=0)
    print(f"σN ensemble: {len(ensemble.converted)} LayerNorms made per-member, M = {ensemble.members}")

    train, val, test = (
        make_data(256 if small else 1000, seed=0),
        make_data(128, seed=1),
        make_data(256, seed=2),
    )
    ez.training.fit(
        ensemble, train, val, epochs=2 if small else 10, batch_size=32, optimizer="adamw", lr=2e-3, seed=0,
        regularizer=lambda m: ez.diversity.softmax_temperature_loss(m, tau=5.0, lam=0.05),
    )  # fmt: skip

    probs = ez.training.predict(ensemble, {k: v for k, v in test.items() if k != "labels"})
    y = test["labels"]
    mi = ez.metrics.mutual_information_per_sample(probs)  # member disagreement per sequence
    wrong = probs.mean(dim=1).argmax(dim=1) != y
    out = {
        "accuracy": ez.metrics.accuracy(probs, y),
        "ece": ez.metrics.ece(probs, y),
        "mean_mi": float(mi.mean()),
        "max_mi": float(mi.max()),
    }
    print(f"share of label 1: {float(y.float().mean()):.3f}")
    print(
        f"test accuracy {out['accuracy']:.3f}, ECE {out['ece']:.3f}; probabilities {tuple(probs.shape)} (N, M, C)"
    )
    print(f"mean mutual information {out['mean_mi']:.2e} (max {out['max_mi']:.2e}); {int(wrong.sum())} wrong")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a few seconds instead of a minute")
    main(small=parser.parse_args().small)
