/* The recorder behind sf-profile(1): an observer of the forward pass that
 * copies each recorded group's inputs, and at the pass's end selects each
 * token's active set (top-k or threshold, engine/select.h) and adds its
 * |value| sums on the pool, then hands the tokens to the trace writer
 * (formats/trace.h). The trace depends neither on the pool's size nor on
 * the tokens a pass takes. */
#ifndef SF_PROFILE_H
#define SF_PROFILE_H

#include <stddef.h>

#include "base/err.h"
#include "base/pool.h"
#include "base/vocab.h"
#include "engine/forward.h"
#include "formats/trace.h"

struct sf_profile;

/* A recorder feeding w (not owned) with the selection its info states,
 * for forward passes of up to tokens tokens (0 counts as 1; its input
 * copies take tokens times the recorded entries' floats). pool (not
 * owned; NULL: the caller alone) runs the selections inside
 * sf_profile_tokens, so it must not be running then. */
int sf_profile_open(struct sf_profile **p, struct sf_trace_writer *w, struct sf_pool *pool,
		    int tokens, struct sf_err *e);
void sf_profile_free(struct sf_profile *p);	/* accepts NULL */
/* The bytes sf_profile_open takes for info's slots, tokens a pass and
 * threads workers, so that a command can state them first. */
uint64_t sf_profile_bytes(const struct sf_trace_info *info, int tokens, int threads);
/* The observer to hand to the forward pass (its tokens field is the
 * recorder's): sf_profile_record for every group it computes. */
const struct sf_observer *sf_profile_observer(struct sf_profile *p);
/* Records one group's inputs in (T, n), T tokens of a pass (0 counts as
 * 1): copied (the forward pass reuses its buffers within a pass), their
 * selections and sums computed at sf_profile_tokens. Groups the trace
 * does not record are ignored. A mixture's routes come as the inputs of
 * SF_GROUP_EXPERTS: active the experts of nonzero weight, the weights
 * summed. */
void sf_profile_record(struct sf_profile *p, int layer, enum sf_group g, const float *in,
		       int T, size_t n);
/* Ends the current pass of T tokens: for each token in order, selects its
 * recorded inputs over the pool, reports the first input of the wrong
 * length or with a non-finite value (in slot order, as the forward pass
 * met them), then sf_trace_writer_token. */
int sf_profile_tokens(struct sf_profile *p, int T, struct sf_err *e);

#endif
