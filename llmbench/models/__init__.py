"""Model files: reading, writing and quantizing GGUF, and the dummy models.

- :mod:`llmbench.models.gguf`: :class:`~llmbench.models.gguf.GGUFFile`, a validated, memory-mapped GGUF file.
- :mod:`llmbench.models.gguf_writer`: writing GGUF files, streamed in row chunks.
- :mod:`llmbench.models.weight_types`: ggml's weight types: ids, block sizes, quantizing and dequantizing rows.
- :mod:`llmbench.models.quantize`: ``llmbench quantize``, llama.cpp's quantization mixes for whole files.
- :mod:`llmbench.models.imatrix`: llama.cpp's importance matrices, read for the quantizers.
- :mod:`llmbench.models.dummy`: dummy models, real architectures with seeded random weights
  (:func:`llmbench.dummy_model`).
- :mod:`llmbench.models.dummy_vocab`: the synthetic vocabularies of the dummy models.
"""
