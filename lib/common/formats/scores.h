/* SelectInfer score files (man/sf-formats.5, SCORES): per layer and group
 * the mean |value| and the activation frequency of every entry over the
 * profiled tokens, of one task or of a model. One reader, and the writers
 * sf-coact uses: from co-activation statistics (--scores) and the
 * token-weighted merge (--merge-scores). */
#ifndef SF_SCORES_H
#define SF_SCORES_H

#include <stdint.h>

#include <jansson.h>

#include "base/err.h"
#include "base/vocab.h"
#include "formats/coact.h"
#include "formats/config.h"
#include "formats/model.h"

/* Score files are read whole: a 70B model's is about 200 MB. */
#define SF_SCORES_MAX_BYTES ((uint64_t)1 << 30)
#define SF_SCORES_FORMAT "sparseflash-scores"
#define SF_SCORES_VERSION 2	/* 2: fingerprint of the weights, shape_fingerprint */

/* One layer and group of a score file. */
struct sf_scores_slot {
	int layer;
	enum sf_group group;
	uint32_t entries;	/* n */
	uint64_t tokens;	/* tokens profiled */
	double *score;		/* (n) sum|value| / tokens, finite and >= 0 */
	double *freq;		/* (n) active tokens / tokens, in [0, 1] */
	json_t *tasks;		/* {task: tokens}, a reference the slot holds */
};

struct sf_scores {
	struct sf_fingerprint fingerprint;
	int is_task;		/* "kind": "task" (1) or "model" (0) */
	char *task;		/* the task of a "task" file, else NULL */
	json_t *selection;	/* the profile's selection (a reference), or NULL */
	int nslots;
	struct sf_scores_slot *slots;	/* (nslots) by layer, then group; no repeats */
};

/* Reads PATH ("-": standard input; at most SF_SCORES_MAX_BYTES) into *s.
 * Validated: format, version, kind, every slot's layer, group, entries,
 * tokens, tasks, scores and frequency (arrays of n finite non-negative
 * numbers, frequency at most 1), no (layer, group) twice. fingerprint
 * (NULL: any) must equal the file's (SF_EMISMATCH naming model, the file
 * it comes from: sf_fingerprint_check); cfg (NULL: any) bounds
 * the layers and fixes each group's entries (SF_EMISMATCH). Errors are one
 * line "PATH: what: why". On failure *s is zeroed. */
int sf_scores_read(struct sf_scores *s, const char *path, const struct sf_fingerprint *fingerprint,
		   const char *model, const struct sf_config *cfg, struct sf_err *e);
/* The same on a parsed document; name is for messages. */
int sf_scores_parse(struct sf_scores *s, json_t *doc, const char *name,
		    const struct sf_fingerprint *fingerprint, const char *model,
		    const struct sf_config *cfg, struct sf_err *e);
void sf_scores_free(struct sf_scores *s);	/* accepts a zeroed s */
/* The slot of (layer, g), or NULL when the file has none. */
const struct sf_scores_slot *sf_scores_find(const struct sf_scores *s, int layer, enum sf_group g);

/* Per slot and entry sum|value| / tokens (and the activation frequency
 * count / tokens), with the task: "kind" is "task" when every token is of
 * one task, else "model". NULL with e set when out of memory. */
json_t *sf_scores_from_coact(const struct sf_coact *c, struct sf_err *e);
/* Merges score files into model-specific scores: per layer and group the
 * token-weighted mean. Each input is checked as sf_scores_parse checks a
 * file; all of one fingerprint and selection (else SF_EMISMATCH naming
 * both files). names: the files, in messages. */
int sf_scores_merge(json_t *const *in, const char *const *names, int n, json_t **out,
		    struct sf_err *e);

#endif
