#!/usr/bin/env python3
"""ggml_ref: a GGUF written by llama.cpp's own gguf-py (GGUFWriter) with
metadata of every value type and, for every tensor type sparseflash
dequantizes, random rows and gguf-py's dequantization of them (its quants
module), for tests/unit/test_ggml.c to read with formats/gguf.c and compare
with base/ggml.c bit for bit.

Each row is random bytes with every f16 scale (d, dmin, m) replaced by a
random finite f16, so no NaN or infinity hides a difference; F32, F16 and
BF16 rows are random finite values. An odd number of rows, several blocks
each. Tensors: "q.TYPE" the rows as stored, "want.TYPE" their F32 values.

Usage: PYTHONPATH=llama.cpp/gguf-py ggml_ref.py OUT.gguf [SEED]"""
import sys

import numpy as np
from gguf import GGMLQuantizationType as T, GGML_QUANT_SIZES, GGUFValueType as V, GGUFWriter
from gguf.quants import dequantize

# the byte offsets of each block's f16 scales (ggml-common.h)
F16_AT = {T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
          T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}
ROWS = 7


def finite_f16(rng, n):
    """n random f16 bit patterns, NaN and infinity excluded."""
    h = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    return np.where((h & 0x7c00) == 0x7c00, h & 0x83ff, h)


def rows_of(rng, qtype):
    block, size = GGML_QUANT_SIZES[qtype]
    nblocks = 3 if block == 1 else 2 if block == 256 else 5
    n = block * (nblocks if block > 1 else 37)
    if qtype == T.F32:
        data = (rng.standard_normal(ROWS * n) * 10).astype(np.float32).view(np.uint8)
    elif qtype in (T.F16, T.BF16):
        data = finite_f16(rng, ROWS * n).view(np.uint8)
        if qtype == T.BF16:	# exponent 0xff is NaN/inf for bf16 too
            h = data.view(np.uint16)
            data = np.where((h & 0x7f80) == 0x7f80, h & 0x807f, h).astype(np.uint16).view(np.uint8)
    else:
        blocks = rng.integers(0, 256, size=(ROWS * n // block, size), dtype=np.uint8)
        for off in F16_AT.get(qtype, []):   # MXFP4's e8m0 scale: any byte
            blocks[:, off:off + 2] = finite_f16(rng, blocks.shape[0]).view(np.uint8).reshape(-1, 2)
        data = blocks.reshape(-1)
    data = np.ascontiguousarray(data).reshape(ROWS, -1)
    out = np.asarray(dequantize(data, qtype), dtype=np.float32).reshape(ROWS, n)
    return data, out


def main():
    rng = np.random.default_rng(int(sys.argv[2]) if len(sys.argv) > 2 else 34)
    w = GGUFWriter(sys.argv[1], "llama")
    w.add_custom_alignment(64)
    for key, val, vtype in (("u8", 200, V.UINT8), ("i8", -100, V.INT8), ("u16", 60000, V.UINT16),
                            ("i16", -30000, V.INT16), ("u32", 4000000000, V.UINT32),
                            ("i32", -2000000000, V.INT32), ("f32", 0.25, V.FLOAT32),
                            ("bool", True, V.BOOL), ("string", "h\u00e9llo", V.STRING),
                            ("u64", 1 << 40, V.UINT64), ("i64", -(1 << 40), V.INT64),
                            ("f64", 0.5, V.FLOAT64)):
        w.add_key_value("test." + key, val, vtype)
    w.add_key_value("test.arr_str", ["a", "", "ccc"], V.ARRAY, V.STRING)
    w.add_key_value("test.arr_i32", [1, -2, 3], V.ARRAY, V.INT32)
    w.add_key_value("test.arr_f32", [0.5, -1.5], V.ARRAY, V.FLOAT32)
    for qtype in (T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1,
                  T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.MXFP4):
        data, out = rows_of(rng, qtype)
        w.add_tensor("q." + qtype.name, data, raw_shape=data.shape, raw_dtype=qtype)
        w.add_tensor("want." + qtype.name, out)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


main()
