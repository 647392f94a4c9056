/* SpAx tier calibration: for each budget, per layer and group, how many
 * entries go to the top tier (full weights) and the middle tier (2-bit
 * codes), chosen on real activations by the least l2 error of the layer's
 * output, and the TEAL setting beside it; the result is a struct
 * sf_calib (formats/calib.h). Documented in man/sf-encode.1. */
#ifndef SF_OFFLINE_CALIB_H
#define SF_OFFLINE_CALIB_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/pool.h"
#include "formats/calib.h"
#include "formats/codes.h"
#include "formats/model.h"
#include "offline/encode.h"

/* How far a calibration is: configurations scored (each one pass of the
 * calibration tokens through one layer), the estimated share of the whole
 * done (a layer's count of configurations is estimated from the layer
 * before, the first from the step sizes), and the layers. */
struct sf_calib_progress {
	uint64_t configs;
	double fraction;	/* 0..1 */
	int layers_done, layers;	/* of those calibrated (not dense, in the part) */
};

struct sf_calib_opts {
	const double *budgets;		/* each in (0, 1] */
	size_t nbudgets;
	const uint8_t *dense_layers;	/* (n_layers) 1: stays dense; NULL: none */
	/* (n_layers) 1: calibrate this layer, the result a part holding only
	 * these (sf_calib.part, merged by sf_calib_merge); NULL: every layer */
	const uint8_t *layers;
	int window;			/* tokens per window scored from an empty context */
	/* SF_DTYPE_Q8 or SF_DTYPE_Q4: the top tier of the image to be, its
	 * columns quantized with quant (sf_top_model): the top tier computes
	 * with them, the dense outputs measured against are theirs, and
	 * budgets count their bytes (SpAx on Q4_K_M); any other value: the
	 * model's own weights and dtype */
	enum sf_dtype top_dtype;
	enum sf_quant_method quant;
	int release_weights;		/* the dense pass releases each layer after
					 * it (sf_runstate.release_weights) */
	/* called after every step (a batch of configurations scored) and
	 * every layer calibrated (NULL: none), from the caller's thread */
	void (*progress)(void *arg, const struct sf_calib_progress *p);
	void *progress_arg;
};

/* Runs the calibration on tokens[0..n) (documents with BOS, concatenated)
 * cut into windows, codes q holding every layer to calibrate that is not
 * dense. A layer's result depends on the dense layers before it only, so
 * parts calibrated apart and merged equal one run. The
 * pool (NULL: the caller) evaluates candidate configurations in parallel.
 * Memory: per thread a run state of one window, plus n * n_layers * dim
 * floats of dense layer outputs, and with a quantized top_dtype the flash
 * matrices in f32 (sf_top_model). */
int sf_calib_run(struct sf_calib *c, const struct sf_model *m, const struct sf_sfq *q,
		 const int32_t *tokens, size_t n, const struct sf_calib_opts *o,
		 struct sf_pool *pool, struct sf_err *e);
/* What sf_calib_run takes with threads workers, the codes' own memory
 * (q's mapping) and the weights the pass keeps resident aside. */
uint64_t sf_calib_bytes(const struct sf_model *m, size_t n, const struct sf_calib_opts *o,
			int threads);

#endif
