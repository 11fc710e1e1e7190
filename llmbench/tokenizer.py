"""Tokenizers built from GGUF metadata on the `tokenizers` library.

- ``tokenizer.ggml.model == "llama"``: SentencePiece-style BPE over ``tokenizer.ggml.tokens`` and
  ``scores`` (merges derived from the scores, as SentencePiece's BPE merges the pair whose result
  scores highest), byte fallback to ``<0xXX>`` tokens, a dummy-prefix ``▁``.
- ``"gpt2"``: byte-level BPE over ``tokens`` and ``merges`` with the pre-tokenizer named in
  ``tokenizer.ggml.pre`` (default/gpt2, llama-bpe, smollm, qwen2, ...).

Control and user-defined tokens are special tokens: parsed in text; control tokens are skipped when
decoding, user-defined ones written out (as llama.cpp: Gemma's whitespace runs, newline and tab tokens are
user-defined).
Chat templates (``tokenizer.chat_template``) are rendered with jinja2; a vocabulary with Gemma's turn
tokens and no template of its own (Gemma 3 270M's GGUF) gets Gemma's (GEMMA_TEMPLATE).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from . import UnsupportedError

# llama.cpp's token types (tokenizer.ggml.token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

ENCODE_BATCH = 256   # texts a call of the tokenizers library's encode_batch (Tokenizer.encode_batch)

# Gemma's chat format (the template of google/gemma-3-*-it's tokenizer_config.json, written anew): BOS, turns
# <start_of_turn>{user|model}\n{content, trimmed}<end_of_turn>\n, a system message put before the first user
# turn's text, and <start_of_turn>model\n to prompt a reply. For GGUF files converted without it.
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{% set first = '' %}{% set msgs = messages %}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set first = messages[0]['content'] | trim ~ '\n\n' %}{% set msgs = messages[1:] %}{% endif %}"
    "{% for m in msgs %}"
    "{{ '<start_of_turn>' ~ ('model' if m['role'] == 'assistant' else m['role']) ~ '\n' }}"
    "{{ (first if loop.first else '') ~ (m['content'] | trim) ~ '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)

# Pre-tokenizer regexes by tokenizer.ggml.pre, as llama.cpp defines them (llama-vocab.cpp).
_GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
           r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
_QWEN2 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
          r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
_PRE_SPLITS: dict[str, list[str]] = {
    # llama.cpp's own default (a pre name it does not know is an error there): punctuation runs, GPT-2,
    # digit runs, then digits three at a time
    "default": [r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
    "gpt2": [_GPT2], "gpt-2": [_GPT2],
    "llama-bpe": [_LLAMA3], "llama3": [_LLAMA3], "llama-v3": [_LLAMA3], "dbrx": [_LLAMA3], "smaug-bpe": [_LLAMA3],
    "qwen2": [_QWEN2], "deepseek-r1-qwen": [_QWEN2],
    "smollm": [r"\p{N}", _GPT2], "starcoder": [r"\p{N}", _GPT2],
}


def _byte_level_pre(pre: str) -> pre_tokenizers.PreTokenizer:
    if pre not in _PRE_SPLITS:
        raise UnsupportedError(f"tokenizer.ggml.pre = {pre!r} is not supported "
                               f"(supported: {', '.join(sorted(_PRE_SPLITS))})")
    splits = [pre_tokenizers.Split(Regex(rx), behavior="isolated") for rx in _PRE_SPLITS[pre]]
    return pre_tokenizers.Sequence([*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def _spm_merges(tokens: Sequence[str], scores: np.ndarray, types: np.ndarray) -> list[tuple[str, str]]:
    """BPE merges that reproduce SentencePiece's BPE: every split of a normal piece into two pieces
    of the vocabulary, ranked by the merged piece's score (highest first), then by its id."""
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for i, piece in enumerate(tokens):
        if types[i] != NORMAL or len(piece) < 2:
            continue
        for k in range(1, len(piece)):
            a, b = piece[:k], piece[k:]
            if a in vocab and b in vocab:
                merges.append((-float(scores[i]), i, vocab[a], vocab[b], a, b))
    merges.sort()
    return [(a, b) for *_, a, b in merges]


