#!/usr/bin/python3
"""The oracle of tests/cli/sf-run-oracle.bats: a literal NumPy forward pass
of Hugging Face's LlamaForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM,
Gemma2ForCausalLM, Gemma3ForCausalLM and the mixtures of experts MixtralForCausalLM,
Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, OlmoeForCausalLM and
GptOssForCausalLM, in float64, as transformers' modeling_llama.py,
modeling_qwen3.py, modeling_phi3.py (with modeling_rope_utils.py's
longrope), modeling_gemma2.py, modeling_gemma3.py, modeling_mixtral.py,
modeling_qwen2_moe.py, modeling_qwen3_moe.py, modeling_olmoe.py and
modeling_gpt_oss.py compute it, and the writer of the tiny random F32
checkpoints it runs on (gpt_oss_mxfp4: gpt-oss's experts as the released
checkpoints store them, MXFP4 blocks and scales in U8 tensors, decoded
here from the format's definition; gemma3_mm: gemma3's weights as
Gemma3ForConditionalGeneration holds them, whose text model is read).

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
    # q/k/v and gate/up fused, half of each head's 12 dimensions turned,
    # longrope's short and long factors over a pretrained context of 32
    # (the text's 44 tokens take the long ones), a sliding window of 20 in
    # every layer, rms_norm_eps left to Phi3Config's 1e-5
    "phi3": dict(architectures=["Phi3ForCausalLM"], model_type="phi3",
                 tie_word_embeddings=False, partial_rotary_factor=0.5,
                 original_max_position_embeddings=32, sliding_window=20,
                 rope_scaling=dict(type="longrope", short_factor=[1.0, 1.5, 3.0],
                                   long_factor=[1.2, 4.0, 9.0]), rms_norm_eps=None),
    # Gemma 3: gains stored less one, q/k norms, head_dim 16 apart from
    # hidden / heads, scores by query_pre_attn_scalar 24 (not head_dim), a
    # sliding layer of window 6 on its own RoPE base then a full one with
    # linear scaling, GELU, sandwich norms, a tied head scaled embedding;
    # rms_norm_eps and tie_word_embeddings left to Gemma3TextConfig's
    "gemma3": dict(architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", head_dim=16,
                   query_pre_attn_scalar=24, sliding_window=6, sliding_window_pattern=2,
                   rope_theta=1e6, rope_local_base_freq=10000.0,
                   rope_scaling=dict(rope_type="linear", factor=4.0),
                   hidden_activation="gelu_pytorch_tanh", hidden_act=None, rms_norm_eps=None,
                   tie_word_embeddings=None),
    # Gemma 2: Gemma 3's gains, widths, scalar and sandwich, without its
    # q/k norms or local RoPE base; every other layer sliding from the first
    # (Gemma2Config's layer_types when absent); soft-capping of the scores
    # and logits low enough to bite (the released models': 50 and 30)
    "gemma2": dict(architectures=["Gemma2ForCausalLM"], model_type="gemma2", head_dim=16,
                   query_pre_attn_scalar=24, sliding_window=6, attn_logit_softcapping=1.5,
                   final_logit_softcapping=4.0, hidden_activation="gelu_pytorch_tanh",
                   hidden_act=None, rms_norm_eps=None, tie_word_embeddings=None),
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
    # q/k/v/o biases, sinks, a sliding layer of window 4 then a full one,
    # YaRN whose ramp spans frequencies 1-4 of 8, 4 experts of width 32
    # (MXFP4 rows are blocks of 32: hidden 64), top 2, the router's and
    # experts' biases, swiglu_limit low enough to clamp, eps and
    # swiglu_alpha left to GptOssConfig's defaults
    "gpt_oss": dict(architectures=["GptOssForCausalLM"], model_type="gpt_oss",
                    hidden_size=64, intermediate_size=32, head_dim=16,
                    tie_word_embeddings=False, attention_bias=True, num_local_experts=4,
                    num_experts_per_tok=2, sliding_window=4,
                    layer_types=["sliding_attention", "full_attention"], rope_theta=1000.0,
                    rope_scaling=dict(rope_type="yarn", factor=4.0, beta_fast=32.0,
                                      beta_slow=1.0, original_max_position_embeddings=256,
                                      truncate=False),
                    swiglu_limit=1.5, rms_norm_eps=None, hidden_act="silu"),
}
SHAPES["gpt_oss_mxfp4"] = dict(SHAPES["gpt_oss"],
                               quantization_config=dict(quant_method="mxfp4"))
# Gemma 3 as its 4B and larger checkpoints come: Gemma3ForConditionalGeneration,
# the text model's config in text_config and its tensors under
# language_model., beside a vision tower's and projector's
SHAPES["gemma3_mm"] = SHAPES["gemma3"]
WRAP = ("language_model.model.", "language_model.")

# rms_norm_eps where the config leaves it out: each config class's default
EPS = {"mixtral": 1e-5, "olmoe": 1e-5, "gpt_oss": 1e-5, "phi3": 1e-5}
# Gemma3TextConfig's sliding_window_pattern when absent
GEMMA3_PATTERN = 6

# MXFP4 (OCP Microscaling): blocks of 32 values, 16 bytes of 4-bit e2m1
# codes (value 2j in byte j's low nibble, 2j + 1 in its high one: sign,
# two exponent bits, one mantissa bit) and one e8m0 scale byte, 2^(s - 127)
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


# --- checkpoint

def write_safetensors(path, tensors):
    """F32, but uint8 arrays as U8."""
    tensors = {name: a if a.dtype == np.uint8 else a.astype("<f4")
               for name, a in tensors.items()}
    header, offset = {}, 0
    for name, a in tensors.items():
        dtype = "U8" if a.dtype == np.uint8 else "F32"
        header[name] = {"dtype": dtype, "shape": list(a.shape),
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
        dtype = "u1" if t["dtype"] == "U8" else "<f4"
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype).reshape(t["shape"])
    return out


def mxfp4_decode(blocks, scales):
    """blocks (..., rows, G, 16) and scales (..., rows, G) as (..., rows, G * 32)."""
    codes = np.stack((blocks & 15, blocks >> 4), axis=-1).reshape(*blocks.shape[:-1], 32)
    v = E2M1[codes] * 2.0 ** (scales.astype(np.int64) - 127)[..., None]
    return v.reshape(*blocks.shape[:-2], -1)


def mxfp4_encode(rng, shape):
    """Random MXFP4 blocks and scales of a (..., rows, cols) matrix: every
    code, scales 2^-5 to 2^-3, so that rows of 64 give outputs near unit
    variance."""
    *lead, rows, cols = shape
    blocks = rng.integers(0, 256, (*lead, rows, cols // 32, 16), dtype=np.uint8)
    scales = rng.integers(122, 125, (*lead, rows, cols // 32), dtype=np.uint8)
    return blocks, scales


def head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def moe_names(c):
    """A mixture's prefix in a layer and its experts' three matrices."""
    if c["model_type"] == "mixtral":
        return "block_sparse_moe.", ("w1", "w3", "w2")
    return "mlp.", ("gate_proj", "up_proj", "down_proj")


def n_experts(c):
    return c.get("num_local_experts") or c.get("num_experts") or 0


def write_gpt_oss_experts(t, p, c, rng, mat, mxfp4):
    """GptOssMLP's router (with a bias) and its experts fused as
    GptOssExperts holds them: gate_up_proj [experts, dim, 2 * hidden],
    input-major, gate and up in alternate columns; down_proj [experts,
    hidden, dim]; or, with mxfp4, as the released checkpoints store them:
    output-major blocks and scales."""
    ne, dim, hid = n_experts(c), c["hidden_size"], c["intermediate_size"]
    t[p + "router.weight"] = 3 * mat(ne, dim)
    t[p + "router.bias"] = 0.5 * rng.standard_normal(ne)
    x = p + "experts."
    if mxfp4:
        t[x + "gate_up_proj_blocks"], t[x + "gate_up_proj_scales"] = \
            mxfp4_encode(rng, (ne, 2 * hid, dim))
        t[x + "down_proj_blocks"], t[x + "down_proj_scales"] = \
            mxfp4_encode(rng, (ne, dim, hid))
    else:
        # unit-variance outputs, as mat's, of input-major matrices
        t[x + "gate_up_proj"] = rng.standard_normal((ne, dim, 2 * hid)) / np.sqrt(dim)
        t[x + "down_proj"] = rng.standard_normal((ne, hid, dim)) / np.sqrt(hid)
    t[x + "gate_up_proj_bias"] = 0.5 * rng.standard_normal((ne, 2 * hid))
    t[x + "down_proj_bias"] = 0.5 * rng.standard_normal((ne, dim))


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

    gemma = c["model_type"] in ("gemma2", "gemma3_text")

    def gain(n):  # far from 1, so that a norm left out shows; Gemma's less one
        return rng.uniform(0.5, 1.5, n) - (1.0 if gemma else 0.0)

    # 0.4: a tied head then gives logits about as sharp as the untied one
    t = {"model.embed_tokens.weight": 0.4 * rng.standard_normal((c["vocab_size"], dim))}
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        t[p + "input_layernorm.weight"] = gain(dim)
        t[p + "self_attn.q_proj.weight"] = mat(q, dim)
        t[p + "self_attn.k_proj.weight"] = mat(kv, dim)
        t[p + "self_attn.v_proj.weight"] = mat(kv, dim)
        t[p + "self_attn.o_proj.weight"] = mat(dim, q)
        gpt_oss = c["model_type"] == "gpt_oss"
        if arch == "qwen2_moe" or gpt_oss:  # biases large enough to matter
            t[p + "self_attn.q_proj.bias"] = 0.5 * rng.standard_normal(q)
            t[p + "self_attn.k_proj.bias"] = 0.5 * rng.standard_normal(kv)
            t[p + "self_attn.v_proj.bias"] = 0.5 * rng.standard_normal(kv)
        if gpt_oss:
            t[p + "self_attn.o_proj.bias"] = 0.5 * rng.standard_normal(dim)
            t[p + "self_attn.sinks"] = rng.standard_normal(c["num_attention_heads"])
        if arch in ("qwen3", "qwen3_moe", "gemma3", "gemma3_mm"):
            t[p + "self_attn.q_norm.weight"] = gain(hd)
            t[p + "self_attn.k_norm.weight"] = gain(hd)
        if arch == "olmoe":
            t[p + "self_attn.q_norm.weight"] = gain(q)
            t[p + "self_attn.k_norm.weight"] = gain(kv)
        t[p + "post_attention_layernorm.weight"] = gain(dim)
        if gemma:
            t[p + "pre_feedforward_layernorm.weight"] = gain(dim)
            t[p + "post_feedforward_layernorm.weight"] = gain(dim)
        if gpt_oss:
            write_gpt_oss_experts(t, p + "mlp.", c, rng, mat, arch.endswith("mxfp4"))
        elif n_experts(c):
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
        if c["model_type"] == "phi3":  # Phi3Attention's and Phi3MLP's fused layers
            t[p + "self_attn.qkv_proj.weight"] = np.concatenate(
                [t.pop(p + "self_attn.%s_proj.weight" % x) for x in "qkv"])
            t[p + "mlp.gate_up_proj.weight"] = np.concatenate(
                [t.pop(p + "mlp.%s_proj.weight" % x) for x in ("gate", "up")])
    t["model.norm.weight"] = gain(dim)
    if not c.get("tie_word_embeddings", gemma):
        t["lm_head.weight"] = 3 * mat(c["vocab_size"], dim)
    # the head's rows of all but printable ASCII damped, so that greedy
    # picks those, and its text stands for its ids one to one
    head = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    head[[i for i in range(c["vocab_size"]) if i not in PRINTABLE]] *= 0.05
    if arch == "gemma3_mm":  # the token ids at the top, as the released configs have them
        ids = {k: c.pop(k) for k in ("bos_token_id", "eos_token_id")}
        c = dict({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                  "text_config": {k: v for k, v in c.items() if k != "architectures"},
                  "vision_config": {"hidden_size": 8}}, **ids)
        t = {(WRAP[0] + k[6:] if k.startswith("model.") else WRAP[1] + k): v for k, v in t.items()}
        t["vision_tower.vision_model.embeddings.patch_embedding.weight"] = mat(8, 12)
        t["multi_modal_projector.mm_input_projection_weight"] = mat(8, dim)
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


def gelu_tanh(x):
    """transformers' gelu_pytorch_tanh"""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def mlp(h, w1, w3, w2, act=silu):
    return (act(h @ w1.T) * (h @ w3.T)) @ w2.T


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


