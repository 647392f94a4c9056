/* calib.json, SpAx's tier sizes: for each budget, per layer and group, how
 * many entries go to the top tier (full weights) and the middle tier
 * (2-bit codes), with the TEAL setting (top tier only, one density)
 * beside it for comparison; the group sizes and budget accounting, one
 * reader and one writer. The calibration that chooses them is
 * offline/calib.h. Documented in man/sf-encode.1 and man/sf-formats.5
 * (calib.json). */
#ifndef SF_CALIB_H
#define SF_CALIB_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "formats/codes.h"
#include "base/err.h"
#include "base/vocab.h"
#include "formats/model.h"

#define SF_CALIB_STEP 0.05		/* SpAx step 1: a group's budget moves by this */
#define SF_CALIB_GRID 11		/* SpAx step 2: top-tier shares 0, 0.1, ..., 1 tried */
#define SF_CALIB_MAX_BUDGETS 64
#define SF_CALIB_MAX_LAYERS 4096
#define SF_CALIB_SAME_BUDGET 1e-9	/* budgets closer than this are one budget */
#define SF_CALIB_MAX_FILE ((uint64_t)64 << 20)	/* bytes of calib.json */

/* Bytes per entry of a group in each tier. A group's budget is SpAx's
 * Equation 5, (k_top * top + k_mid * mid) / (entries * top); a layer's
 * budget is the same ratio over the layer's groups together (bytes a
 * token reads for the layer over the layer's dense bytes), so groups
 * weigh by their size; the model budget adds every layer the same way. */
struct sf_calib_sizes {
	uint64_t entries;
	uint64_t top_bytes;	/* the bundle in the top tier's dtype (the model's, or
				 * sf-encode --dtype's: a q4 image's budgets count q4) */
	uint64_t mid_bytes;	/* codes and scales of the bundle */
};

struct sf_calib_group {
	uint64_t k_top, k_mid;
	double budget;		/* Equation 5 of these k_top, k_mid */
	double error;		/* layer error with every group as chosen */
};

struct sf_calib_layer {
	int dense;			/* listed dense: every entry top tier */
	double budget;			/* realised layer budget */
	double error;			/* relative l2 error of the layer output */
	double step1_error;		/* after step 1 (top tier only) */
	double teal_error;		/* TEAL: uniform density, top tier only */
	uint64_t teal_k_top[SF_NGROUPS];
	struct sf_calib_group g[SF_NGROUPS];
};

#define SF_CALIB_VERSION 2	/* 2: fingerprint of the weights, shape_fingerprint */

struct sf_calib {
	struct sf_fingerprint fingerprint;
	enum sf_code_method method;
	int n_layers;
	struct sf_calib_sizes sizes[SF_NGROUPS];	/* the same in every layer */
	size_t nbudgets;
	double budgets[SF_CALIB_MAX_BUDGETS];	/* targets, as given */
	double realised[SF_CALIB_MAX_BUDGETS];	/* model budget the k's give */
	struct sf_calib_layer *layers;	/* (nbudgets, n_layers) */
	uint64_t tokens;		/* calibration tokens */
	int window;
	json_t *producer;		/* owned */
	/* (n_layers) a part (sf-encode --calibrate --layers): 1 for the layers
	 * it holds, the others left zero and realised unset; NULL: whole */
	uint8_t *part;
};

/* Group sizes of a model for codes of the given method, the top tier in
 * top_dtype (an enum sf_dtype, or SF_CALIB_DTYPE_MODEL: each matrix's). */
#define SF_CALIB_DTYPE_MODEL (-1)
void sf_calib_sizes_of(struct sf_calib_sizes s[SF_NGROUPS], const struct sf_model *m,
		       enum sf_code_method method, int top_dtype);
/* Equation 5 for one group. */
double sf_calib_group_budget(const struct sf_calib_sizes *s, uint64_t k_top, uint64_t k_mid);

void sf_calib_free(struct sf_calib *c);	/* accepts a zeroed c */

/* The layer entry of budget b, layer l. */
static inline struct sf_calib_layer *sf_calib_at(const struct sf_calib *c, size_t b, int l)
{
	return &c->layers[b * (size_t)c->n_layers + (size_t)l];
}

/* realised[b]: the model budget of budget b's k's, every layer. */
void sf_calib_realise(struct sf_calib *c);

/* calib.json: PATH ("-": stdout) written with base/outfile.h (a temporary
 * renamed when complete); inputs (NULL-terminated, or NULL) are refused
 * as the output. */
int sf_calib_write(const struct sf_calib *c, const char *path, const char *const *inputs,
		   struct sf_err *e);
/* Reads and validates calib.json: at most SF_CALIB_MAX_FILE bytes (else
 * SF_ELIMIT) and SF_CALIB_MAX_LAYERS layers, counts whole numbers, k_top +
 * k_mid <= entries, budgets in (0, 1], every layer present in every budget
 * (checked before memory for them is taken). On failure *c is zeroed. */
int sf_calib_load(struct sf_calib *c, const char *path, struct sf_err *e);
/* The same, a part accepted too (c->part set); sf_calib_load refuses one. */
int sf_calib_load_part(struct sf_calib *c, const char *path, struct sf_err *e);

/* One whole calibration from parts[0..n) (names[i] for messages): the same
 * model, method, sizes, tokens, window and budgets in the same order, and
 * producers equal but for options.layers, each layer in exactly one part.
 * The merged producer is the first part's with options.layers "all", so
 * the result equals one run over every layer byte for byte. */
int sf_calib_merge(struct sf_calib *out, const struct sf_calib *parts, size_t n,
		   const char *const *names, struct sf_err *e);

#endif
