"""Deterministic byte-level BPE vocabularies for dummy models, of exactly the size a preset needs.

Layout (as GPT-2 and Llama 3 lay theirs out): the 256 byte tokens in GPT-2's byte-to-unicode order,
then one token per merge in merge (rank) order, then the special (control) tokens. Nothing is
downloaded or trained on data: the merges are the most likely strings under a character bigram
model counted from a short English text embedded below, enumerated best-first with integer costs,
so every machine builds the same vocabulary in well under a second, even for 128k tokens. Each
merge joins a token and one character into a longer token (``"Ġth e"`` -> ``"Ġthe"``); both parts
and the result are tokens, and each result has a higher id than its parts.

Written the standard way for llama.cpp (tokenizer.ggml.model = "gpt2", pre, tokens, token_type,
merges, bos/eos ids). Tested by tests/test_dummy.py (exact sizes, valid merges, a round trip
through the `tokenizers` library).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

TOKEN_NORMAL = 1
TOKEN_CONTROL = 3
SPACE = "Ġ"   # GPT-2's stand-in for the byte 0x20

# Character statistics come from this text (any English prose would do; changing it changes every
# dummy vocabulary, so the dummy format version must change with it).
_CORPUS = """
the model reads its weights from a file and runs them on the machine that the user has in front of
them. how fast it answers depends on how many bytes each token must read from memory, on how the
threads share the work, and on whether the kernels keep the vector units busy. a benchmark that is
worth trusting states what it measured, with which settings, and how much the numbers vary between
repetitions. when the same questions are asked of a quantized model, the answers should change only
a little; measuring that change is the other half of the story. there are many ways to get this
wrong: timing the first call, forgetting the warmup, counting tokens differently, or comparing a
server that caches prompts with one that does not. so this package writes down every setting next
to every number, and it builds its own models when none is given, with random weights of the right
shape, because the speed of a matrix product does not depend on the values inside the matrix.
"""


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters, in its token order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}


# ---- the character model: integer costs (-1000 ln p), best first ----

def _costs(counts: Counter[str], scale: float = 1.0) -> list[tuple[int, str]]:
    total = sum(counts.values())
    return sorted((round(-1000.0 * math.log(scale * c / total)), ch) for ch, c in counts.items())


@lru_cache(maxsize=1)
def _char_model() -> tuple[list[tuple[int, str]], dict[str, list[tuple[int, str]]]]:
    """(root characters, {context: following characters}), each sorted by cost. The context is
    SPACE for a token that is just the space marker, else the token's last character (lowercased)."""
    words = _CORPUS.split()
    letters = [c for c in "abcdefghijklmnopqrstuvwxyz"]
    unigram = Counter({c: 1 for c in letters}) + Counter(c for w in words for c in w if c in letters)
    initial = Counter({c: 1 for c in letters}) + Counter(w[0] for w in words if w[0] in letters)
    roots: Counter[str] = Counter()
    for c, k in unigram.items():            # a piece inside a word
        roots[c] += 4 * k
    for c, k in initial.items():            # a capitalized word without a leading space
        roots[c.upper()] += k
    roots[SPACE] = sum(roots.values())      # half of all tokens start with a space, as in real vocabularies
    after_space = Counter({c: 6 * k for c, k in initial.items()}) + Counter({c.upper(): k for c, k in initial.items()})
    follow = {SPACE: _costs(after_space)}
    for a in letters:
        pairs = Counter({b: 0.05 for b in letters})   # smoothing: every letter can follow, rarely
        for w in words:
            pairs.update(w[i + 1] for i in range(len(w) - 1) if w[i] == a and w[i + 1] in letters)
        follow[a] = _costs(pairs)
    return _costs(roots), follow


def synthetic_merges(n: int) -> list[tuple[str, str]]:
    """The first ``n`` merges: (token, character) pairs, most likely first. Best-first enumeration of
    the tree of strings (each node pushes its cheapest child and its next sibling, so the heap stays
    small and every string appears once, after its prefix)."""
    roots, follow = _char_model()
    # heap entries: (cost, token, parent cost, parent token, sibling list key, index in that list)
    heap = [(roots[0][0], roots[0][1], 0, "", "", 0)]
    lists = {"": roots, **follow}
    out: list[tuple[str, str]] = []
    while len(out) < n:
        cost, tok, pcost, ptok, key, i = heapq.heappop(heap)
        if ptok:
            out.append((ptok, tok[len(ptok):]))
        siblings = lists[key]
        if i + 1 < len(siblings):
            c, ch = siblings[i + 1]
            heapq.heappush(heap, (pcost + c, ptok + ch, pcost, ptok, key, i + 1))
        ctx = SPACE if tok == SPACE else tok[-1].lower()
        c, ch = follow[ctx][0]
        heapq.heappush(heap, (cost + c, tok + ch, cost, tok, ctx, 0))
    return out


