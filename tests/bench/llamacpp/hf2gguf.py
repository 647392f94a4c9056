#!/usr/bin/env python3
"""hf2gguf: a Hugging Face Llama, Qwen2, Qwen3, Phi-3, Gemma 3 or mixture-of-experts
(Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, gpt-oss) checkpoint (config.json,
model.safetensors or shards with model.safetensors.index.json,
tokenizer.json when there is one) to a GGUF that llama.cpp loads, through
gguf-py's GGUFWriter; numpy only. Used by tests/bench/llamacpp.bash
(llamacpp_gguf); the tensors are streamed, so memory stays near one
tensor. A Llama's Q and K rows are permuted as llama.cpp's
convert_hf_to_gguf.py (LlamaModel.permute) does: rotate-half RoPE to the
interleaved pairs llama.cpp's LLAMA graph uses (Qwen's graphs keep
rotate-half). A mixture's experts are stacked into one tensor a matrix
and layer ([experts, rows, cols], as convert_hf_to_gguf.py writes them);
what llama.cpp's graphs of the mixtures cannot compute (OLMoE's clip_qkv,
a router renormalised otherwise than they do) is refused. gpt-oss's
fused experts are split into gate, up and down as llama.cpp's
conversion/gpt_oss.py does; its MXFP4 blocks and scales become GGUF's
MXFP4 blocks, the same codes and scales. Phi-3's fused qkv_proj and
gate_up_proj stay fused (attn_qkv, ffn_up), and its LongRoPE becomes the
two factor tensors and the attention factor conversion/phi.py writes.
Gemma 2's and 3's norm gains get the one their RMSNorm adds, as
conversion/gemma.py does.

Usage: hf2gguf.py MODEL_DIR OUT.gguf [--outtype auto|f32|f16|bf16]"""
import argparse
import json
import math
import re
import struct
import sys
from pathlib import Path

import numpy as np
import gguf

ST_DTYPES = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "U8": np.uint8}
# GGUF tensor types: numpy's dtype, and the GGML type when numpy has none
OUT_TYPES = {"f32": (np.float32, None), "f16": (np.float16, None),
             "bf16": (np.uint16, gguf.GGMLQuantizationType.BF16)}
FILE_TYPES = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
              "bf16": gguf.LlamaFileType.MOSTLY_BF16}


def fail(msg):
    sys.exit(f"hf2gguf: {msg}")


# --- safetensors: 8-byte little-endian header length, JSON header, data

def safetensors_index(model_dir):
    """{tensor name: (path, dtype, shape, data offset)} over every shard."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for name in files:
        path = model_dir / name
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        size = path.stat().st_size
        for key, t in header.items():
            if key == "__metadata__":
                continue
            if t["dtype"] not in ST_DTYPES:
                fail(f"{path}: {key}: dtype {t['dtype']}: only BF16, F16, F32 and U8 are read")
            begin, end = t["data_offsets"]
            count = int(np.prod(t["shape"], dtype=np.int64))
            if end - begin != count * np.dtype(ST_DTYPES[t["dtype"]]).itemsize or \
               8 + n + end > size:
                fail(f"{path}: {key}: data offsets {begin}..{end} do not fit its shape or the file")
            out[key] = (path, t["dtype"], tuple(t["shape"]), 8 + n + begin)
    return out


def load(entry):
    path, dtype, shape, offset = entry
    return np.memmap(path, dtype=ST_DTYPES[dtype], mode="r", offset=offset, shape=shape)


# --- dtype conversions (BF16 kept as its uint16 bit patterns)

def to_f32(a, dtype):
    if dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def to_bf16(x):
    """Round to nearest even, as torch does."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def convert(a, dtype, outtype):
    if outtype == dtype.lower():
        return a
    x = to_f32(a, dtype)
    return to_bf16(x) if outtype == "bf16" else x.astype(OUT_TYPES[outtype][0])


def permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute (n_head: the heads of w)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


# --- tokenizer

# The split regexes of the pre-tokenizers llama.cpp names (Llama 3's with
# ignore_merges, Qwen2's with single digits, GPT-2's, o200k's of gpt-oss)
BPE_PRES = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "llama-bpe",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "qwen2",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)": "gpt-2",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+": "gpt-4o",
}


