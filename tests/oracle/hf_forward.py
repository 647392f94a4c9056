#!/usr/bin/python3
"""The oracle of tests/cli/sf-run-oracle.bats: a literal NumPy forward pass
of Hugging Face's LlamaForCausalLM, Qwen3ForCausalLM and the mixtures of
experts MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM and
OlmoeForCausalLM, in float64, as transformers' modeling_llama.py,
modeling_qwen3.py, modeling_mixtral.py, modeling_qwen2_moe.py,
modeling_qwen3_moe.py and modeling_olmoe.py compute it, and the writer of
the tiny random F32 checkpoints it runs on.

  hf_forward.py write DIR ARCH SEED [SHARDS]
                                        a checkpoint in Hugging Face layout,
                                        in SHARDS files behind an index
  hf_forward.py nll DIR IDS             mean nll of IDS[1:] given the prefix
  hf_forward.py greedy DIR N IDS        the text of N greedy tokens after IDS

IDS is comma-separated token ids. The tokenizer is the byte-level fixture
(tests/fixtures/bytelevel), whose ids 32-126 are the ASCII bytes; the
head favours them, so that greedy's text gives its ids one to one.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

PRINTABLE = range(32, 127)  # ids of the byte-level tokenizer that are ASCII text
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(ROOT, "fixtures", "bytelevel", "tokenizer.json")

# Small, but with every feature that matters: GQA (4 query heads over 2),
# Qwen3's head_dim (16) unlike hidden / heads (12), two layers.
SHAPES = {
    "llama": dict(architectures=["LlamaForCausalLM"], model_type="llama",
                  tie_word_embeddings=True),
    "qwen3": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=16,
                  tie_word_embeddings=False, attention_bias=False),
    # 4 experts, 2 a token: every expert has tokens, and none has all
    "mixtral": dict(architectures=["MixtralForCausalLM"], model_type="mixtral",
                    tie_word_embeddings=False, num_local_experts=4, num_experts_per_tok=2),
    # the top 2 not renormalised; experts narrower than intermediate_size
    # (which only dense layers would use) and a wider shared expert;
    # Qwen2's q/k/v biases
    "qwen2_moe": dict(architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe",
                      tie_word_embeddings=False, num_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=32, shared_expert_intermediate_size=80,
                      norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[]),
    # Qwen3's per-head q/k norms and head_dim, 8 experts, 3 a token, renormalised
    "qwen3_moe": dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                      head_dim=16, tie_word_embeddings=False, attention_bias=False,
                      num_experts=8, num_experts_per_tok=3, moe_intermediate_size=40,
                      norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[]),
    # q/k norms over the whole projection, clip_qkv low enough to clip,
    # 8 experts of intermediate_size, 3 a token, not renormalised, and
    # rms_norm_eps left to OlmoeConfig's 1e-5
    "olmoe": dict(architectures=["OlmoeForCausalLM"], model_type="olmoe",
                  tie_word_embeddings=False, num_experts=8, num_experts_per_tok=3,
                  norm_topk_prob=False, clip_qkv=2.5, rms_norm_eps=None),
}

# rms_norm_eps where the config leaves it out: each config class's default
EPS = {"mixtral": 1e-5, "olmoe": 1e-5}


# --- checkpoint

def write_safetensors(path, tensors):
    tensors = {name: a.astype("<f4") for name, a in tensors.items()}
    header, offset = {}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for a in tensors.values():
            f.write(a.tobytes())


def write_shards(d, tensors, n):
    """tensors in n files model-0000i-of-0000n.safetensors beside
    model.safetensors.index.json, as transformers' save_pretrained shards."""
    names = list(tensors)
    weight_map, total = {}, 0
    for i in range(n):
        f = "model-%05d-of-%05d.safetensors" % (i + 1, n)
        part = {k: tensors[k] for k in names[i::n]}
        write_safetensors(os.path.join(d, f), part)
        for k, a in part.items():
            weight_map[k] = f
            total += a.size * 4
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)


def read_checkpoint(d):
    """Every tensor of the checkpoint in d, one file or shards."""
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(d, "model.safetensors"))
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for f in files:
        out.update(read_safetensors(os.path.join(d, f)))
    return out


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    out = {}
    for name, t in json.loads(data[8:8 + n]).items():
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], "<f4").reshape(t["shape"])
    return out


def head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def moe_names(c):
    """A mixture's prefix in a layer and its experts' three matrices."""
    if c["model_type"] == "mixtral":
        return "block_sparse_moe.", ("w1", "w3", "w2")
    return "mlp.", ("gate_proj", "up_proj", "down_proj")


def n_experts(c):
    return c.get("num_local_experts") or c.get("num_experts") or 0


