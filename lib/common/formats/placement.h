/* placement.json: per layer and group the permutation flash positions hold
 * (perm[p] = entry at position p), how it was found and its predicted cost.
 * One reader, one writer (jansson). Format: man/sf-formats.5 (PLACEMENT). */
#ifndef SF_PLACEMENT_H
#define SF_PLACEMENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/vocab.h"
#include "formats/model.h"

#define SF_PLACEMENT_FORMAT "sparseflash-placement"
#define SF_PLACEMENT_VERSION 2	/* 2: fingerprint of the weights, shape_fingerprint */
#define SF_PLACEMENT_MAX_ENTRIES (1u << 24)
#define SF_PLACEMENT_MAX_LAYERS 4096
#define SF_PLACEMENT_MAX_FILE ((uint64_t)256 << 20)	/* bytes of placement.json */

/* How a group's permutation was found (offline/place.h computes them). */
enum sf_place_method { SF_PLACE_IDENTITY, SF_PLACE_FREQUENCY, SF_PLACE_COACT };

const char *sf_place_method_name(enum sf_place_method m);
int sf_place_method_parse(const char *name, enum sf_place_method *m);	/* 0, or -1 */

struct sf_placement_group {
	int layer;
	enum sf_group group;
	uint32_t n;			/* entries */
	enum sf_place_method method;
	json_t *options;		/* the method's options: an object */
	uint64_t tokens;		/* tokens of the statistics it was found on */
	double predicted_runs;		/* runs per token on those statistics */
	double path_cost;		/* sum of 1 - P(ij) along the path */
	uint32_t *perm;			/* (n) */
};

struct sf_placement {
	struct sf_fingerprint fingerprint;
	int ngroups;
	struct sf_placement_group *groups;	/* (ngroups) in file order */
	json_t *meta;			/* the rest of the top level (producer, source) */
};

/* Room for ngroups groups of a model; each group's perm is allocated by
 * the caller's sf_placement_set. */
int sf_placement_init(struct sf_placement *pl, const struct sf_fingerprint *fingerprint, int ngroups,
		      struct sf_err *e);
/* Group i: copies perm (n), takes a reference to options. */
int sf_placement_set(struct sf_placement *pl, int i, int layer, enum sf_group g, uint32_t n,
		     enum sf_place_method method, json_t *options, uint64_t tokens,
		     double predicted_runs, double path_cost, const uint32_t *perm,
		     struct sf_err *e);
void sf_placement_free(struct sf_placement *pl);	/* accepts a zeroed pl */

/* Writes pl to path ("-": standard output) with base/outfile.h: a
 * temporary file renamed when complete; inputs (NULL-terminated, or NULL)
 * are refused as the output. meta (may be NULL) is merged into the top
 * level. */
int sf_placement_write(const struct sf_placement *pl, const char *path, json_t *meta,
		       const char *const *inputs, struct sf_err *e);
/* Reads and validates path (at most SF_PLACEMENT_MAX_FILE bytes, refused
 * with SF_ELIMIT past it): format, version, fingerprint, every group's
 * layer, group name, entries, method, and perm a true permutation of
 * 0..n-1 (a duplicated or missing index refused by name, with the
 * positions), no (layer, group) twice. On failure *pl is zeroed. */
int sf_placement_read(struct sf_placement *pl, const char *path, struct sf_err *e);

/* 0 when perm[0..len) is a permutation of 0..n-1, else SF_EFORMAT with
 * "<where>: perm[p] = v is out of range: expected 0..n-1", or the first
 * index given twice "<where>: index v at positions p and q" and/or the
 * first missing "index m missing", plus "(len indices for n entries)"
 * when the length is wrong. */
int sf_placement_check_perm(const uint32_t *perm, size_t len, uint32_t n, const char *where,
			    struct sf_err *e);

/* The group for (layer, g) of a stream other (its name for messages)
 * with n entries: NULL with SF_EMISMATCH in e when absent or of another
 * size. path: pl's file, for messages. */
const struct sf_placement_group *sf_placement_lookup(const struct sf_placement *pl,
						     const char *path, int layer, enum sf_group g,
						     uint32_t n, const char *other, struct sf_err *e);

#endif
