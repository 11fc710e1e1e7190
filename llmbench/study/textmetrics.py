"""Diversity and repetition of generated texts, as the sampling-sensitivity literature measures them.

Words are whitespace-separated and lower-cased (no tokenizer, so the figures compare across models).

- ``distinct_n`` (Li et al., 2016, "A Diversity-Promoting Objective Function for Neural Conversation
  Models"): corpus level, the number of distinct n-grams over all texts divided by the number of
  n-grams over all texts; 0 where there are none.
- ``self_bleu`` (Zhu et al., 2018, Texygen): each text scored as a hypothesis against all the others
  as references with sentence BLEU-N (uniform weights, clipped counts, brevity penalty against the
  reference closest in length, and NLTK's smoothing "method1": a zero count becomes 0.1), averaged
  over the texts. Higher means the texts repeat one another.
- ``repetition_rate``: within each text, the share of its n-grams that repeat an n-gram earlier in
  the same text (loops and copied phrases), averaged over the texts that have any n-gram.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence


def words(text: str) -> list[str]:
    """Lower-cased, whitespace-separated words."""
    return text.lower().split()


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """The ``n``-grams of a token list, in order."""
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Distinct-n: unique ``n``-grams over all n-grams of the texts together (words, lower-cased); 0.0 for none."""
    grams = [g for t in texts for g in ngrams(words(t), n)]
    return len(set(grams)) / len(grams) if grams else 0.0


def _bleu(hyp: list[str], refs: list[list[str]], n: int) -> float:
    if not hyp:
        return 0.0
    logs = 0.0
    for k in range(1, n + 1):
        counts = Counter(ngrams(hyp, k))
        total = sum(counts.values())
        if total == 0:
            return 0.0   # a hypothesis shorter than n words: NLTK gives 0 as well
        most: Counter[tuple[str, ...]] = Counter()
        for r in refs:
            for g, c in Counter(ngrams(r, k)).items():
                most[g] = max(most[g], c)
        clipped = sum(min(c, most[g]) for g, c in counts.items())
        logs += math.log((clipped or 0.1) / total) / n
    closest = min((len(r) for r in refs), key=lambda m: (abs(m - len(hyp)), m))
    bp = 1.0 if len(hyp) > closest else math.exp(1 - closest / len(hyp))
    return bp * math.exp(logs)


def self_bleu(texts: Sequence[str], n: int = 4) -> float | None:
    """Mean BLEU-n of each text against the others; None with fewer than two texts."""
    toks = [words(t) for t in texts]
    if len(toks) < 2:
        return None
    return sum(_bleu(h, toks[:i] + toks[i + 1:], n) for i, h in enumerate(toks)) / len(toks)


def repetition_rate(texts: Sequence[str], n: int = 4) -> float | None:
    """The mean over texts of the share of repeated ``n``-grams (1 - unique / all); None if no text has an n-gram."""
    rates = []
    for t in texts:
        grams = ngrams(words(t), n)
        if grams:
            rates.append(1 - len(set(grams)) / len(grams))
    return sum(rates) / len(rates) if rates else None