def write(d, arch, seed, shards=1):
    c = dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=268, max_position_embeddings=256,
             rms_norm_eps=1e-6, rope_theta=10000.0, hidden_act="silu", bos_token_id=265,
             eos_token_id=266, torch_dtype="float32")
    c.update(SHAPES[arch])
    c = {k: v for k, v in c.items() if v is not None}
    rng = np.random.default_rng(seed)
    dim, hid, hd = c["hidden_size"], c["intermediate_size"], head_dim(c)
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd

    def mat(rows, cols):  # unit-variance outputs: the logits are sharp
        return rng.standard_normal((rows, cols)) / np.sqrt(cols)

    def gain(n):  # far from 1, so that a norm left out shows
        return rng.uniform(0.5, 1.5, n)

    # 0.4: a tied head then gives logits about as sharp as the untied one
    t = {"model.embed_tokens.weight": 0.4 * rng.standard_normal((c["vocab_size"], dim))}
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        t[p + "input_layernorm.weight"] = gain(dim)
        t[p + "self_attn.q_proj.weight"] = mat(q, dim)
        t[p + "self_attn.k_proj.weight"] = mat(kv, dim)
        t[p + "self_attn.v_proj.weight"] = mat(kv, dim)
        t[p + "self_attn.o_proj.weight"] = mat(dim, q)
        if arch == "qwen2_moe":  # biases large enough to matter
            t[p + "self_attn.q_proj.bias"] = 0.5 * rng.standard_normal(q)
            t[p + "self_attn.k_proj.bias"] = 0.5 * rng.standard_normal(kv)
            t[p + "self_attn.v_proj.bias"] = 0.5 * rng.standard_normal(kv)
        if arch in ("qwen3", "qwen3_moe"):
            t[p + "self_attn.q_norm.weight"] = gain(hd)
            t[p + "self_attn.k_norm.weight"] = gain(hd)
        if arch == "olmoe":
            t[p + "self_attn.q_norm.weight"] = gain(q)
            t[p + "self_attn.k_norm.weight"] = gain(kv)
        t[p + "post_attention_layernorm.weight"] = gain(dim)
        if n_experts(c):
            moe, mats = moe_names(c)
            moe = p + moe
            ehid = c.get("moe_intermediate_size", hid)
            # a sharper router, so that the top k are seldom near ties
            t[moe + "gate.weight"] = 3 * mat(n_experts(c), dim)
            for e in range(n_experts(c)):
                x = moe + "experts.%d." % e
                t[x + mats[0] + ".weight"] = mat(ehid, dim)
                t[x + mats[1] + ".weight"] = mat(ehid, dim)
                t[x + mats[2] + ".weight"] = mat(dim, ehid)
            if "shared_expert_intermediate_size" in c:
                sh = c["shared_expert_intermediate_size"]
                t[moe + "shared_expert.gate_proj.weight"] = mat(sh, dim)
                t[moe + "shared_expert.up_proj.weight"] = mat(sh, dim)
                t[moe + "shared_expert.down_proj.weight"] = mat(dim, sh)
                t[moe + "shared_expert_gate.weight"] = mat(1, dim)
        else:
            t[p + "mlp.gate_proj.weight"] = mat(hid, dim)
            t[p + "mlp.up_proj.weight"] = mat(hid, dim)
            t[p + "mlp.down_proj.weight"] = mat(dim, hid)
    t["model.norm.weight"] = gain(dim)
    if not c["tie_word_embeddings"]:
        t["lm_head.weight"] = 3 * mat(c["vocab_size"], dim)
    # the head's rows of all but printable ASCII damped, so that greedy
    # picks those, and its text stands for its ids one to one
    head = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    head[[i for i in range(c["vocab_size"]) if i not in PRINTABLE]] *= 0.05
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=1)
    if shards > 1:
        write_shards(d, t, shards)
    else:
        write_safetensors(os.path.join(d, "model.safetensors"), t)
    shutil.copy(TOKENIZER, os.path.join(d, "tokenizer.json"))
    # BOS first, as the fixture's; no clean-up, so the text is the tokens'
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                   "clean_up_tokenization_spaces": False}, f)


# --- forward pass

