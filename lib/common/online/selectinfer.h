/* SelectInfer: which entries to hold in RAM (selective loading) and which
 * FFN neurons to compute (selective computation), from the profile scores
 * sf-coact --scores writes (read by formats/scores.h). Commands:
 * man/sf-coact.1 (--select-neurons), man/sf-run.1 (--pin, --compute-ratio);
 * score format: man/sf-formats.5 (SCORES). Everything here is
 * deterministic: ties go to the lower entry index. */
#ifndef SF_SELECTINFER_H
#define SF_SELECTINFER_H

#include <stdint.h>

#include <jansson.h>

#include "base/err.h"
#include "engine/forward.h"
#include "formats/config.h"
#include "formats/model.h"
#include "formats/scores.h"

// ----------------------------------------------------------------------------
// defaults (one source for code and help text)

/* Selective loading: the share of a group's entries held in RAM. The
 * paper's headline setting (Llama-3.2-3B on a Jetson Orin Nano). */
#define SF_SELECT_DEFAULT_GAMMA 0.7
/* Selective loading: the share taken from the task-specific scores before
 * the model-specific ones fill up to gamma. 0.4 is the top 40% whose
 * overlap across tasks SelectInfer measures (study 5): the task's core,
 * with the rest of gamma from the cross-task mix so that other inputs are
 * covered too. */
#define SF_SELECT_DEFAULT_LOAD_DELTA 0.4
/* Selective computation: the share of ffn_out neurons computed, the
 * paper's headline rho. */
#define SF_SELECT_DEFAULT_RHO 0.4
/* Selective computation: static (base) neurons, top delta by the static
 * score file: half of the default rho, so that the prompt's own dynamic
 * neurons get the other half. */
#define SF_SELECT_DEFAULT_COMPUTE_DELTA 0.2
/* Selective computation: per prefill token the top alpha neurons by
 * |activation| are counted. 0.4 matches rho: a token's top 40% carry most
 * of its |a| mass (the share study 5 compares), wide enough that the
 * counts separate the prompt's recurring neurons from one-off ones. */
#define SF_SELECT_DEFAULT_ALPHA 0.4
/* Selective computation: at most beta * n dynamic neurons, the most
 * frequent in the prefill counts: with delta, it fills the default rho. */
#define SF_SELECT_DEFAULT_BETA 0.2
/* Layers left dense: the paper skips the first 5 and the last 2 of
 * Llama-3.2-3B's 28. Other depths keep the same shares, rounded, at least
 * one layer at each end (sf_select_dense_default). */
#define SF_SELECT_DENSE_FIRST_NUM 5
#define SF_SELECT_DENSE_LAST_NUM 2
#define SF_SELECT_DENSE_DEN 28

// ----------------------------------------------------------------------------
// selective loading: what to pin in RAM

/* round(x * n) for a share x in [0, 1]: the count every ratio here means. */
uint32_t sf_select_count(double x, uint32_t n);

/* The pinning order of one group of n entries: first the top
 * min(round(delta n), round(gamma n)) entries by task score, then the best
 * model scores not yet chosen until round(gamma n). Either array may be
 * NULL (an absent file): the other alone fills up to gamma; both NULL
 * gives none. Scores descending, ties to the lower index. order: n slots;
 * returns how many were written. scratch: 2 * n uint32_t. */
uint32_t sf_select_load_order(const double *task, const double *model, uint32_t n,
			      double gamma, double delta, uint32_t *order, uint32_t *scratch);

/* The pinning order of every layer and group of a model. */
struct sf_select_load {
	int n_layers;
	uint32_t *count;	/* (n_layers, SF_NGROUPS) entries pinned */
	uint32_t **order;	/* (n_layers, SF_NGROUPS) -> (count) entry ids in
				 * pinning order (best first); NULL when count 0 */
};

/* Fills l for the model of cfg from task and/or model scores (either may
 * be NULL, not both; both already read against the model's fingerprint
 * and cfg, see sf_scores_read). task must be a "task" file and model a
 * "model" file, else SF_EMISMATCH ("NAME: kind is ..."; names are for
 * messages, may be NULL). A (layer, group) absent from both files pins
 * nothing. gamma, delta in [0, 1]. */
int sf_select_load_plan(struct sf_select_load *l, const struct sf_config *cfg,
			const struct sf_scores *task, const char *task_name,
			const struct sf_scores *model, const char *model_name,
			double gamma, double delta, struct sf_err *e);
/* Entries pinned for (layer, g), best first; *count set (0: NULL). */
const uint32_t *sf_select_load_get(const struct sf_select_load *l, int layer, enum sf_group g,
				   uint32_t *count);
void sf_select_load_free(struct sf_select_load *l);	/* accepts a zeroed l */