def bpe_pre(path, pre):
    """tokenizer.ggml.pre for a byte-level pre-tokenizer: its Split regex."""
    steps = pre.get("pretokenizers", []) if pre and pre.get("type") == "Sequence" else [pre]
    for step in steps:
        if step and step.get("type") == "Split":
            regex = step.get("pattern", {}).get("Regex")
            if regex in BPE_PRES:
                return BPE_PRES[regex]
            fail(f"{path}: pre-tokenizer regex {regex!r}: not one llama.cpp names")
    if any(step and step.get("type") == "ByteLevel" and step.get("use_regex", True) for step in steps):
        return "gpt-2"
    fail(f"{path}: pre-tokenizer {json.dumps(pre)[:80]}: not one llama.cpp names")


def vocab_from_tokenizer(model_dir, n_vocab, writer, cfg):
    """Writes tokenizer.ggml.*: "llama" (SentencePiece-style BPE with byte
    fallback, merge ranks as scores), "gpt2" (byte-level BPE), or, with no
    tokenizer.json, "no_vocab": n_vocab dummy tokens, ids only."""
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        writer.add_tokenizer_model("no_vocab")
        return "no_vocab"
    tj = json.loads(path.read_text(encoding="utf-8"))
    model = tj["model"]
    if model.get("type") != "BPE":
        fail(f"{path}: model type {model.get('type')}: only BPE is converted")
    tokens = [f"[PAD{i}]" for i in range(n_vocab)]
    types = [gguf.TokenType.UNUSED] * n_vocab
    for piece, i in model["vocab"].items():
        if i >= n_vocab:
            fail(f"{path}: token {i} {piece!r} beyond vocab_size {n_vocab}")
        tokens[i], types[i] = piece, gguf.TokenType.NORMAL
    specials = {}
    for t in tj.get("added_tokens", []):
        if t["id"] >= n_vocab:
            fail(f"{path}: added token {t['id']} beyond vocab_size {n_vocab}")
        tokens[t["id"]] = t["content"]
        types[t["id"]] = gguf.TokenType.CONTROL if t.get("special") else gguf.TokenType.USER_DEFINED
        specials[t["content"]] = t["id"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]

    if model.get("byte_fallback"):
        # llama.cpp's SPM tokenizer merges the adjacent pair whose joined
        # piece scores highest: a piece's score is minus its merge's rank
        scores = [0.0] * n_vocab
        for i in range(n_vocab):
            if re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", tokens[i]):
                types[i] = gguf.TokenType.BYTE
        unk = model.get("unk_token")
        if unk in model["vocab"]:
            types[model["vocab"][unk]] = gguf.TokenType.UNKNOWN
        for rank, m in enumerate(merges):
            joined = m.replace(" ", "", 1)
            if joined in model["vocab"]:
                scores[model["vocab"][joined]] = -float(rank + 1)
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_scores(scores)
        kind = "llama"
    else:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(bpe_pre(path, tj.get("pre_tokenizer")))
        writer.add_token_merges(merges)
        kind = "gpt2"
    writer.add_token_list(tokens)
    writer.add_token_types(types)

    tc_path = model_dir / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text(encoding="utf-8")) if tc_path.is_file() else {}
    ids = {}
    for what, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                      ("unk", writer.add_unk_token_id)):
        t = tc.get(f"{what}_token")
        t = t.get("content") if isinstance(t, dict) else t
        tid = specials.get(t, model["vocab"].get(t)) if t else cfg.get(f"{what}_token_id")
        if isinstance(tid, int):
            add(tid)
            ids[what] = tid
    # BOS: tokenizer_config.json's add_bos_token, else whether the
    # post-processor's template names the BOS token
    bos = tokens[ids["bos"]] if "bos" in ids else None
    add_bos = tc.get("add_bos_token", bos is not None and
                     json.dumps(bos) in json.dumps(tj.get("post_processor")))
    writer.add_add_bos_token(bool(add_bos))
    writer.add_add_eos_token(bool(tc.get("add_eos_token", False)))
    return kind


