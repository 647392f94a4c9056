/* calib.json, the SpAx tier sizes per budget: group sizes and budget
 * accounting, one writer and one reader (the calibration that finds them
 * is offline/calib.c). See calib.h, man/sf-encode.1 and man/sf-formats.5
 * (calib.json). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/calib.h"
#include "base/jsonfile.h"
#include "base/outfile.h"

// ----------------------------------------------------------------------------
// group sizes and budgets

void sf_calib_sizes_of(struct sf_calib_sizes s[SF_NGROUPS], const struct sf_model *m,
		       enum sf_code_method method, int top_dtype)
{
	for (int g = 0; g < SF_NGROUPS; g++) {
		const struct sf_weight *w[SF_GROUP_MAX_MATRICES];
		const char *names[SF_GROUP_MAX_MATRICES];
		int n = sf_codes_group_matrices(m, 0, (enum sf_group)g, w, names);
		s[g] = (struct sf_calib_sizes){ .entries = w[0]->cols };
		for (int i = 0; i < n; i++) {
			enum sf_dtype dt = top_dtype == SF_CALIB_DTYPE_MODEL ? w[i]->dtype :
					   (enum sf_dtype)top_dtype;
			s[g].top_bytes += sf_dtype_col_bytes(dt, w[i]->rows);
			s[g].mid_bytes += sf_codes_col_bytes(method, (size_t)w[i]->rows);
		}
	}
}

double sf_calib_group_budget(const struct sf_calib_sizes *s, uint64_t k_top, uint64_t k_mid)
{
	return ((double)k_top * (double)s->top_bytes + (double)k_mid * (double)s->mid_bytes) /
	       ((double)s->entries * (double)s->top_bytes);
}

void sf_calib_free(struct sf_calib *c)
{
	if (!c)
		return;
	free(c->layers);
	free(c->part);
	json_decref(c->producer);
	memset(c, 0, sizeof(*c));
}

void sf_calib_realise(struct sf_calib *C)
{
	for (size_t b = 0; b < C->nbudgets; b++) {
		double num = 0.0, den = 0.0;
		for (int l = 0; l < C->n_layers; l++)
			for (int g = 0; g < SF_NGROUPS; g++) {
				const struct sf_calib_group *G = &sf_calib_at(C, b, l)->g[g];
				num += (double)G->k_top * (double)C->sizes[g].top_bytes +
				       (double)G->k_mid * (double)C->sizes[g].mid_bytes;
				den += (double)C->sizes[g].entries * (double)C->sizes[g].top_bytes;
			}
		C->realised[b] = num / den;
	}
}

// ----------------------------------------------------------------------------
// calib.json

int sf_calib_write(const struct sf_calib *C, const char *path, const char *const *inputs,
		   struct sf_err *e)
{
	json_t *root = json_object(), *groups = json_object(), *budgets = json_array();
	int ret = 0;

	json_object_set_new(root, "format", json_string("sparseflash calib"));
	json_object_set_new(root, "version", json_integer(SF_CALIB_VERSION));
	sf_fingerprint_put(root, &C->fingerprint);
	json_object_set_new(root, "method", json_string(sf_codes_method_name(C->method)));
	json_object_set(root, "producer", C->producer ? C->producer : json_null());
	json_object_set_new(root, "tokens", json_integer((json_int_t)C->tokens));
	json_object_set_new(root, "window", json_integer(C->window));
	json_object_set_new(root, "step", json_real(SF_CALIB_STEP));
	json_object_set_new(root, "n_layers", json_integer(C->n_layers));
	for (int g = 0; g < SF_NGROUPS; g++)
		json_object_set_new(groups, sf_group_name((enum sf_group)g),
				    json_pack("{s:I,s:I,s:I,s:f}", "entries",
					      (json_int_t)C->sizes[g].entries, "top_bytes",
					      (json_int_t)C->sizes[g].top_bytes, "mid_bytes",
					      (json_int_t)C->sizes[g].mid_bytes, "rho",
					      (double)C->sizes[g].mid_bytes /
						      (double)C->sizes[g].top_bytes));
	json_object_set_new(root, "groups", groups);
	if (C->part) {
		json_t *pl = json_array();
		for (int l = 0; l < C->n_layers; l++)
			if (C->part[l])
				json_array_append_new(pl, json_integer(l));
		json_object_set_new(root, "part_layers", pl);
	}
	for (size_t b = 0; b < C->nbudgets; b++) {
		json_t *layers = json_array();
		for (int l = 0; l < C->n_layers; l++) {
			const struct sf_calib_layer *L = sf_calib_at(C, b, l);
			if (C->part && !C->part[l])
				continue;
			json_t *gs = json_object(), *teal = json_object();
			for (int g = 0; g < SF_NGROUPS; g++) {
				json_object_set_new(gs, sf_group_name((enum sf_group)g),
						    json_pack("{s:I,s:I,s:f}", "k_top",
							      (json_int_t)L->g[g].k_top, "k_mid",
							      (json_int_t)L->g[g].k_mid, "budget",
							      L->g[g].budget));
				json_object_set_new(teal, sf_group_name((enum sf_group)g),
						    json_integer((json_int_t)L->teal_k_top[g]));
			}
			json_array_append_new(layers,
					      json_pack("{s:i,s:b,s:f,s:f,s:f,s:o,s:{s:f,s:o}}",
							"layer", l, "dense", L->dense, "budget",
							L->budget, "error", L->error, "step1_error",
							L->step1_error, "groups", gs, "teal", "error",
							L->teal_error, "k_top", teal));
		}
		if (C->part)	/* realised needs every layer: the merge's */
			json_array_append_new(budgets, json_pack("{s:f,s:o}", "budget", C->budgets[b],
								 "layers", layers));
		else
			json_array_append_new(budgets,
					      json_pack("{s:f,s:f,s:o}", "budget", C->budgets[b],
							"realised", C->realised[b], "layers", layers));
	}
	json_object_set_new(root, "budgets", budgets);

	struct sf_outfile o;
	if ((ret = sf_outfile_open(&o, path, 0, inputs, e)))
		goto out;
	if (json_dumpf(root, o.f, JSON_INDENT(1)) || fputc('\n', o.f) == EOF) {
		ret = sf_err_set(e, -EIO, "%s: write error", o.name);
		sf_outfile_abort(&o);
		goto out;
	}
	ret = sf_outfile_commit(&o, e);