// ----------------------------------------------------------------------------
// selective computation: the ffn_out neurons computed for a generation

struct sf_select_compute_opts {
	double rho;		/* share of neurons computed: the cap */
	double delta;		/* static neurons: top delta by static score */
	double alpha;		/* per prefill token, top alpha by |a| counted */
	double beta;		/* dynamic neurons: at most beta, most frequent */
	const uint8_t *dense;	/* (n_layers) 1: layer left dense; NULL: none */
};

/* Options at the SF_SELECT_DEFAULT_* values, rho given, dense NULL. */
void sf_select_compute_defaults(struct sf_select_compute_opts *o, double rho);

/* dense[n_layers] for the default: the first round(5/28 L) and the last
 * round(2/28 L) layers, at least one at each end (every layer when
 * L <= 2). */
void sf_select_dense_default(int n_layers, uint8_t *dense);
/* Parses a --dense-layers value into dense[n_layers] with the one layers
 * grammar (sf_parse_layers: "none", "all", "F:L", or N and N-M items,
 * e.g. "0-4,26-27"). 0, or SF_EFORMAT / SF_ELIMIT with the message
 * "--dense-layers: ..." (a layer beyond n_layers - 1 is refused). */
int sf_select_dense_parse(const char *spec, int n_layers, uint8_t *dense, struct sf_err *e);

struct sf_select_compute;

/* For a model of n_layers layers with n ffn_out neurons each. stat: the
 * static scores (NULL: no static neurons; delta then contributes nothing);
 * its ffn_out slot must exist, of n entries, for every non-dense layer
 * (SF_EMISMATCH naming stat_name). Ratios in [0, 1] (else -EINVAL with a
 * message). Allocates everything observe and finish need. */
int sf_select_compute_open(struct sf_select_compute **c, int n_layers, uint32_t n,
			   const struct sf_select_compute_opts *o, const struct sf_scores *stat,
			   const char *stat_name, struct sf_err *e);
void sf_select_compute_close(struct sf_select_compute *c);	/* accepts NULL */
/* One prefill token's ffn_out input a[0..n) of layer (what an sf_observer
 * sees for SF_GROUP_FFN_OUT): the top round(alpha n) neurons by |a| (ties
 * to the lower index, as sf_select_topk) each count one, and every
 * neuron's |a| is summed. Dense layers, and calls after finish, are
 * ignored. No allocation, no failure. */
void sf_select_compute_observe(struct sf_select_compute *c, int layer, const float *a);
/* Ends the prefill and fixes, per non-dense layer, the neurons computed
 * for the whole generation, the first round(rho n) of: the static neurons
 * (static score order), up to round(beta n) dynamic ones not static
 * (count descending, then summed |a| descending, then lower index), the
 * rest of the counted neurons (count > 0) in that order, then the rest by
 * static score, then the rest in that count order (summed |a|, index).
 * With no token observed the set is the static order filled as above. */
void sf_select_compute_finish(struct sf_select_compute *c);
/* Forgets the observed tokens (a new prompt): observe again, then finish. */
void sf_select_compute_reset(struct sf_select_compute *c);
/* 1 when layer is computed dense (every neuron). */
int sf_select_compute_is_dense(const struct sf_select_compute *c, int layer);
/* After finish, for a non-dense layer: the neurons computed, ascending;
 * *count = round(rho n). NULL (and *count = n) for a dense layer or before
 * finish. */
const uint32_t *sf_select_compute_entries(const struct sf_select_compute *c, int layer,
					  uint32_t *count);
/* The same as a mask: (n) bytes, 1 when computed. NULL for a dense layer
 * or before finish. */
const uint8_t *sf_select_compute_mask(const struct sf_select_compute *c, int layer);
/* How many of layer's computed neurons are static and dynamic (the top
 * beta part), for --stats. */
void sf_select_compute_split(const struct sf_select_compute *c, int layer, uint32_t *nstatic,
			     uint32_t *ndynamic);

// ----------------------------------------------------------------------------
// neurons.json for sf-pack --keep (read by sf_image_keep_read)

/* The neurons file of selective loading: per layer in the scores (the
 * ffn_out slots of task and/or model, as sf_select_load_plan), the first
 * round(gamma n) of sf_select_load_order (at least one: sf-pack refuses
 * an empty layer), listed ascending. Kinds, fingerprints and entries of
 * the two files must agree (SF_EMISMATCH). meta (producer, options; may
 * be NULL) is copied in as "source". */
int sf_select_neurons_json(json_t **out, const struct sf_scores *task, const char *task_name,
			   const struct sf_scores *model, const char *model_name, double gamma,
			   double delta, json_t *meta, struct sf_err *e);

#endif