def rope_factors(scaling, base, dim):
    """Llama 3's rope_scaling as per-frequency divisors, as llama.cpp's
    converter (conversion/llama.py, generate_extra_tensors) stores them."""
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    factor = scaling.get("factor", 8.0)
    low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    old = scaling.get("original_max_position_embeddings", 8192)
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / float(f)
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


# --- gpt-oss

def mxfp4_blocks(blocks, scales):
    """The released checkpoints' MXFP4 (byte j of a block: values 2j and
    2j + 1) as GGUF's blocks: the e8m0 byte, then byte j holding values j
    and j + 16, [..., rows, blocks * 17] bytes."""
    codes = np.stack((blocks & 15, blocks >> 4), axis=-1).reshape(*blocks.shape[:-1], 32)
    qs = (codes[..., :16] | (codes[..., 16:] << 4)).astype(np.uint8)
    out = np.concatenate((scales[..., None], qs), axis=-1)
    return np.ascontiguousarray(out.reshape(*out.shape[:-2], -1))


def gpt_oss_tensors(st, cfg, outtype):
    """(gguf name, shape, numpy dtype, GGML type or None, producer) of
    every tensor: gate_up split into gate (even columns) and up (odd), the
    matrices as [experts, out, in], their biases [experts, out]."""
    out = []

    def plain(name, hf):
        path, dtype, shape, _ = st[hf]
        typ = "f32" if len(shape) == 1 else outtype
        np_type, raw = OUT_TYPES[typ]
        out.append((name, shape, np_type, raw,
                    lambda: convert(np.asarray(load(st[hf])), dtype, typ)))

    fused = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)(_bias|_blocks)?$")
    for hf in st:
        m = re.match(r"model\.layers\.(\d+)\.(.*)$", hf)
        if hf in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
            plain({"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
                   "output_norm.weight", "lm_head.weight": "output.weight"}[hf], hf)
            continue
        if not m:
            fail(f"tensor {hf}: no llama.cpp name")
        blk, rest = f"blk.{m[1]}.", m[2]
        simple = {"input_layernorm.weight": "attn_norm.weight",
                  "post_attention_layernorm.weight": "post_attention_norm.weight",
                  "self_attn.sinks": "attn_sinks.weight",
                  "mlp.router.weight": "ffn_gate_inp.weight", "mlp.router.bias": "ffn_gate_inp.bias"}
        for p, g in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                     ("o_proj", "attn_output")):
            for kind in ("weight", "bias"):
                simple[f"self_attn.{p}.{kind}"] = f"{g}.{kind}"
        if rest in simple:
            plain(blk + simple[rest], hf)
            continue
        if rest.endswith("_scales"):
            continue
        f = fused.match(hf)
        if not f:
            fail(f"tensor {hf}: no llama.cpp name")
        e, src_dtype = st[hf][2][0], st[hf][1]
        parts = [("gate", 0), ("up", 1)] if f[2] == "gate_up_proj" else [("down", None)]

        def pick(a, col, axis):
            """gate_up's gate (col 0) or up (col 1) along axis; down whole."""
            return a if col is None else np.take(a, np.arange(col, a.shape[axis], 2), axis=axis)

        for part, col in parts:
            name = f"{blk}ffn_{part}_exps.{'bias' if f[3] == '_bias' else 'weight'}"
            if f[3] == "_bias":
                shape = (e, st[hf][2][1] // (2 if col is not None else 1))
                out.append((name, shape, np.float32, None,
                            lambda hf=hf, col=col: pick(to_f32(np.asarray(load(st[hf])), st[hf][1]),
                                                        col, 1)))
            elif f[3] == "_blocks":
                sc = hf.replace("_blocks", "_scales")
                rows, nb = st[hf][2][1] // (2 if col is not None else 1), st[hf][2][2]
                shape = (e, rows, nb * 17)
                out.append((name, shape, np.uint8, gguf.GGMLQuantizationType.MXFP4,
                            lambda hf=hf, sc=sc, col=col: mxfp4_blocks(
                                pick(np.asarray(load(st[hf])), col, 1),
                                pick(np.asarray(load(st[sc])), col, 1))))
            else:   # input-major [experts, in, out]: Linear's [experts, out, in]
                x_shape = st[hf][2]
                shape = (e, x_shape[2] // (2 if col is not None else 1), x_shape[1])
                np_type, raw = OUT_TYPES[outtype]
                out.append((name, shape, np_type, raw,
                            lambda hf=hf, col=col, d=src_dtype: convert(np.ascontiguousarray(
                                pick(np.asarray(load(st[hf])), col, 2).transpose(0, 2, 1)), d,
                                outtype)))
    return out


def gpt_oss_keys(w, cfg, model_dir):
    """What llama.cpp's gpt-oss reads beyond the common keys; what its
    graph fixes (SwiGLU's limit 7 and alpha 1.702, sliding layers every
    other from layer 0) checked against the config."""
    if cfg.get("swiglu_limit", 7.0) != 7.0 or cfg.get("swiglu_alpha", 1.702) != 1.702:
        fail(f"{model_dir}: swiglu_limit/alpha: llama.cpp's gpt-oss graph takes 7.0 and 1.702")
    n = cfg["num_hidden_layers"]
    types = cfg.get("layer_types") or ["sliding_attention" if l % 2 == 0 else "full_attention"
                                       for l in range(n)]
    if any((t == "sliding_attention") != (l % 2 == 0) for l, t in enumerate(types)):
        fail(f"{model_dir}: layer_types: llama.cpp's gpt-oss slides every other layer from 0")
    w.add_expert_count(cfg["num_local_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_feed_forward_length(cfg["intermediate_size"])
    w.add_sliding_window(cfg.get("sliding_window", 128))


def phi3_keys(w, cfg):
    """What llama.cpp's phi3 reads beyond the common keys (conversion/phi.py):
    the pretrained context, the sliding window (0: none), and with LongRoPE
    the attention factor from max over original positions; returns the
    long and short factors to write as tensors, or None."""
    max_pos = cfg.get("max_position_embeddings", 2048)
    orig = cfg.get("original_max_position_embeddings", max_pos)
    w.add_rope_scaling_orig_ctx_len(orig)
    w.add_sliding_window(cfg.get("sliding_window") or 0)
    scaling = cfg.get("rope_scaling") or {}
    if not scaling.get("long_factor"):
        return None
    scale = max_pos / orig
    w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig))
                                    if scale > 1.0 else 1.0)
    return {f: np.array(scaling[f + "_factor"], dtype=np.float32) for f in ("long", "short")}


def gemma3_keys(w, cfg, scaling, model_dir):
    """What llama.cpp's gemma3 reads beyond the common keys: the window and
    (which conversion/gemma.py leaves to the loader's 6) the pattern of
    sliding layers, their RoPE base, the global layers' linear scaling."""
    if cfg.get("final_logit_softcapping") is not None:
        fail(f"{model_dir}: final_logit_softcapping: not converted")
    # llama.cpp's graph scales the scores by head_dim's root, the 27B's
    # (62 layers) by hidden / heads': query_pre_attn_scalar must agree
    n_layer, head_dim = cfg["num_hidden_layers"], cfg.get("head_dim", 256)
    want = cfg["hidden_size"] // cfg["num_attention_heads"] if n_layer == 62 else head_dim
    if cfg.get("query_pre_attn_scalar", 256) != want:
        fail(f"{model_dir}: query_pre_attn_scalar {cfg.get('query_pre_attn_scalar', 256)}: "
             f"llama.cpp's gemma3 takes {want}")
    n = cfg.get("sliding_window_pattern", 6)
    types = cfg.get("layer_types")
    if types and types != ["sliding_attention" if (l + 1) % n else "full_attention"
                           for l in range(cfg["num_hidden_layers"])]:
        fail(f"{model_dir}: layer_types: llama.cpp's gemma3 slides by a pattern")
    w.add_sliding_window(cfg.get("sliding_window", 4096))
    w.add_uint32(f"{w.arch}.attention.sliding_window_pattern", n)
    w.add_float32(f"{w.arch}.rope.freq_base_swa", float(cfg.get("rope_local_base_freq", 10000.0)))
    if scaling.get("rope_type", scaling.get("type")) == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(scaling["factor"]))


