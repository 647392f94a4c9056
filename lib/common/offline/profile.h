/* The recorder behind sf-profile(1): an observer of the forward pass that
 * copies each recorded group's input, and at the token's end selects its
 * active set (top-k or threshold, engine/select.h) and adds its |value|
 * sums on the pool, then hands the token to the trace writer
 * (formats/trace.h). The trace does not depend on the pool's size. */
#ifndef SF_PROFILE_H
#define SF_PROFILE_H

#include <stddef.h>

#include "base/err.h"
#include "base/pool.h"
#include "base/vocab.h"
#include "engine/forward.h"
#include "formats/trace.h"

struct sf_profile;

/* A recorder feeding w (not owned) with the selection its info states.
 * pool (not owned; NULL: the caller alone) runs the selections inside
 * sf_profile_token, so it must not be running then. */
int sf_profile_open(struct sf_profile **p, struct sf_trace_writer *w, struct sf_pool *pool,
		    struct sf_err *e);
void sf_profile_free(struct sf_profile *p);	/* accepts NULL */
/* The observer to hand to the forward pass: sf_profile_record for every
 * group it computes. */
const struct sf_observer *sf_profile_observer(struct sf_profile *p);
/* Records one group's input: copied (the forward pass reuses its buffers
 * within a token), its selection and sums computed at sf_profile_token.
 * Groups the trace does not record are ignored. */
void sf_profile_record(struct sf_profile *p, int layer, enum sf_group g, const float *in,
		       size_t n);
/* Ends the current token: selects the recorded inputs over the pool,
 * reports the first input of the wrong length or with a non-finite value
 * (in slot order, as the forward pass met them), then
 * sf_trace_writer_token. */
int sf_profile_token(struct sf_profile *p, struct sf_err *e);

#endif