def rmsnorm(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate((-x[..., h:], x[..., :h]), axis=-1)


def silu(x):
    return x / (1.0 + np.exp(-x))


def mlp(h, w1, w3, w2):
    return (silu(h @ w1.T) * (h @ w3.T)) @ w2.T


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def moe(h, w, p, c):
    """MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock, Qwen3MoeSparseMoeBlock,
    OlmoeSparseMoeBlock: softmax over the router logits, the top k,
    renormalised always (Mixtral) or when norm_topk_prob; each expert on its
    tokens, added in expert order; then Qwen2-MoE's shared expert times
    sigmoid of its gate."""
    _, mats = moe_names(c)
    z = h @ w[p + "gate.weight"].T  # (T, experts)
    prob = np.exp(z - z.max(axis=-1, keepdims=True))
    prob /= prob.sum(axis=-1, keepdims=True)
    top = np.argsort(-prob, axis=-1, kind="stable")[:, :c["num_experts_per_tok"]]
    renorm = c["model_type"] == "mixtral" or c.get("norm_topk_prob", False)
    out = np.zeros_like(h)
    for e in range(n_experts(c)):
        x = p + "experts.%d." % e
        for t in np.nonzero((top == e).any(axis=-1))[0]:
            weight = prob[t, e] / (prob[t, top[t]].sum() if renorm else 1.0)
            out[t] += weight * mlp(h[t], *(w[x + m + ".weight"] for m in mats))
    if p + "shared_expert_gate.weight" in w:
        x = p + "shared_expert."
        shared = mlp(h, w[x + "gate_proj.weight"], w[x + "up_proj.weight"],
                     w[x + "down_proj.weight"])
        out = out + sigmoid(h @ w[p + "shared_expert_gate.weight"].T) * shared
    return out


def logits(d, ids):
    """Every position's logits (T, vocab) for the tokens ids."""
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    w = {k: v.astype(np.float64) for k, v in read_checkpoint(d).items()}
    eps, hd = c.get("rms_norm_eps", EPS.get(c["model_type"], 1e-6)), head_dim(c)
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    T = len(ids)

    inv_freq = 1.0 / c["rope_theta"] ** (np.arange(0, hd, 2) / hd)
    freqs = np.outer(np.arange(T), inv_freq)
    emb = np.concatenate((freqs, freqs), axis=-1)  # (T, hd)
    cos, sin = np.cos(emb)[None], np.sin(emb)[None]
    causal = np.triu(np.full((T, T), -np.inf), 1)

    x = w["model.embed_tokens.weight"][ids]  # (T, dim)
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
        q = h @ w[p + "self_attn.q_proj.weight"].T
        k = h @ w[p + "self_attn.k_proj.weight"].T
        v = h @ w[p + "self_attn.v_proj.weight"].T
        if p + "self_attn.q_proj.bias" in w:  # Qwen2, Qwen2-MoE
            q = q + w[p + "self_attn.q_proj.bias"]
            k = k + w[p + "self_attn.k_proj.bias"]
            v = v + w[p + "self_attn.v_proj.bias"]
        if c["model_type"] == "olmoe":  # over the whole projection, then clip_qkv
            q = rmsnorm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, w[p + "self_attn.k_norm.weight"], eps)
            if c.get("clip_qkv") is not None:
                q, k, v = (np.clip(a, -c["clip_qkv"], c["clip_qkv"]) for a in (q, k, v))
        q = q.reshape(T, nh, hd).transpose(1, 0, 2)
        k = k.reshape(T, nkv, hd).transpose(1, 0, 2)
        v = v.reshape(T, nkv, hd).transpose(1, 0, 2)
        if c["model_type"] in ("qwen3", "qwen3_moe"):  # per head, before RoPE
            q = rmsnorm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = np.repeat(k, nh // nkv, axis=0)  # repeat_kv
        v = np.repeat(v, nh // nkv, axis=0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + causal
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        z = (s / s.sum(axis=-1, keepdims=True)) @ v  # (nh, T, hd)
        x = x + z.transpose(1, 0, 2).reshape(T, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
        if n_experts(c):
            x = x + moe(h, w, p + moe_names(c)[0], c)
        else:
            x = x + mlp(h, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"],
                        w[p + "mlp.down_proj.weight"])
    x = rmsnorm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


def nll(d, ids):
    z = logits(d, ids)[:-1]
    z = z - z.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return -logp[np.arange(len(ids) - 1), ids[1:]].mean()


def greedy(d, n, ids):
    ids = list(ids)
    for _ in range(n):
        ids.append(int(np.argmax(logits(d, ids)[-1])))  # lowest id on ties
    return ids


def text(ids):
    """The byte-level tokenizer's text of printable ASCII ids: the bytes."""
    if any(i not in PRINTABLE for i in ids):
        sys.exit("hf_forward.py: greedy ids %s: not all printable ASCII" % ids)
    return bytes(ids).decode()


def main(argv):
    if len(argv) in (5, 6) and argv[1] == "write":
        write(argv[2], argv[3], int(argv[4]), int(argv[5]) if len(argv) == 6 else 1)
    elif len(argv) == 4 and argv[1] == "nll":
        print("%.9f" % nll(argv[2], [int(i) for i in argv[3].split(",")]))
    elif len(argv) == 5 and argv[1] == "greedy":
        ids = [int(i) for i in argv[4].split(",")]
        sys.stdout.write(text(greedy(argv[2], int(argv[3]), ids)[len(ids):]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