def gemma2_keys(w, cfg, model_dir):
    """What llama.cpp's gemma2 reads beyond the common keys: the window and
    the two soft-capping bounds (its graph slides every other layer from the
    first, and scales the scores by head_dim's root, the 27B's (46 layers)
    by hidden / heads')."""
    n_layer, head_dim = cfg["num_hidden_layers"], cfg.get("head_dim", 256)
    want = cfg["hidden_size"] // cfg["num_attention_heads"] if n_layer == 46 else head_dim
    if cfg.get("query_pre_attn_scalar", 256) != want:
        fail(f"{model_dir}: query_pre_attn_scalar {cfg.get('query_pre_attn_scalar', 256)}: "
             f"llama.cpp's gemma2 takes {want}")
    types = cfg.get("layer_types")
    if types and types != ["sliding_attention" if (l + 1) % 2 else "full_attention"
                           for l in range(n_layer)]:
        fail(f"{model_dir}: layer_types: llama.cpp's gemma2 slides every other layer")
    for key, default in (("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0)):
        if key in cfg and cfg[key] is None:
            fail(f"{model_dir}: {key} null: llama.cpp's gemma2 always soft-caps")
        getattr(w, "add_" + key)(float(cfg.get(key, default)))
    w.add_sliding_window(cfg.get("sliding_window", 4096))


def yarn_keys(w, scaling, model_dir):
    """YaRN as llama.cpp computes it: its correction range rounded
    outwards, as transformers' truncate; the attention factor its
    default's multiple."""
    if not scaling.get("truncate", True):
        fail(f"{model_dir}: rope_scaling truncate false: llama.cpp rounds YaRN's correction range")
    factor = float(scaling["factor"])
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(factor)
    if "original_max_position_embeddings" in scaling:
        w.add_rope_scaling_orig_ctx_len(int(scaling["original_max_position_embeddings"]))
    arch = w.arch
    w.add_float32(f"{arch}.rope.scaling.yarn_beta_fast", float(scaling.get("beta_fast", 32.0)))
    w.add_float32(f"{arch}.rope.scaling.yarn_beta_slow", float(scaling.get("beta_slow", 1.0)))
    if scaling.get("attention_factor") is not None:
        w.add_float32(f"{arch}.rope.scaling.attn_factor", float(scaling["attention_factor"]) /
                      (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0))


# --- main

def main():
    ap = argparse.ArgumentParser(description="Hugging Face safetensors to GGUF")
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--outtype", choices=["auto", "f32", "f16", "bf16"], default="auto",
                    help="2-D tensors' type (auto: the checkpoint's); 1-D ones are F32")
    a = ap.parse_args()

    cfg = json.loads((a.model_dir / "config.json").read_text())
    # model_type: llama.cpp's architecture, and for a mixture whether its
    # graph renormalises the top k (a checkpoint saying otherwise is refused)
    archs = {"llama": (gguf.MODEL_ARCH.LLAMA, None), "qwen2": (gguf.MODEL_ARCH.QWEN2, None),
             "qwen3": (gguf.MODEL_ARCH.QWEN3, None), "mixtral": (gguf.MODEL_ARCH.LLAMA, True),
             "qwen2_moe": (gguf.MODEL_ARCH.QWEN2MOE, False),
             "qwen3_moe": (gguf.MODEL_ARCH.QWEN3MOE, True), "olmoe": (gguf.MODEL_ARCH.OLMOE, False),
             "gpt_oss": (gguf.MODEL_ARCH.GPT_OSS, True), "phi3": (gguf.MODEL_ARCH.PHI3, None),
             "gemma2": (gguf.MODEL_ARCH.GEMMA2, None),
             "gemma3_text": (gguf.MODEL_ARCH.GEMMA3, None)}
    model_type = cfg.get("model_type")
    if model_type not in archs:
        fail(f"{a.model_dir}: model_type {model_type!r}: only {', '.join(archs)} are converted")
    arch, renorm = archs[model_type]
    if renorm is not None and model_type not in ("mixtral", "gpt_oss") and \
       bool(cfg.get("norm_topk_prob", False)) != renorm:
        fail(f"{a.model_dir}: norm_topk_prob {cfg.get('norm_topk_prob')}: llama.cpp's "
             f"{model_type} {'always' if renorm else 'never'} renormalises the top k")
    if cfg.get("clip_qkv") is not None:
        fail(f"{a.model_dir}: clip_qkv {cfg['clip_qkv']}: llama.cpp computes no clip_qkv")
    if cfg.get("decoder_sparse_step", 1) != 1 or cfg.get("mlp_only_layers"):
        fail(f"{a.model_dir}: dense layers among the experts are not converted")
    scaling = cfg.get("rope_scaling") or {}
    rope_type = scaling.get("rope_type", scaling.get("type")) if scaling else None
    if rope_type not in (None, "llama3", "yarn") and \
            not (model_type == "phi3" and rope_type in ("longrope", "su")) and \
            not (model_type == "gemma3_text" and rope_type == "linear"):
        fail(f"{a.model_dir}: rope_scaling {scaling}: only llama3, yarn and Phi-3's longrope "
             f"are converted")
    st = safetensors_index(a.model_dir)
    n_layer, n_head = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_head)
    n_embd = cfg["hidden_size"]
    gemma = model_type in ("gemma2", "gemma3_text")
    head_dim = cfg.get("head_dim") or (256 if gemma else n_embd // n_head)
    n_vocab = cfg["vocab_size"]
    tied = "lm_head.weight" not in st
    if gemma and cfg.get("tie_word_embeddings", True) is False:
        fail(f"{a.model_dir}: an untied Gemma: llama.cpp's {model_type} ties its head")
    src_dtype = st["model.embed_tokens.weight"][1].lower()
    outtype = src_dtype if a.outtype == "auto" else a.outtype

    w = gguf.GGUFWriter(a.out, gguf.MODEL_ARCH_NAMES[arch])
    w.add_name(a.model_dir.resolve().name)
    w.add_file_type(FILE_TYPES[outtype])
    w.add_vocab_size(n_vocab)
    w.add_context_length(cfg.get("max_position_embeddings", 2048))
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    # Phi-3's partial_rotary_factor, as conversion/phi.py counts it
    w.add_rope_dimension_count(int(cfg.get("partial_rotary_factor", 1.0) * n_embd) // n_head
                               if model_type == "phi3" else head_dim)
    if head_dim != n_embd // n_head:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 150000.0 if model_type == "gpt_oss" else
                                       1e6 if model_type == "gemma3_text" else 10000.0)))
    eps = cfg.get("rms_norm_eps")
    w.add_layer_norm_rms_eps(float(eps if eps is not None else
                                   1e-5 if model_type in ("mixtral", "olmoe", "gpt_oss", "phi3") else 1e-6))
    if rope_type == "yarn":
        yarn_keys(w, scaling, a.model_dir)
    if model_type == "gpt_oss":
        gpt_oss_keys(w, cfg, a.model_dir)
    elif model_type == "phi3":
        longrope = phi3_keys(w, cfg)
    elif model_type == "gemma2":
        gemma2_keys(w, cfg, a.model_dir)
    elif model_type == "gemma3_text":
        gemma3_keys(w, cfg, scaling, a.model_dir)
    elif renorm is not None:
        w.add_expert_count(cfg["num_local_experts" if model_type == "mixtral" else "num_experts"])
        w.add_expert_used_count(cfg["num_experts_per_tok"])
        if "moe_intermediate_size" in cfg:
            w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        if "shared_expert_intermediate_size" in cfg:
            w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    kind = vocab_from_tokenizer(a.model_dir, n_vocab, w, cfg)

    if model_type == "gpt_oss":
        plan = gpt_oss_tensors(st, cfg, outtype)
        for name, shape, np_type, raw, _ in plan:
            nbytes = int(np.prod(shape)) * np.dtype(np_type).itemsize
            w.add_tensor_info(name, shape, np.dtype(np_type), nbytes, raw_dtype=raw)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for name, shape, np_type, raw, produce in plan:
            w.write_tensor_data(np.ascontiguousarray(produce()))
        w.close()
        print(f"hf2gguf: {a.model_dir}: {len(plan)} tensors, {outtype}, vocab {kind} ({n_vocab}), "
              f"{'tied' if tied else 'untied'} embeddings", file=sys.stderr)
        return

    names = gguf.get_tensor_name_map(arch, n_layer)
    expert = re.compile(r"model\.layers\.(\d+)\.(?:block_sparse_moe|mlp)\.experts\.(\d+)\."
                        r"(w1|w3|w2|gate_proj|up_proj|down_proj)\.weight$")
    mats = {"w1": "gate", "gate_proj": "gate", "w3": "up", "up_proj": "up",
            "w2": "down", "down_proj": "down"}
    plan = []    # (gguf name, hf names (a mixture's experts in order), heads to permute by or 0)
    stacks = {}  # a stacked tensor's gguf name: {expert: hf name}
    for hf in st:
        if re.search(r"rotary_emb\.inv_freq$", hf):
            continue
        m = expert.match(hf)
        if m:
            name = f"blk.{m[1]}.ffn_{mats[m[3]]}_exps.weight"
            if name not in stacks:
                stacks[name] = {}
                plan.append((name, None, 0))
            stacks[name][int(m[2])] = hf
            continue
        name = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if name is None:
            fail(f"{a.model_dir}: tensor {hf}: no llama.cpp name")
        heads = 0 if model_type not in ("llama", "mixtral") else \
            n_head if re.search(r"q_proj\.(weight|bias)$", hf) else \
            n_kv if re.search(r"k_proj\.(weight|bias)$", hf) else 0
        plan.append((name, [hf], heads))
    plan = [(name, hfs or [stacks[name][x] for x in sorted(stacks[name])], heads)
            for name, hfs, heads in plan]
    for name, hfs, heads in plan:
        shape = st[hfs[0]][2]
        if name.endswith("ffn_gate_inp_shexp.weight"):
            shape = (shape[-1],)     # [1, hidden] in Hugging Face, a vector in llama.cpp
        if len(hfs) > 1 or name.endswith("_exps.weight"):
            shape = (len(hfs),) + shape
        np_type, raw = OUT_TYPES["f32" if len(shape) == 1 else outtype]
        w.add_tensor_info(name, shape, np.dtype(np_type),
                          int(np.prod(shape)) * np.dtype(np_type).itemsize, raw_dtype=raw)

    if rope_type == "llama3":
        w.add_tensor_info("rope_freqs.weight", (head_dim // 2,), np.dtype(np.float32), head_dim * 2)
    if model_type == "phi3" and longrope:
        for f in longrope:
            w.add_tensor_info(f"rope_factors_{f}.weight", (len(longrope[f]),),
                              np.dtype(np.float32), 4 * len(longrope[f]))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, hfs, heads in plan:
        ts = []
        for hf in hfs:
            entry = st[hf]
            t = load(entry)
            if heads:
                t = permute(t, heads)
            if name.endswith("ffn_gate_inp_shexp.weight"):
                t = np.asarray(t).reshape(-1)
            if gemma and hf.endswith("norm.weight"):
                t = to_f32(np.asarray(t), entry[1]) + np.float32(1.0)  # Gemma's RMSNorm's one
                entry = entry[:1] + ("F32",) + entry[2:]
            ts.append(convert(np.asarray(t), entry[1], "f32" if t.ndim == 1 else outtype))
        w.write_tensor_data(np.ascontiguousarray(np.stack(ts) if len(ts) > 1 or
                                                 name.endswith("_exps.weight") else ts[0]))
    if rope_type == "llama3":
        w.write_tensor_data(rope_factors(scaling, float(cfg.get("rope_theta", 10000.0)), head_dim))
    if model_type == "phi3" and longrope:
        for f in longrope:
            w.write_tensor_data(longrope[f])
    w.close()
    print(f"hf2gguf: {a.model_dir}: {len(plan)} tensors, {outtype}, vocab {kind} ({n_vocab}), "
          f"{'tied' if tied else 'untied'} embeddings", file=sys.stderr)


if __name__ == "__main__":
    main()
