#!/usr/bin/env python3
# Writes a tiny Hugging Face llama folder for the CLI tests: config.json, model.safetensors
# (random f32 weights under transformers' names) with its index, and a byte-level BPE tokenizer.json of
# the 256 bytes. Standard library only. Usage: make_hf_folder.py DIR
import json
import os
import random
import struct
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
d, ffn, n_layer, n_head, n_kv, vocab = 64, 128, 2, 4, 2, 256
head_dim = d // n_head
config = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d, "intermediate_size": ffn,
    "num_attention_heads": n_head, "num_key_value_heads": n_kv, "num_hidden_layers": n_layer,
    "vocab_size": vocab, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 256,
    "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "float32",
}
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(config, f, indent=1)

shapes = {"model.embed_tokens.weight": [vocab, d], "model.norm.weight": [d], "lm_head.weight": [vocab, d]}
for i in range(n_layer):
    p = f"model.layers.{i}."
    shapes.update({
        p + "input_layernorm.weight": [d], p + "post_attention_layernorm.weight": [d],
        p + "self_attn.q_proj.weight": [n_head * head_dim, d], p + "self_attn.k_proj.weight": [n_kv * head_dim, d],
        p + "self_attn.v_proj.weight": [n_kv * head_dim, d], p + "self_attn.o_proj.weight": [d, n_head * head_dim],
        p + "mlp.gate_proj.weight": [ffn, d], p + "mlp.up_proj.weight": [ffn, d], p + "mlp.down_proj.weight": [d, ffn],
    })
rng = random.Random(7)
header, blobs, offset = {}, [], 0
for name, shape in shapes.items():
    n = 1
    for s in shape:
        n *= s
    if name.endswith("norm.weight"):
        values = [1.0 + rng.gauss(0, 0.05) for _ in range(n)]
    else:
        values = [rng.gauss(0, 0.1) for _ in range(n)]
    data = struct.pack(f"<{n}f", *values)
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    for b in blobs:
        f.write(b)

# An index naming the one shard, as sharded checkpoints have.
with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": offset}, "weight_map": {n: "model.safetensors" for n in shapes}}, f)

# GPT-2's byte-to-unicode map: every byte is one token, no merges.
printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
chars, extra = {}, 0
for b in range(256):
    if b in printable:
        chars[b] = chr(b)
    else:
        chars[b] = chr(256 + extra)
        extra += 1
tokenizer = {
    "added_tokens": [], "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
    "post_processor": None, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {chars[b]: b for b in range(256)}, "merges": []},
}
with open(os.path.join(out, "tokenizer.json"), "w") as f:
    json.dump(tokenizer, f)
