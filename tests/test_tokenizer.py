"""Tokenizers from GGUF metadata: stories260K's against sentencepiece with its own tok512.model,
SmolLM2's against a `tokenizers` BPE built the way its own tokenizer.json defines it, round trips,
chat templates, and the chat answer of a real instruct model."""

from __future__ import annotations

import pytest
from models import smollm2_gguf
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers

import llmbench
from llmbench import LLM, SamplingParams, tokenizer
from llmbench.models.gguf import GGUFFile
from llmbench.tokenizer import Tokenizer

TEXTS = [
    "Once upon a time, there was a little girl named Lily.",
    "Hello  world   with    runs of spaces ",
    "  leading and trailing  ",
    "Digits 0123456789 and 3.14159, 1e-9; $42!",
    "Unicode: naïve café, Ελληνικά, русский, 日本語のテキスト, 한국어",
    "Emoji 🦙🚀👩‍👩‍👧 and ⅓ ½ 𝔘𝔫𝔦",
    "Tabs\tand\nnewlines\n\n  indented\r\nCRLF",
    "It's don't we'll I'M",
    "",
    "x",
]


@pytest.fixture(scope="module")
def spm():
    sentencepiece = pytest.importorskip("sentencepiece")
    from conftest import STORIES

    model = STORIES.parent / "tok512.model"
    if not model.exists():
        pytest.skip(f"{model} not found")
    return sentencepiece.SentencePieceProcessor(model_file=str(model))


@pytest.fixture(scope="module")
def stories_meta(stories_path):
    return GGUFFile(stories_path).metadata


def test_stories_matches_sentencepiece(spm, stories_meta):
    # tok512.model trims and collapses runs of spaces (SentencePiece's remove_extra_whitespaces);
    # the GGUF conversion did not record that, so it is passed here explicitly.
    tok = Tokenizer.from_gguf(stories_meta, remove_extra_whitespaces=True)
    for text in TEXTS:
        assert tok.encode(text, add_bos=False) == spm.encode(text), text
        assert tok.decode(tok.encode(text)) == spm.decode(spm.encode(text)), text


def test_encode_batch_is_encode(stories_meta, smollm_path):
    """The batch gives each text encode's ids, BOS rule included (stories260K adds BOS, SmolLM2 does not)."""
    for tok in (Tokenizer.from_gguf(stories_meta), Tokenizer.from_gguf(GGUFFile(smollm_path).metadata)):
        texts = [*TEXTS, "", "<s>Lily", "x" * 3000, TEXTS[0]]
        for add_bos in (None, True, False):
            assert tok.encode_batch(texts, add_bos) == [tok.encode(t, add_bos) for t in texts]
        assert tok.encode_batch([]) == []
        many = [f"{i} {TEXTS[i % len(TEXTS)]}" for i in range(2 * tokenizer.ENCODE_BATCH + 3)]   # three batches
        assert tok.encode_batch(many) == [tok.encode(t) for t in many]


def test_stories_default_keeps_whitespace(spm, stories_meta):
    """Without the option (llama.cpp's default) spaces are kept as written, and text without runs
    of spaces tokenizes exactly as sentencepiece does."""
    tok = Tokenizer.from_gguf(stories_meta)
    for text in TEXTS:
        ids = tok.encode(text, add_bos=False)
        assert tok.decode(ids) == text, text
        if "  " not in text and text == text.strip(" "):
            assert ids == spm.encode(text), text
    assert tok.encode("Lily")[0] == tok.bos_id == 1 and tok.eos_id == 2