# ---- vocabularies ----

def llama3_specials(n: int) -> list[str]:
    """Llama 3.1's special tokens in their order, reserved tokens filling up to ``n``."""
    named = {0: "<|begin_of_text|>", 1: "<|end_of_text|>", 4: "<|finetune_right_pad_id|>", 6: "<|start_header_id|>",
             7: "<|end_header_id|>", 8: "<|eom_id|>", 9: "<|eot_id|>", 10: "<|python_tag|>"}
    out, reserved = [], 0
    for i in range(n):
        if i in named:
            out.append(named[i])
        else:
            out.append(f"<|reserved_special_token_{reserved}|>")
            reserved += 1
    return out


@dataclass(frozen=True)
class TokenizerStyle:
    """How a preset's vocabulary ends and is announced to llama.cpp."""

    pre: str                 # tokenizer.ggml.pre: llama.cpp's pre-tokenizer name
    specials: tuple[str, ...]
    bos: str
    eos: str
    add_bos: bool


def tokenizer_style(name: str, n_special: int = 256) -> TokenizerStyle:
    """"llama3" (Llama 3's pre-tokenizer and its first ``n_special`` special tokens), "qwen2", or
    "gpt2" (<unk>, <s>, </s>: for shapes whose real tokenizer is SentencePiece, such as Mistral's;
    see llmbench/models/dummy.py)."""
    if name == "llama3":
        sp = llama3_specials(n_special)
        return TokenizerStyle("llama-bpe", tuple(sp), sp[0], sp[1], True)
    if name == "qwen2":
        return TokenizerStyle("qwen2", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), "<|endoftext|>",
                              "<|endoftext|>", False)
    if name == "gpt2":
        return TokenizerStyle("default", ("<unk>", "<s>", "</s>"), "<s>", "</s>", True)
    raise ValueError(f"unknown tokenizer style {name!r}; use llama3, qwen2 or gpt2")


@dataclass(frozen=True)
class Vocab:
    """A generated vocabulary: tokens, their types, BPE merges, BOS and EOS ids, and its tokenizer style."""

    tokens: list[str]
    token_types: np.ndarray   # int32: 1 normal, 3 control
    merges: list[str]         # "left right", rank order
    bos_id: int
    eos_id: int
    style: TokenizerStyle

    def gguf_metadata(self) -> dict[str, Any]:
        """The tokenizer.ggml.* keys (NumPy scalars carry the GGUF types llama.cpp expects)."""
        return {
            "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.pre": self.style.pre,
            "tokenizer.ggml.tokens": self.tokens,
            "tokenizer.ggml.token_type": self.token_types,
            "tokenizer.ggml.merges": self.merges,
            "tokenizer.ggml.bos_token_id": np.uint32(self.bos_id),
            "tokenizer.ggml.eos_token_id": np.uint32(self.eos_id),
            "tokenizer.ggml.add_bos_token": self.style.add_bos,
        }


@lru_cache(maxsize=8)
def build_vocab(size: int, style: TokenizerStyle) -> Vocab:
    """A vocabulary of exactly ``size`` tokens: 256 bytes, ``size - 256 - len(specials)`` merges, specials."""
    n_merges = size - 256 - len(style.specials)
    if n_merges < 0:
        raise ValueError(f"a vocabulary of {size} tokens cannot hold 256 byte tokens and "
                         f"{len(style.specials)} special tokens; use at least {256 + len(style.specials)}")
    merges = synthetic_merges(n_merges)
    tokens = [*bytes_to_unicode().values(), *(a + b for a, b in merges), *style.specials]
    types = np.full(size, TOKEN_NORMAL, np.int32)
    types[size - len(style.specials):] = TOKEN_CONTROL
    first_special = size - len(style.specials)
    bos, eos = (first_special + style.specials.index(t) for t in (style.bos, style.eos))
    return Vocab(tokens, types, [f"{a} {b}" for a, b in merges], bos, eos, style)
