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

struct sf_calib_opts {
	const double *budgets;		/* each in (0, 1] */
	size_t nbudgets;
	const uint8_t *dense_layers;	/* (n_layers) 1: stays dense; NULL: none */
	/* (n_layers) 1: calibrate this layer, the result a part holding only
	 * these (sf_calib.part, merged by sf_calib_merge); NULL: every layer */
	const uint8_t *layers;
	int window;			/* tokens per window scored from an empty context */
	/* called after each layer calibrated (NULL: none), from the caller's
	 * thread: done of total layers */
	void (*progress)(void *arg, int done, int total);
	void *progress_arg;
};

/* Runs the calibration on tokens[0..n) (documents with BOS, concatenated)
 * cut into windows, codes q holding every layer to calibrate that is not
 * dense. A layer's result depends on the dense layers before it only, so
 * parts calibrated apart and merged equal one run. The
 * pool (NULL: the caller) evaluates candidate configurations in parallel.
 * Memory: per thread a run state of one window, plus n * n_layers * dim
 * floats of dense layer outputs. */
int sf_calib_run(struct sf_calib *c, const struct sf_model *m, const struct sf_sfq *q,
		 const int32_t *tokens, size_t n, const struct sf_calib_opts *o,
		 struct sf_pool *pool, struct sf_err *e);

#endif