def smollm_reference(meta) -> HFTokenizer:
    """SmolLM2's tokenizer as its tokenizer.json defines it: BPE over the vocab and merges, split into
    single digits, then GPT-2's byte-level regex; byte-level decoding."""
    tokens = meta["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    hf = HFTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    hf.decoder = decoders.ByteLevel()
    return hf


@pytest.fixture(scope="module")
def smollm_path():
    return smollm2_gguf()


def test_smollm2_matches_reference(smollm_path):
    meta = GGUFFile(smollm_path).metadata
    tok, ref = Tokenizer.from_gguf(meta), smollm_reference(meta)
    assert meta["tokenizer.ggml.pre"] == "smollm" and not tok.add_bos
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == ref.encode(text).ids, text
        assert tok.decode(ids) == text, text
    # special tokens written in text are single tokens
    assert tok.encode("<|im_start|>user") == [tok.hf.token_to_id("<|im_start|>"), *ref.encode("user").ids]
    assert tok.eot_id == tok.hf.token_to_id("<|im_end|>") and tok.eot_id in tok.stop_ids


def test_chat_template_renders(smollm_path):
    tok = Tokenizer.from_gguf(GGUFFile(smollm_path).metadata)
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    custom = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    assert tok.apply_chat_template([{"role": "user", "content": "Hi"}], template=custom) == "[user] Hi\n"


def test_smollm2_answers_paris(smollm_path):
    # With 8-bit activations (the default, as llama.cpp computes) this Q4_1 model answers
    # "L'Étoile, la Marseillaise, ..." -- and so does llama.cpp's own llama-completion at
    # temperature 0. Float activations against the dequantized Q4_1 weights answer correctly.
    llm = LLM(smollm_path, threads=2, ctx=256, activations="f32")
    out = llm.chat([{"role": "user", "content": "What is the capital of France?"}],
                   SamplingParams(temperature=0, max_tokens=24))[0]
    assert "Paris" in out.text, out.text
    assert out.finish_reason in ("stop", "length")


def test_no_tokenizer_is_clear(stories_meta):
    meta = {k: v for k, v in stories_meta.items() if not k.startswith("tokenizer.")}
    with pytest.raises(llmbench.UnsupportedError, match="no tokenizer"):
        Tokenizer.from_gguf(meta)
    with pytest.raises(llmbench.UnsupportedError, match="not supported"):
        Tokenizer.from_gguf({**stories_meta, "tokenizer.ggml.model": "bert"})


def test_model_without_a_usable_tokenizer_runs_on_ids_and_says_why(tmp_path):
    from models import rewritten

    path = rewritten(llmbench.dummy_model("tiny", "Q8_0"), tmp_path / "pre.gguf", {"tokenizer.ggml.pre": "no-such-pre"})
    llm = LLM(path, threads=1)
    assert llm.logits([1, 2, 3]).shape == (3, llm.info["vocab"])
    with pytest.raises(llmbench.UnsupportedError, match=r"no usable tokenizer \(tokenizer.ggml.pre = 'no-such-pre' is not"):
        llm.tokenize("hello")


# Splits of one string worked out by hand from llama.cpp's regex lists (llama-vocab.cpp), each list
# applied in turn to every piece the one before left, matches and the text between kept apart.
PRE_TEXT = "Hello, (world) costs $12345!\n\n  I'm OK"
PRE_SPLITS = {
    "default": ["Hello", ",", " ", "(", "world", ")", " costs", " ", "$", "123", "45", "!", "\n\n ", " I", "'", "m", " OK"],
    "gpt-2": ["Hello", ",", " (", "world", ")", " costs", " $", "12345", "!", "\n\n ", " I", "'m", " OK"],
    "llama-bpe": ["Hello", ",", " (", "world", ")", " costs", " $", "123", "45", "!\n\n", " ", " I", "'m", " OK"],
    "qwen2": ["Hello", ",", " (", "world", ")", " costs", " $", "1", "2", "3", "4", "5", "!\n\n", " ", " I", "'m", " OK"],
    "smollm": ["Hello", ",", " (", "world", ")", " costs", " $", "1", "2", "3", "4", "5", "!", "\n\n ", " I", "'m", " OK"],
}


@pytest.mark.parametrize("pre", sorted(PRE_SPLITS))
def test_pre_tokenizers_split_as_llama_cpp(pre):
    from llmbench.tokenizer import _byte_level_pre

    pieces = [piece for piece, _ in _byte_level_pre(pre).pre_tokenize_str(PRE_TEXT)]
    assert [decoders.ByteLevel().decode([p]) for p in pieces] == PRE_SPLITS[pre]
    # the Llama 3 contractions are case-insensitive
    if pre in ("llama-bpe", "qwen2"):
        assert [decoders.ByteLevel().decode([p]) for p, _ in _byte_level_pre(pre).pre_tokenize_str("I'M")] == ["I", "'M"]
