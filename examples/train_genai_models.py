#!/usr/bin/env python3
"""Train the models of examples/genai_models/ from text that ships with Python itself.

Usage (from the repository root; numpy is the only package needed):

    .venv/bin/python examples/train_genai_models.py

The corpus is the help text of Python's own `pydoc_data.topics` (the text `help("if")` prints), about
460 kB of English, part of every CPython installation. From it the script writes:

  examples/genai_models/textgen/1/ngram.npz    a word-level trigram language model with interpolated
                                               back-off to bigrams and unigrams over the 2,000 most
                                               frequent tokens (pruned to n-grams seen at least twice)
  examples/genai_models/textgen/tokenizer.json the same tokenization as a Hugging Face `tokenizers` file
  (+ tokenizer_config.json)                    (word-level), for clients that count tokens themselves
  examples/genai_models/embed/1/vectors.npz    32-dimensional word vectors: a truncated SVD of the
                                               positive pointwise mutual information of co-occurrences
                                               within two tokens, over the same vocabulary

Both model.py files tokenize with the same rule (TOKEN_PATTERN below: lower-cased words and identifiers, numbers, single
punctuation characters). Everything is deterministic, so re-running the script reproduces the files.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pydoc_data.topics

ROOT = Path(__file__).resolve().parent / "genai_models"
TOKEN_PATTERN = re.compile(r"[a-z_][a-z0-9_]*(?:'[a-z]+)?|[0-9]+|[^\sa-z0-9_]")
VOCAB_SIZE = 2000
EMBED_DIMS = 32
UNK, EOS = "<unk>", "<eos>"


def tokenize(text: str) -> list[str]:
    return TOKEN_PATTERN.findall(text.lower())


def corpus() -> list[list[str]]:
    """One token list per help topic, in sorted topic order."""
    return [tokenize(pydoc_data.topics.topics[k]) for k in sorted(pydoc_data.topics.topics)]


def vocabulary(docs: list[list[str]]) -> list[str]:
    counts = Counter(t for d in docs for t in d)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [UNK, EOS] + [w for w, _ in ranked[: VOCAB_SIZE - 2]]


def ids_of(docs: list[list[str]], vocab: list[str]) -> np.ndarray:
    """The whole corpus as token ids, each topic followed by <eos>."""
    index = {w: i for i, w in enumerate(vocab)}
    ids: list[int] = []
    for d in docs:
        ids.extend(index.get(t, 0) for t in d)
        ids.append(1)
    return np.array(ids, dtype=np.int64)


def ngram_model(ids: np.ndarray) -> dict[str, np.ndarray]:
    v = VOCAB_SIZE
    unigram = np.bincount(ids, minlength=v).astype(np.uint32)
    bi = ids[:-1] * v + ids[1:]
    tri = (ids[:-2] * v + ids[1:-1]) * v + ids[2:]
    bi_keys, bi_counts = np.unique(bi, return_counts=True)
    tri_keys, tri_counts = np.unique(tri, return_counts=True)
    # N-grams that end in <unk> are never generated; those seen once are pruned (they are most of the file).
    keep_bi = (bi_counts >= 2) & (bi_keys % v != 0)
    keep_tri = (tri_counts >= 2) & (tri_keys % v != 0)
    return {
        "vocab": np.array(VOCAB, dtype=np.str_),
        "unigram": unigram,
        "bigram_keys": bi_keys[keep_bi].astype(np.uint32),
        "bigram_counts": bi_counts[keep_bi].astype(np.uint16),
        "trigram_keys": tri_keys[keep_tri].astype(np.uint64),
        "trigram_counts": tri_counts[keep_tri].astype(np.uint16),
    }


def word_vectors(ids: np.ndarray) -> np.ndarray:
    v = VOCAB_SIZE
    co = np.zeros((v, v), dtype=np.float64)
    for offset in (1, 2):
        np.add.at(co, (ids[:-offset], ids[offset:]), 1.0)
    co = co + co.T
    co[:2, :] = 0  # <unk> and <eos> carry no meaning
    co[:, :2] = 0
    total = co.sum()
    row = co.sum(axis=1, keepdims=True)
    col = co.sum(axis=0, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        pmi = np.log(co * total / (row * col))
    ppmi = np.where(np.isfinite(pmi) & (pmi > 0), pmi, 0.0)
    u, s, _ = np.linalg.svd(ppmi, full_matrices=False)
    vectors = u[:, :EMBED_DIMS] * np.sqrt(s[:EMBED_DIMS])
    # A fixed sign per dimension (the SVD's is arbitrary), so that re-running reproduces the file.
    signs = np.sign(vectors[np.argmax(np.abs(vectors), axis=0), np.arange(EMBED_DIMS)])
    vectors = vectors * signs
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.where(norms > 0, vectors / np.maximum(norms, 1e-12), 0).astype(np.float16)


def hf_tokenizer(vocab: list[str]) -> dict:
    """The tokenizer as a Hugging Face `tokenizer.json`: lower-casing, split at whitespace, then TOKEN_PATTERN."""
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
             "special": True}
            for i, t in enumerate((UNK, EOS))
        ],
        "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "WhitespaceSplit"},
                {"type": "Split", "pattern": {"Regex": TOKEN_PATTERN.pattern}, "behavior": "Isolated", "invert": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(vocab)}, "unk_token": UNK},
    }


DOCS = corpus()
VOCAB = vocabulary(DOCS)


def main() -> None:
    ids = ids_of(DOCS, VOCAB)
    (ROOT / "textgen" / "1").mkdir(parents=True, exist_ok=True)
    (ROOT / "embed" / "1").mkdir(parents=True, exist_ok=True)
    np.savez_compressed(ROOT / "textgen" / "1" / "ngram.npz", **ngram_model(ids))
    (ROOT / "textgen" / "tokenizer.json").write_text(json.dumps(hf_tokenizer(VOCAB), indent=1) + "\n")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": UNK, "eos_token": EOS}
    (ROOT / "textgen" / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    np.savez_compressed(
        ROOT / "embed" / "1" / "vectors.npz", vocab=np.array(VOCAB, dtype=np.str_), vectors=word_vectors(ids)
    )
    for p in sorted([*ROOT.glob("*/1/*.npz"), ROOT / "textgen" / "tokenizer.json"]):
        print(f"{p.relative_to(ROOT.parent)}: {p.stat().st_size} bytes")
    print(f"corpus: {len(ids)} tokens, vocabulary {len(VOCAB)}")


if __name__ == "__main__":
    main()
