"""A float64 NumPy forward pass of Llama-family models (llama, mistral, qwen2), written from the
model definition and independent of llmbench's engine: weights are read and dequantized with the
`gguf` package. Slow and simple on purpose; the engine is tested against it."""

from __future__ import annotations

import gguf
import numpy as np


class Reference:
    def __init__(self, path):
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
        self.neox = arch == "qwen2"
        self.w = {}
        for t in r.tensors:
            a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
            self.w[t.name] = a.reshape([int(x) for x in reversed(t.shape)])
        if "output.weight" not in self.w:
            self.w["output.weight"] = self.w["token_embd.weight"]

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        """x: [n, heads, hd], rotated at positions pos [n]."""
        i = np.arange(self.hd // 2)
        theta = pos[:, None] * self.base ** (-2.0 * i / self.hd)  # [n, hd/2]
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
        mask = np.triu(np.full((n, n), -np.inf), 1)
        group = self.n_head // self.n_kv
        for l in range(self.n_layer):
            p = f"blk.{l}."
            h = self.rmsnorm(x, w[p + "attn_norm.weight"])
            q = h @ w[p + "attn_q.weight"].T + w.get(p + "attn_q.bias", 0)
            k = h @ w[p + "attn_k.weight"].T + w.get(p + "attn_k.bias", 0)
            v = h @ w[p + "attn_v.weight"].T + w.get(p + "attn_v.bias", 0)
            q = self.rope(q.reshape(n, self.n_head, self.hd), pos)
            k = self.rope(k.reshape(n, self.n_kv, self.hd), pos)
            v = v.reshape(n, self.n_kv, self.hd)
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
            s = np.einsum("ihd,jhd->hij", q, k) / np.sqrt(self.hd) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            att = np.einsum("hij,jhd->ihd", s, v).reshape(n, -1)
            x = x + att @ w[p + "attn_output.weight"].T
            h = self.rmsnorm(x, w[p + "ffn_norm.weight"])
            g = h @ w[p + "ffn_gate.weight"].T
            x = x + (g / (1 + np.exp(-g)) * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
        return self.rmsnorm(x, w["output_norm.weight"]) @ w["output.weight"].T
