#!/usr/bin/env python
"""Make the sandbox's tiny random-weight Llama model (a real model vLLM loads, ~300 KB).

Written without torch/transformers so the controller needs only `tokenizers`: a byte-level BPE
tokenizer trained on a fixed corpus, a chat template, and bf16 safetensors weights from a seeded
RNG. Constraints from vLLM's CPU attention: head_dim 32 (supported sizes start at 32).
Usage: make-model.py DEST_DIR
"""
import hashlib
import json
import os
import random
import struct
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

HIDDEN, INTER, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 64, 128, 2, 2, 2, 32
WORDS = ("the quick brown fox jumps over lazy dog alpha beta gamma delta epsilon cache "
         "prefix token model worker frontend router block shared memory pool vector "
         "hello world dynamo ansible deploy server client request response metric").split()
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")
RECIPE = hashlib.sha256(open(__file__, "rb").read()).hexdigest()[:16]


def bf16_bytes(values):
    """Round float32 values to bf16 (round-to-nearest-even) and pack little-endian."""
    out = bytearray()
    for v in values:
        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        bits += 0x7FFF + ((bits >> 16) & 1)
        out += struct.pack("<H", (bits >> 16) & 0xFFFF)
    return bytes(out)


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (shape, data) in tensors.items():
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        for blob in blobs:
            fh.write(blob)


def main():
    out = sys.argv[1]
    stamp = os.path.join(out, ".kvshare-recipe")
    if os.path.exists(stamp) and open(stamp).read().strip() == RECIPE:
        print(f"model {out} is current (recipe {RECIPE})")
        return 0
    os.makedirs(out, exist_ok=True)
    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for dummy in range(50)) for dummy in range(2000)]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<s>", "</s>", "<pad>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.save(os.path.join(out, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
               "pad_token": "<pad>", "model_max_length": 4096, "chat_template": CHAT_TEMPLATE},
              open(os.path.join(out, "tokenizer_config.json"), "w"), indent=2)
    json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
               "hidden_size": HIDDEN, "intermediate_size": INTER, "num_hidden_layers": LAYERS,
               "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
               "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
               "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2,
               "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
              open(os.path.join(out, "config.json"), "w"), indent=2)
    json.dump({"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2},
              open(os.path.join(out, "generation_config.json"), "w"), indent=2)

    def rand(rows, cols):
        return [rows, cols], bf16_bytes(rng.gauss(0.0, 0.02) for dummy in range(rows * cols))

    def ones(n):
        return [n], bf16_bytes([1.0] * n)

    tensors = {"model.embed_tokens.weight": rand(vocab, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors[p + "self_attn.q_proj.weight"] = rand(HEADS * HEAD_DIM, HIDDEN)
        tensors[p + "self_attn.k_proj.weight"] = rand(KV_HEADS * HEAD_DIM, HIDDEN)
        tensors[p + "self_attn.v_proj.weight"] = rand(KV_HEADS * HEAD_DIM, HIDDEN)
        tensors[p + "self_attn.o_proj.weight"] = rand(HIDDEN, HEADS * HEAD_DIM)
        tensors[p + "mlp.gate_proj.weight"] = rand(INTER, HIDDEN)
        tensors[p + "mlp.up_proj.weight"] = rand(INTER, HIDDEN)
        tensors[p + "mlp.down_proj.weight"] = rand(HIDDEN, INTER)
        tensors[p + "input_layernorm.weight"] = ones(HIDDEN)
        tensors[p + "post_attention_layernorm.weight"] = ones(HIDDEN)
    tensors["model.norm.weight"] = ones(HIDDEN)
    tensors["lm_head.weight"] = rand(vocab, HIDDEN)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    with open(stamp, "w") as fh:
        fh.write(RECIPE + "\n")
    print(f"made model {out} (vocab {vocab}, recipe {RECIPE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
