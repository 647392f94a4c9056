/* qblock MODEL_DIR: what sf-pack --dtype q8|q4's block of 32 rows was
 * chosen on. A model's flash matrices (q, k, v, o, gate, up, down of every
 * layer) quantized by columns in blocks of 16, 32, 64 and 128 consecutive
 * rows, 8 and 4 bits, symmetric round to nearest as base/quant.c's rtn
 * (scale max |w| / 127 or / 7 rounded up to an f16): one JSON line per
 * (bits, block) with the squared error over the squared weights and the
 * bytes a weight costs with its share of the f16 scale. Deterministic. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "formats/model.h"

static double block_sse(const float *w, size_t n, int qmax)
{
	float amax = 0.0f;
	for (size_t i = 0; i < n; i++)
		amax = fabsf(w[i]) > amax ? fabsf(w[i]) : amax;
	uint16_t h = sf_f32_to_f16(amax / (float)qmax);
	while (h < 0x7c00 && sf_f16_to_f32(h) < amax / (float)qmax)
		h++;
	float s = sf_f16_to_f32(h);
	double e = 0.0;
	for (size_t i = 0; i < n; i++) {
		float q = s > 0.0f ? fminf(fmaxf(nearbyintf(w[i] / s), (float)(-qmax - 1)), (float)qmax)
				   : 0.0f;
		double d = (double)w[i] - (double)(q * s);
		e += d * d;
	}
	return e;
}

int main(int argc, char **argv)
{
	static const size_t blocks[] = { 16, 32, 64, 128 };
	struct sf_model m;
	struct sf_err e;

	if (argc != 2) {
		fprintf(stderr, "usage: qblock MODEL_DIR\n");
		return 2;
	}
	if (sf_model_open(&m, argv[1], &e)) {
		fprintf(stderr, "qblock: %s\n", e.msg);
		return 1;
	}
	for (int bits = 8; bits >= 4; bits -= 4)
		for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
			double sse = 0.0, ss = 0.0;
			for (int l = 0; l < m.cfg.n_layers; l++) {
				const struct sf_layer_weights *L = &m.layers[l];
				const struct sf_weight *ws[] = { &L->wq, &L->wk, &L->wv, &L->wo,
								 &L->w_gate, &L->w_up, &L->w_down };
				for (size_t i = 0; i < 7; i++) {
					size_t R = (size_t)ws[i]->rows, C = (size_t)ws[i]->cols;
					float *col = malloc(R * sizeof(float));
					for (size_t c = 0; c < C; c++) {
						for (size_t r = 0; r < R; r++) {
							col[r] = sf_weight_at(ws[i], (uint64_t)r * C + c);
							ss += (double)col[r] * col[r];
						}
						for (size_t r = 0; r < R; r += blocks[b])
							sse += block_sse(col + r, R - r < blocks[b] ? R - r :
									 blocks[b], bits == 8 ? 127 : 7);
					}
					free(col);
				}
			}
			printf("{\"bits\":%d,\"block\":%zu,\"relative_sse\":%.4e,\"bytes_per_weight\":%.4f}\n",
			       bits, blocks[b], sse / ss, (2.0 + (double)blocks[b] * bits / 8.0) /
			       (double)blocks[b]);
		}
	sf_model_close(&m);
	return 0;
}
