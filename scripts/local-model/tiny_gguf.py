#!/usr/bin/env python3
"""Writes a tiny llama-architecture GGUF model for plumbing tests (not a language model).

Usage: tiny_gguf.py VOCAB.gguf OUT.gguf
  VOCAB.gguf  a vocabulary-only GGUF as llama.cpp ships them (models/ggml-vocab-llama-spm.gguf,
              inside the llama-cpp-python sdist on PyPI); its tokenizer is copied.
Needs gguf-py (vendor/llama.cpp/gguf-py of the same sdist) and numpy.

The weights are built, not trained: attention and feed-forward outputs are zero, so the hidden
state is the embedding of the last token, and the output layer maps every token to "OK" and "OK"
to end-of-sequence. Whatever it is asked, the model answers "OK" and stops: enough to carry
requests, streams, usage and stop reasons through a real server, and nothing more.
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType  # noqa: F401


def field(reader, name):
    f = reader.fields[name]
    if hasattr(f, "contents"):
        return f.contents()
    # Older gguf-py: the data parts by index.
    vals = [f.parts[i] for i in f.data]
    if len(vals) == 1 and not name.endswith(("tokens", "scores", "token_type", "merges")):
        v = vals[0]
        return v.tobytes().decode() if v.dtype == np.uint8 else v[0].item()
    return [bytes(v).decode() if v.dtype == np.uint8 else v[0].item() for v in vals]


def main(vocab_path, out_path):
    r = GGUFReader(vocab_path)
    tokens = field(r, "tokenizer.ggml.tokens")
    scores = field(r, "tokenizer.ggml.scores")
    types = field(r, "tokenizer.ggml.token_type")
    model = field(r, "tokenizer.ggml.model")
    bos = int(field(r, "tokenizer.ggml.bos_token_id"))
    eos = int(field(r, "tokenizer.ggml.eos_token_id"))
    ok = next(i for i, t in enumerate(tokens) if t in ("▁OK", "OK", "ĠOK"))
    n_vocab, n_embd, n_ff, n_head, n_layer = len(tokens), 64, 128, 4, 1

    w = GGUFWriter(out_path, "llama")
    w.add_name("flowerbox-plumbing-tiny")
    w.add_context_length(32768)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_file_type(0)  # all F32
    w.add_tokenizer_model(model)
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(True)
    w.add_chat_template(
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] if m['content'] is string "
        "else '' }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
    )

    rng = np.random.default_rng(0)
    f32 = np.float32
    # Hidden state = embedding: dimension 0 marks "not OK", dimension 1 marks "OK".
    emb = np.zeros((n_vocab, n_embd), f32)
    emb[:, 0] = 1.0
    emb[ok, 0], emb[ok, 1] = 0.0, 1.0
    w.add_tensor("token_embd.weight", emb)
    norm = np.zeros(n_embd, f32)
    norm[:2] = 1.0
    w.add_tensor("output_norm.weight", norm)
    out = np.zeros((n_vocab, n_embd), f32)
    out[ok, 0] = 10.0   # after anything but OK: OK
    out[eos, 1] = 10.0  # after OK: end of sequence
    w.add_tensor("output.weight", out)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, f32))
        for name in ("attn_q", "attn_k", "attn_v"):
            w.add_tensor(p + name + ".weight", rng.normal(0, 0.02, (n_embd, n_embd)).astype(f32))
        w.add_tensor(p + "attn_output.weight", np.zeros((n_embd, n_embd), f32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, f32))
        w.add_tensor(p + "ffn_gate.weight", rng.normal(0, 0.02, (n_ff, n_embd)).astype(f32))
        w.add_tensor(p + "ffn_up.weight", rng.normal(0, 0.02, (n_ff, n_embd)).astype(f32))
        w.add_tensor(p + "ffn_down.weight", np.zeros((n_embd, n_ff), f32))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{out_path}: {n_vocab} tokens, answers {tokens[ok]!r} then EOS")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