out:
	json_decref(root);
	return ret;
}

/* part_layers of a part: layer numbers rising, below n_layers, into C->part;
 * *held their count. */
static int load_part_layers(struct sf_calib *C, json_t *pl, const char *path, size_t *held,
			    struct sf_err *e)
{
	size_t i;
	json_t *v;
	int64_t prev = -1;

	if (!json_is_array(pl) || json_array_size(pl) == 0)
		return sf_err_set(e, SF_EFORMAT, "%s: \"part_layers\": expected 1..%d layers", path,
				  C->n_layers);
	if (!(C->part = calloc((size_t)C->n_layers, 1)))
		return sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
	json_array_foreach(pl, i, v) {
		if (!json_is_integer(v) || json_integer_value(v) <= prev ||
		    json_integer_value(v) >= C->n_layers)
			return sf_err_set(e, SF_EFORMAT, "%s: \"part_layers\": entry %zu is not a "
					  "layer above %lld and below %d", path, i + 1,
					  (long long)prev, C->n_layers);
		prev = json_integer_value(v);
		C->part[prev] = 1;
	}
	*held = json_array_size(pl);
	return 0;
}

static int load(struct sf_calib *C, const char *path, int allow_part, struct sf_err *e)
{
	json_t *root, *ver, *me, *groups, *budgets, *pl;
	size_t held;
	double v;
	int ret;

	memset(C, 0, sizeof(*C));
	if ((ret = sf_json_load(&root, path, SF_CALIB_MAX_FILE, e)))
		return ret;
	me = json_object_get(root, "method");
	groups = json_object_get(root, "groups");
	budgets = json_object_get(root, "budgets");
	ver = json_object_get(root, "version");
	if (!json_is_integer(ver) || json_integer_value(ver) != SF_CALIB_VERSION) {
		ret = sf_fingerprint_version(path, "calib.json", json_integer_value(ver),
					     SF_CALIB_VERSION, e);
		goto out;
	}
	if ((ret = sf_fingerprint_parse(&C->fingerprint, root, path, e)))
		goto out;
	if (!json_is_string(me) || sf_codes_method_parse(json_string_value(me), &C->method)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: unknown method", path);
		goto out;
	}
	if ((ret = sf_json_count(root, "n_layers", 1, SF_CALIB_MAX_LAYERS, &v, path, e)))
		goto out;
	C->n_layers = (int)v;
	if ((ret = sf_json_count(root, "tokens", 0, 1e18, &v, path, e)))
		goto out;
	C->tokens = (uint64_t)v;
	if ((ret = sf_json_count(root, "window", 1, 1 << 24, &v, path, e)))
		goto out;
	C->window = (int)v;
	for (int g = 0; g < SF_NGROUPS; g++) {
		json_t *go = json_object_get(groups, sf_group_name((enum sf_group)g));
		double en, tb, mb;
		if ((ret = sf_json_count(go, "entries", 1, 1 << 24, &en, path, e)) ||
		    (ret = sf_json_count(go, "top_bytes", 1, 1e12, &tb, path, e)) ||
		    (ret = sf_json_count(go, "mid_bytes", 1, 1e12, &mb, path, e)))
			goto out;
		C->sizes[g] = (struct sf_calib_sizes){ (uint64_t)en, (uint64_t)tb, (uint64_t)mb };
	}
	held = (size_t)C->n_layers;
	if ((pl = json_object_get(root, "part_layers"))) {
		if (!allow_part) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: a part of a calibration (sf-encode "
					 "--calibrate --layers): merge the parts with sf-encode --merge",
					 path);
			goto out;
		}
		if ((ret = load_part_layers(C, pl, path, &held, e)))
			goto out;
	}
	if (!json_is_array(budgets) || json_array_size(budgets) == 0 ||
	    json_array_size(budgets) > SF_CALIB_MAX_BUDGETS) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: \"budgets\": expected 1..%d entries", path,
				 SF_CALIB_MAX_BUDGETS);
		goto out;
	}
	C->nbudgets = json_array_size(budgets);
	/* every budget lists every layer before room for them is taken */
	for (size_t b = 0; b < C->nbudgets; b++) {
		json_t *layers = json_object_get(json_array_get(budgets, b), "layers");
		if (!json_is_array(layers) || json_array_size(layers) != held) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: budget %zu: expected %zu layers", path,
					 b + 1, held);
			goto out;
		}
	}
	if (!(C->layers = calloc(C->nbudgets * (size_t)C->n_layers, sizeof(*C->layers)))) {
		ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
		goto out;
	}
	for (size_t b = 0; b < C->nbudgets; b++) {
		json_t *bo = json_array_get(budgets, b), *layers = json_object_get(bo, "layers");
		char where[SF_ERR_MAX];
		if ((ret = sf_json_num(bo, "budget", 1e-300, 1.0, &C->budgets[b], path, e)) ||
		    (!C->part &&
		     (ret = sf_json_num(bo, "realised", 0.0, 1.0, &C->realised[b], path, e))))
			goto out;
		for (size_t d = 0; d < b; d++)
			if (fabs(C->budgets[d] - C->budgets[b]) < SF_CALIB_SAME_BUDGET) {
				ret = sf_err_set(e, SF_EFORMAT, "%s: budget %g listed twice", path,
						 C->budgets[b]);
				goto out;
			}
		for (int l = 0, i = 0; l < C->n_layers; l++) {
			if (C->part && !C->part[l])
				continue;
			json_t *lo = json_array_get(layers, (size_t)i++);
			json_t *gs = json_object_get(lo, "groups");
			struct sf_calib_layer *L = sf_calib_at(C, b, l);
			int64_t at;
			snprintf(where, sizeof(where), "%s: budget %g", path, C->budgets[b]);
			if ((ret = sf_json_int(lo, "layer", 0, INT32_MAX, &at, where, e)))
				goto out;
			if (at >= C->n_layers) {
				ret = sf_err_set(e, SF_EFORMAT, "%s: layer %lld is beyond the %d layers",
						 where, (long long)at, C->n_layers);
				goto out;
			}
			if (at != l) {
				ret = sf_err_set(e, SF_EFORMAT, "%s: layer %lld listed where layer %d "
						 "belongs (twice, or out of order)", where, (long long)at, l);
				goto out;
			}
			snprintf(where, sizeof(where), "%s: budget %g layer %d", path, C->budgets[b], l);
			L->dense = json_is_true(json_object_get(lo, "dense"));
			if ((ret = sf_json_num(lo, "budget", 0.0, 1.0, &L->budget, where, e)) ||
			    (ret = sf_json_num(lo, "error", 0.0, 1e300, &L->error, where, e)))
				goto out;
			/* what the calibration measured beside, kept for a merge */
			json_t *teal = json_object_get(lo, "teal");
			if ((sf_json_has(lo, "step1_error") &&
			     (ret = sf_json_num(lo, "step1_error", 0.0, 1e300, &L->step1_error, where,
						e))) ||
			    (sf_json_has(teal, "error") &&
			     (ret = sf_json_num(teal, "error", 0.0, 1e300, &L->teal_error, where, e))))
				goto out;
			json_t *tk = json_object_get(teal, "k_top");
			for (int g = 0; g < SF_NGROUPS; g++) {
				const char *gn = sf_group_name((enum sf_group)g);
				double k;
				if (!sf_json_has(tk, gn))
					continue;
				if ((ret = sf_json_count(tk, gn, 0, (double)C->sizes[g].entries, &k,
							 where, e)))
					goto out;
				L->teal_k_top[g] = (uint64_t)k;
			}
			for (int g = 0; g < SF_NGROUPS; g++) {
				json_t *go = json_object_get(gs, sf_group_name((enum sf_group)g));
				double kt, km, n = (double)C->sizes[g].entries;
				snprintf(where, sizeof(where), "%s: budget %g layer %d %s", path,
					 C->budgets[b], l, sf_group_name((enum sf_group)g));
				if ((ret = sf_json_count(go, "k_top", 0, n, &kt, where, e)) ||
				    (ret = sf_json_count(go, "k_mid", 0, n - kt, &km, where, e)))
					goto out;
				L->g[g].k_top = (uint64_t)kt;
				L->g[g].k_mid = (uint64_t)km;
				L->g[g].budget = sf_calib_group_budget(&C->sizes[g], L->g[g].k_top,
								       L->g[g].k_mid);
			}
		}
	}
	C->producer = json_incref(json_object_get(root, "producer"));