def gpt_oss_mlp(h, w, p, c):
    """GptOssMLP: the router's logits (with its bias), their top k, a
    softmax over those k; each expert's gate_up (input-major, with its
    bias) split into gate (even columns) and up (odd), gate clamped above
    at swiglu_limit, up to [-limit, limit], (up + 1) * gate *
    sigmoid(gate * alpha), then down with its bias, weighted."""
    limit, alpha = c.get("swiglu_limit", 7.0), c.get("swiglu_alpha", 1.702)
    z = h @ w[p + "router.weight"].T + w[p + "router.bias"]  # (T, experts)
    top = np.argsort(-z, axis=-1, kind="stable")[:, :c["num_experts_per_tok"]]
    val = np.take_along_axis(z, top, axis=-1)
    val = np.exp(val - val.max(axis=-1, keepdims=True))
    val /= val.sum(axis=-1, keepdims=True)
    x = p + "experts."
    out = np.zeros_like(h)
    for e in range(n_experts(c)):
        for t, j in zip(*np.nonzero(top == e)):
            gate_up = h[t] @ w[x + "gate_up_proj"][e] + w[x + "gate_up_proj_bias"][e]
            gate, up = gate_up[::2], gate_up[1::2]
            gate = np.minimum(gate, limit)
            up = np.clip(up, -limit, limit)
            glu = gate * sigmoid(gate * alpha)
            y = ((up + 1) * glu) @ w[x + "down_proj"][e] + w[x + "down_proj_bias"][e]
            out[t] += val[t, j] * y
    return out


