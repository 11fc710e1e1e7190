"""A float64 NumPy forward pass of Llama-family models (llama, mistral, qwen2) and of Gemma 3, written from the
model definition and independent of llmbench's engine: weights are read and dequantized with the
`gguf` package (Q1_0, which gguf 0.19 does not decode, by its one-line definition here). Slow and simple on
purpose; the engine is tested against it.

Gemma 3 as llama.cpp computes it (llama-model.cpp's gemma3 hyper-parameters, models/gemma3.cpp): embeddings
times sqrt(n_embd); per layer RMSNorm -> Q, K, V -> RMSNorm of each query and key head -> RoPE (NeoX pairs;
base 10000 on the sliding-window layers, the file's base on every 6th layer, 5, 11, ...) -> attention
scaled by 1/sqrt(head_dim) (n_embd/n_head on the 62-layer 27B), a query at position p seeing positions
p - window < j <= p on sliding-window layers -> output projection -> RMSNorm -> residual; RMSNorm ->
gelu_tanh(gate) * up -> down -> RMSNorm -> residual; final norm; output tied to the embedding.

bf16=True models the engine's activations="bf16": every product with a float matrix (F32, F16, BF16
in the file) multiplies the matrix and the activations rounded to BF16 (round to nearest even from
float32), summed in float64."""

from __future__ import annotations

import gguf
import numpy as np


def round_bf16(a: np.ndarray) -> np.ndarray:
    """float32(a) rounded to the nearest BF16 (ties to even), as float64."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return u.view(np.float32).astype(np.float64)


FLOAT_TYPES = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16)


def dequantize(data: np.ndarray, tensor_type) -> np.ndarray:
    """float32 values of a tensor's raw data: gguf's decoders, and Q1_0's (blocks of 128: an fp16 d, then one
    bit per value, least significant first; a set bit is +d, a clear one -d)."""
    if tensor_type != gguf.GGMLQuantizationType.Q1_0:
        return gguf.quants.dequantize(data, tensor_type)
    b = np.ascontiguousarray(data, np.uint8).reshape(-1, 18)
    d = b[:, :2].copy().view(np.float16).astype(np.float32)
    bits = np.unpackbits(b[:, 2:], axis=1, bitorder="little").astype(bool)
    return np.where(bits, d, -d).reshape(*np.shape(data)[:-1], -1)


class Reference:
    def __init__(self, path, bf16: bool = False):
        r = gguf.GGUFReader(path)
        f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("GGUF.")}
        arch = f["general.architecture"]
        self.n_layer = int(f[f"{arch}.block_count"])
        self.dim = int(f[f"{arch}.embedding_length"])
        self.n_head = int(f[f"{arch}.attention.head_count"])
        self.n_kv = int(f.get(f"{arch}.attention.head_count_kv", self.n_head))
        self.hd = int(f.get(f"{arch}.attention.key_length", self.dim // self.n_head))
        self.eps = float(f.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5))
        self.base = float(f.get(f"{arch}.rope.freq_base", 10000.0))
        self.neox = arch in ("qwen2", "gemma3")
        self.gemma3 = arch == "gemma3"
        self.window = int(f[f"{arch}.attention.sliding_window"]) if self.gemma3 else 0
        self.scale = 1 / np.sqrt(self.hd)
        if self.gemma3 and self.n_layer == 62:
            self.scale = 1 / np.sqrt(self.dim // self.n_head)
        self.w, self.rounded = {}, set()
        for t in r.tensors:
            a = dequantize(t.data, t.tensor_type).astype(np.float64)
            self.w[t.name] = a.reshape([int(x) for x in reversed(t.shape)])
            if bf16 and t.tensor_type in FLOAT_TYPES and len(t.shape) == 2:
                self.rounded.add(t.name)
        if "output.weight" not in self.w:
            self.w["output.weight"] = self.w["token_embd.weight"]
            if "token_embd.weight" in self.rounded:
                self.rounded.add("output.weight")
        self.bf = {k: round_bf16(self.w[k]) for k in self.rounded if k != "token_embd.weight"}

    def mm(self, x, name):
        """x @ W.T for the matrix `name` (both rounded to BF16 where bf16 applies to it)."""
        if name in self.bf:
            return round_bf16(x) @ self.bf[name].T
        return x @ self.w[name].T

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def swa(self, layer: int) -> bool:
        """Whether `layer` attends over the sliding window (gemma3: all but every 6th)."""
        return self.gemma3 and layer % 6 < 5

    def rope(self, x, pos, base=None):
        """x: [n, heads, hd], rotated at positions pos [n]."""
        i = np.arange(self.hd // 2)
        theta = pos[:, None] * (base or self.base) ** (-2.0 * i / self.hd)  # [n, hd/2]
        if "rope_freqs.weight" in self.w:
            theta = theta / self.w["rope_freqs.weight"]
        cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        if self.neox:
            a, b = x[..., : self.hd // 2], x[..., self.hd // 2:]
            return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
        return out

    def logits(self, tokens) -> np.ndarray:
        """Causal forward pass over one sequence: logits [n, vocab] in float64."""
        w, n = self.w, len(tokens)
        pos = np.arange(n, dtype=np.float64)
        x = w["token_embd.weight"][np.asarray(tokens)]
        if self.gemma3:
            x = x * np.sqrt(self.dim)
        causal = np.triu(np.full((n, n), -np.inf), 1)
        ij = np.arange(n)[:, None] - np.arange(n)[None, :]   # query position - key position
        windowed = np.where(ij >= self.window, -np.inf, causal)
        group = self.n_head // self.n_kv
        for layer in range(self.n_layer):
            p = f"blk.{layer}."
            swa = self.swa(layer)
            h = self.rmsnorm(x, w[p + "attn_norm.weight"])
            q = self.mm(h, p + "attn_q.weight") + w.get(p + "attn_q.bias", 0)
            k = self.mm(h, p + "attn_k.weight") + w.get(p + "attn_k.bias", 0)
            v = self.mm(h, p + "attn_v.weight") + w.get(p + "attn_v.bias", 0)
            q, k = q.reshape(n, self.n_head, self.hd), k.reshape(n, self.n_kv, self.hd)
            if self.gemma3:
                q, k = self.rmsnorm(q, w[p + "attn_q_norm.weight"]), self.rmsnorm(k, w[p + "attn_k_norm.weight"])
            base = 10000.0 if swa else None
            q, k = self.rope(q, pos, base), self.rope(k, pos, base)
            v = v.reshape(n, self.n_kv, self.hd)
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
            s = np.einsum("ihd,jhd->hij", q, k) * self.scale + (windowed if swa else causal)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            att = np.einsum("hij,jhd->ihd", s, v).reshape(n, -1)
            o = self.mm(att, p + "attn_output.weight")
            x = x + (self.rmsnorm(o, w[p + "post_attention_norm.weight"]) if self.gemma3 else o)
            h = self.rmsnorm(x, w[p + "ffn_norm.weight"])
            g, u = self.mm(h, p + "ffn_gate.weight"), self.mm(h, p + "ffn_up.weight")
            if self.gemma3:
                act = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g**3)))
                x = x + self.rmsnorm(self.mm(act * u, p + "ffn_down.weight"), w[p + "post_ffw_norm.weight"])
            else:
                x = x + self.mm(g / (1 + np.exp(-g)) * u, p + "ffn_down.weight")
        return self.mm(self.rmsnorm(x, w["output_norm.weight"]), "output.weight")