out:
	json_decref(root);
	if (ret)
		sf_calib_free(C);
	return ret;
}

int sf_calib_load(struct sf_calib *C, const char *path, struct sf_err *e)
{
	return load(C, path, 0, e);
}

int sf_calib_load_part(struct sf_calib *C, const char *path, struct sf_err *e)
{
	return load(C, path, 1, e);
}

// ----------------------------------------------------------------------------
// merging parts

/* A producer without options.layers (a new reference), to compare parts. */
static json_t *producer_sans_layers(const json_t *p)
{
	json_t *c = json_deep_copy(p);
	json_t *opts = json_object_get(c, "options");
	if (json_is_object(opts))
		json_object_del(opts, "layers");
	return c;
}

int sf_calib_merge(struct sf_calib *C, const struct sf_calib *parts, size_t n,
		   const char *const *names, struct sf_err *e)
{
	const struct sf_calib *P = &parts[0];
	json_t *ref = NULL, *cmp = NULL;
	int ret = 0;

	memset(C, 0, sizeof(*C));
	if (n == 0)
		return sf_err_set(e, -EINVAL, "merge: no calibration part");
	ref = producer_sans_layers(P->producer);
	for (size_t i = 0; i < n; i++) {
		const struct sf_calib *Q = &parts[i];
		if (!Q->part) {
			ret = sf_err_set(e, SF_EMISMATCH, "%s: a whole calibration, not a part "
					 "(sf-encode --calibrate --layers)", names[i]);
			goto out;
		}
		if (memcmp(&Q->fingerprint, &P->fingerprint, sizeof(P->fingerprint)) ||
		    Q->method != P->method ||
		    Q->n_layers != P->n_layers || memcmp(Q->sizes, P->sizes, sizeof(P->sizes))) {
			ret = sf_err_set(e, SF_EMISMATCH, "%s: another model or code method than %s",
					 names[i], names[0]);
			goto out;
		}
		if (Q->tokens != P->tokens || Q->window != P->window || Q->nbudgets != P->nbudgets ||
		    memcmp(Q->budgets, P->budgets, P->nbudgets * sizeof(double))) {
			ret = sf_err_set(e, SF_EMISMATCH, "%s: other budgets, tokens or window than %s",
					 names[i], names[0]);
			goto out;
		}
		json_decref(cmp);
		cmp = producer_sans_layers(Q->producer);
		if (!json_equal(cmp, ref)) {
			ret = sf_err_set(e, SF_EMISMATCH, "%s: made with other options than %s "
					 "(producer)", names[i], names[0]);
			goto out;
		}
		for (int l = 0; l < P->n_layers; l++)
			for (size_t j = 0; j < i && Q->part[l]; j++)
				if (parts[j].part[l]) {
					ret = sf_err_set(e, SF_EMISMATCH, "%s: layer %d is in %s too",
							 names[i], l, names[j]);
					goto out;
				}
	}
	C->fingerprint = P->fingerprint;
	C->method = P->method;
	C->n_layers = P->n_layers;
	memcpy(C->sizes, P->sizes, sizeof(C->sizes));
	C->nbudgets = P->nbudgets;
	memcpy(C->budgets, P->budgets, sizeof(C->budgets));
	C->tokens = P->tokens;
	C->window = P->window;
	if (!(C->layers = calloc(C->nbudgets * (size_t)C->n_layers, sizeof(*C->layers)))) {
		ret = sf_err_set(e, -ENOMEM, "merge: %s", strerror(ENOMEM));
		goto out;
	}
	for (int l = 0; l < C->n_layers; l++) {
		size_t i = 0;
		while (i < n && !parts[i].part[l])
			i++;
		if (i == n) {
			ret = sf_err_set(e, SF_EMISMATCH, "merge: no part holds layer %d", l);
			goto out;
		}
		for (size_t b = 0; b < C->nbudgets; b++)
			*sf_calib_at(C, b, l) = *sf_calib_at(&parts[i], b, l);
	}
	sf_calib_realise(C);
	C->producer = json_deep_copy(P->producer);
	json_t *opts = json_object_get(C->producer, "options");
	if (json_is_object(opts))
		json_object_set_new(opts, "layers", json_string("all"));
out:
	json_decref(ref);
	json_decref(cmp);
	if (ret)
		sf_calib_free(C);
	return ret;
}