def yarn(c, hd):
    """_compute_yarn_parameters: the inverse frequencies and the attention
    factor that scales cos and sin."""
    r, base = c["rope_scaling"], c["rope_theta"]
    factor = r["factor"]
    orig = r.get("original_max_position_embeddings") or c["max_position_embeddings"]
    att = r.get("attention_factor")
    if att is None:
        att = 0.1 * np.log(factor) + 1.0 if factor > 1 else 1.0
    beta_fast, beta_slow = r.get("beta_fast") or 32, r.get("beta_slow") or 1

    def correction_dim(rot):
        return hd * np.log(orig / (rot * 2 * np.pi)) / (2 * np.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if r.get("truncate", True):
        low, high = np.floor(low), np.ceil(high)
    low, high = max(low, 0), min(high, hd - 1)
    if low == high:
        high += 0.001
    pos_freqs = base ** (np.arange(0, hd, 2) / hd)
    ramp = np.clip((np.arange(hd // 2) - low) / (high - low), 0, 1)
    extrap = 1 - ramp
    inv = 1.0 / (factor * pos_freqs) * (1 - extrap) + 1.0 / pos_freqs * extrap
    return inv, att


def longrope(c, hd, T):
    """_compute_longrope_parameters for a text of T tokens: the inverse
    frequencies of the turned dimensions and the attention factor."""
    r, base = c["rope_scaling"], c["rope_theta"]
    dim = int(hd * c.get("partial_rotary_factor", 1.0))
    orig = c.get("original_max_position_embeddings")
    factor = r.get("factor")
    if orig:
        factor = c["max_position_embeddings"] / orig
    else:
        orig = c["max_position_embeddings"]
    att = r.get("attention_factor")
    if att is None:
        att = 1.0 if factor <= 1.0 else np.sqrt(1 + np.log(factor) / np.log(orig))
    ext = np.array(r["long_factor"] if T > orig else r["short_factor"])
    return 1.0 / (ext * base ** (np.arange(0, dim, 2) / dim)), att


def unfuse(w, c):
    """Phi-3's fused qkv_proj and gate_up_proj as the separate projections
    they hold: q's rows, k's, v's; gate's, up's (Phi3MLP's chunk)."""
    q, kv = c["num_attention_heads"] * head_dim(c), c["num_key_value_heads"] * head_dim(c)
    for k in [k for k in w if k.endswith("qkv_proj.weight")]:
        f, p = w.pop(k), k[:-len("qkv_proj.weight")]
        w[p + "q_proj.weight"], w[p + "k_proj.weight"], w[p + "v_proj.weight"] = \
            f[:q], f[q:q + kv], f[q + kv:]
    for k in [k for k in w if k.endswith("gate_up_proj.weight")]:
        f, p = w.pop(k), k[:-len("gate_up_proj.weight")]
        w[p + "gate_proj.weight"], w[p + "up_proj.weight"] = np.split(f, 2)
    return w


def dequantize(w):
    """The MXFP4 _blocks and _scales of gpt-oss's experts as the fused
    float tensors they stand for (transposed to input-major)."""
    for k in [k for k in w if k.endswith("_blocks")]:
        base = k[:-len("_blocks")]
        w[base] = mxfp4_decode(w.pop(k), w.pop(base + "_scales")).transpose(0, 2, 1)
    return w


def logits(d, ids):
    """Every position's logits (T, vocab) for the tokens ids."""
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    w = {k: v.astype(np.float64) for k, v in dequantize(read_checkpoint(d)).items()}
    if "text_config" in c:  # Gemma3ForConditionalGeneration: its text model alone
        c = c["text_config"]
        w = {("model." + k[len(WRAP[0]):] if k.startswith(WRAP[0]) else k[len(WRAP[1]):]): v
             for k, v in w.items() if k.startswith(WRAP[1])}
    w = unfuse(w, c)
    eps, hd = c.get("rms_norm_eps", EPS.get(c["model_type"], 1e-6)), head_dim(c)
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    T = len(ids)
    gpt_oss, gemma3 = c["model_type"] == "gpt_oss", c["model_type"] == "gemma3_text"
    gemma = gemma3 or c["model_type"] == "gemma2"

    def norm(x, name):  # Gemma's RMSNorm's gain is 1 + the stored one
        return rmsnorm(x, w[name] + (1.0 if gemma else 0.0), eps)

    def cos_sin(inv_freq, att):
        freqs = np.outer(np.arange(T), inv_freq)
        emb = np.concatenate((freqs, freqs), axis=-1)  # (T, rd)
        return att * np.cos(emb)[None], att * np.sin(emb)[None]

    rd = int(hd * c.get("partial_rotary_factor", 1.0))  # the dimensions turned
    inv_freq, att = 1.0 / c["rope_theta"] ** (np.arange(0, rd, 2) / rd), 1.0
    local = 1.0 / c.get("rope_local_base_freq", 1.0) ** (np.arange(0, rd, 2) / rd)
    rope = c.get("rope_scaling") or {}
    if rope.get("rope_type") == "yarn":
        inv_freq, att = yarn(c, hd)
    if rope.get("rope_type", rope.get("type")) in ("longrope", "su"):
        inv_freq, att = longrope(c, hd, T)
    if rope.get("rope_type", rope.get("type")) == "linear":
        inv_freq = inv_freq / rope["factor"]
    rotations = {"full": cos_sin(inv_freq, att), "sliding": cos_sin(local, 1.0)}
    causal = np.triu(np.full((T, T), -np.inf), 1)
    # a sliding layer's token at i sees j when j > i - sliding_window
    window = c.get("sliding_window") or T
    sliding = causal + np.tril(np.full((T, T), -np.inf), -window)
    types = c.get("layer_types")
    if gemma and not types:  # Gemma3TextConfig's from its pattern, Gemma2Config's 2
        n = c.get("sliding_window_pattern", GEMMA3_PATTERN) if gemma3 else 2
        types = ["sliding_attention" if (i + 1) % n else "full_attention"
                 for i in range(c["num_hidden_layers"])]

    x = w["model.embed_tokens.weight"][ids]  # (T, dim)
    if gemma:  # the embeddings times sqrt(hidden), in the checkpoint's dtype
        x = x * np.float32(c["hidden_size"] ** 0.5)
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        slides = (types is not None and types[l] == "sliding_attention") or \
            (c["model_type"] == "phi3" and c.get("sliding_window"))
        # Gemma 3's sliding layers turn on their own base
        cos, sin = rotations["sliding" if gemma3 and slides else "full"]
        h = norm(x, p + "input_layernorm.weight")
        q = h @ w[p + "self_attn.q_proj.weight"].T
        k = h @ w[p + "self_attn.k_proj.weight"].T
        v = h @ w[p + "self_attn.v_proj.weight"].T
        if p + "self_attn.q_proj.bias" in w:  # Qwen2, Qwen2-MoE, gpt-oss
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
        if c["model_type"] in ("qwen3", "qwen3_moe", "gemma3_text"):  # per head, before RoPE
            q = norm(q, p + "self_attn.q_norm.weight")
            k = norm(k, p + "self_attn.k_norm.weight")
        q = np.concatenate((q[..., :rd] * cos + rotate_half(q[..., :rd]) * sin, q[..., rd:]), -1)
        k = np.concatenate((k[..., :rd] * cos + rotate_half(k[..., :rd]) * sin, k[..., rd:]), -1)
        k = np.repeat(k, nh // nkv, axis=0)  # repeat_kv
        v = np.repeat(v, nh // nkv, axis=0)
        s = q @ k.transpose(0, 2, 1) * c.get("query_pre_attn_scalar", hd) ** -0.5
        if c.get("attn_logit_softcapping"):  # Gemma 2's, before the mask
            s = np.tanh(s / c["attn_logit_softcapping"]) * c["attn_logit_softcapping"]
        # Phi-3 (Mistral's masks): every layer slides when it has a window
        s = s + (sliding if slides else causal)
        if gpt_oss:  # each head's sink joins the softmax, then is dropped
            s = np.concatenate((s, np.broadcast_to(w[p + "self_attn.sinks"][:, None, None],
                                                   (nh, T, 1))), axis=-1)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s = s / s.sum(axis=-1, keepdims=True)
        z = s[..., :T] @ v  # (nh, T, hd)
        a = z.transpose(1, 0, 2).reshape(T, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
        if p + "self_attn.o_proj.bias" in w:
            a = a + w[p + "self_attn.o_proj.bias"]
        if gemma:  # Gemma2DecoderLayer's and Gemma3DecoderLayer's sandwich
            x = x + norm(a, p + "post_attention_layernorm.weight")
            h = norm(x, p + "pre_feedforward_layernorm.weight")
            f = mlp(h, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"],
                    w[p + "mlp.down_proj.weight"], gelu_tanh)
            x = x + norm(f, p + "post_feedforward_layernorm.weight")
            continue
        x = x + a
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
        if gpt_oss:
            x = x + gpt_oss_mlp(h, w, p + "mlp.", c)
        elif n_experts(c):
            x = x + moe(h, w, p + moe_names(c)[0], c)
        else:
            x = x + mlp(h, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"],
                        w[p + "mlp.down_proj.weight"])
    x = norm(x, "model.norm.weight")
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    z = x @ head.T
    if c.get("final_logit_softcapping"):  # Gemma 2's
        z = np.tanh(z / c["final_logit_softcapping"]) * c["final_logit_softcapping"]
    return z


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