@dataclass
class Tokenizer:
    """Encode, decode and chat templates for one model (see :meth:`from_gguf`)."""

    hf: HFTokenizer
    kind: str                     # "llama" (SentencePiece-style) or "gpt2" (byte-level BPE)
    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    eot_id: int | None
    add_bos: bool
    chat_template: str | None
    special_ids: frozenset[int]
    control_ids: frozenset[int] = frozenset()   # the special tokens decode() skips (user-defined ones it writes)

    @classmethod
    def from_gguf(cls, meta: dict[str, Any], remove_extra_whitespaces: bool | None = None) -> Tokenizer:
        """Build from GGUF metadata. ``remove_extra_whitespaces`` (SentencePiece's normalizer
        option: trim and collapse runs of spaces) defaults to ``tokenizer.ggml.remove_extra_whitespaces``,
        else False as in llama.cpp."""
        kind = meta.get("tokenizer.ggml.model")
        tokens = meta.get("tokenizer.ggml.tokens")
        if kind is None or tokens is None:
            raise UnsupportedError("this GGUF file has no tokenizer (tokenizer.ggml.model / tokens); "
                                   "pass token ids instead of text")
        n = len(tokens)
        types = np.asarray(meta.get("tokenizer.ggml.token_type", np.full(n, NORMAL)), dtype=np.int64)
        special = [i for i in range(n) if types[i] in (CONTROL, USER_DEFINED)]

        def tok_id(key: str) -> int | None:
            v = meta.get(f"tokenizer.ggml.{key}_token_id")
            return int(v) if v is not None and 0 <= int(v) < n else None

        if kind == "llama":
            scores = np.asarray(meta.get("tokenizer.ggml.scores", -np.arange(n, dtype=np.float32)))
            vocab = {t: i for i, t in enumerate(tokens)}
            unk = tokens[tok_id("unknown")] if tok_id("unknown") is not None else None
            model = models.BPE(vocab=vocab, merges=_spm_merges(tokens, scores, types), unk_token=unk,
                               fuse_unk=True, byte_fallback=True)
            hf = HFTokenizer(model)
            rm_ws = meta.get("tokenizer.ggml.remove_extra_whitespaces", False) if remove_extra_whitespaces is None \
                else remove_extra_whitespaces
            norm: list[normalizers.Normalizer] = [normalizers.Replace(Regex(r"\A +| +\z"), ""), normalizers.Replace(Regex(" {2,}"), " ")] if rm_ws else []
            if meta.get("tokenizer.ggml.add_space_prefix", True):
                norm.append(normalizers.Prepend("▁"))
            norm.append(normalizers.Replace(" ", "▁"))
            hf.normalizer = normalizers.Sequence(norm)
            strip = [decoders.Strip(content=" ", left=1, right=0)] if meta.get("tokenizer.ggml.add_space_prefix", True) else []
            hf.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), *strip])
            add_bos_default = True
        elif kind == "gpt2":
            merges_raw = meta.get("tokenizer.ggml.merges")
            if merges_raw is None:
                raise UnsupportedError("GPT-2 style tokenizer without tokenizer.ggml.merges")
            merges = [tuple(m.split(" ", 1)) for m in merges_raw]
            model = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, ignore_merges=False)
            hf = HFTokenizer(model)
            hf.pre_tokenizer = _byte_level_pre(str(meta.get("tokenizer.ggml.pre", "default")))
            hf.decoder = decoders.ByteLevel()
            add_bos_default = False
        else:
            raise UnsupportedError(f"tokenizer.ggml.model = {kind!r} is not supported (supported: llama, gpt2)")
        hf.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in special])
        eot = tok_id("eot")
        if eot is None:  # chat models often mark the end of a turn with a named control token
            for name in ("<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>"):
                if name in (tokens[i] for i in special):
                    eot = tokens.index(name)
                    break
        template = meta.get("tokenizer.chat_template")
        if not template and {"<start_of_turn>", "<end_of_turn>"} <= {tokens[i] for i in special}:
            template = GEMMA_TEMPLATE
        return cls(hf=hf, kind=kind, vocab_size=n, bos_id=tok_id("bos"), eos_id=tok_id("eos"), eot_id=eot,
                   add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", add_bos_default)),
                   chat_template=template, special_ids=frozenset(special),
                   control_ids=frozenset(i for i in special if types[i] == CONTROL))

    # ---- encode / decode ----

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Token ids of ``text``; special tokens written in the text are recognized. A BOS token is
        prepended when ``add_bos`` (default: the model's ``add_bos_token``) and not already there."""
        return self._bos(self.hf.encode(text, add_special_tokens=False).ids, add_bos)

    def encode_batch(self, texts: Sequence[str], add_bos: bool | None = None) -> list[list[int]]:
        """``encode`` of each text, the same ids, the texts encoded ``ENCODE_BATCH`` at a time on the tokenizers
        library's threads (full MMLU's 56,168 requests are 40.6 million tokens of five-shot prompts). Each
        Encoding also holds its tokens' strings and offsets: one batch of a whole MMLU subject's texts raised
        the full run's peak RSS from 1.28 to 1.60 GB."""
        texts = list(texts)
        return [self._bos(e.ids, add_bos) for i in range(0, len(texts), ENCODE_BATCH)
                for e in self.hf.encode_batch(texts[i:i + ENCODE_BATCH], add_special_tokens=False)]

    def _bos(self, ids: list[int], add_bos: bool | None) -> list[int]:
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            if not ids or ids[0] != self.bos_id:
                ids = [self.bos_id, *ids]
        return ids

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        ids = [int(i) for i in ids]
        if skip_special:
            ids = [i for i in ids if i not in self.control_ids]
        return self.hf.decode(ids, skip_special_tokens=False)

    @property
    def stop_ids(self) -> list[int]:
        """Tokens that end a generation: EOS and end-of-turn."""
        return sorted({i for i in (self.eos_id, self.eot_id) if i is not None})

    # ---- chat ----

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True,
                            template: str | None = None) -> str:
        """Render ``messages`` with the model's jinja2 chat template (or ``template``)."""
        src = template or self.chat_template
        if not src:
            raise UnsupportedError("this model has no chat template (tokenizer.chat_template); pass template=")
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(msg: str) -> None:
            raise jinja2.TemplateError(msg)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        tok = lambda i: self.hf.id_to_token(i) if i is not None else ""  # noqa: E731
        return env.from_string(src).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                           bos_token=tok(self.bos_id), eos_token=tok(self.eos_id))
