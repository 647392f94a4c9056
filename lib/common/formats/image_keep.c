/* neurons.json, the FFN neurons sf-pack --keep packs: its reader (the
 * writer is sf_selectinfer's, online/selectinfer.h). See image.h and
 * man/sf-formats.5 (NEURONS.JSON). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonfile.h"
#include "formats/image.h"

void sf_image_keep_free(struct sf_image_keep *k)
{
	if (!k)
		return;
	free(k->kept);
	free(k->count);
	memset(k, 0, sizeof(*k));
}

int sf_image_keep_read(struct sf_image_keep *k, const char *path, const struct sf_model *m,
		       struct sf_err *e)
{
	json_error_t je;
	json_t *root = NULL, *v, *layers, *L;
	uint8_t *seen = NULL;
	size_t i;
	int ret;

	memset(k, 0, sizeof(*k));
	if (!(root = json_load_file(path, JSON_REJECT_DUPLICATES, &je))) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: %s", path, je.text);
		goto out;
	}
	v = json_object_get(root, "format");
	if (!json_is_string(v) || strcmp(json_string_value(v), SF_IMAGE_KEEP_FORMAT)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: \"format\" is not \"%s\"", path,
				 SF_IMAGE_KEEP_FORMAT);
		goto out;
	}
	v = json_object_get(root, "version");
	if (!json_is_integer(v) || json_integer_value(v) != SF_IMAGE_KEEP_VERSION) {
		ret = sf_fingerprint_version(path, "neurons", json_integer_value(v),
					     SF_IMAGE_KEEP_VERSION, e);
		goto out;
	}
	struct sf_fingerprint fp;
	if ((ret = sf_fingerprint_parse(&fp, root, path, e)) ||
	    (ret = sf_fingerprint_check(&fp, path, "neurons", &m->fingerprint, m->source, e)))
		goto out;
	layers = json_object_get(root, "layers");
	if (!json_is_array(layers)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: \"layers\" is not an array", path);
		goto out;
	}
	k->n_layers = m->cfg.n_layers;
	k->hidden = (uint32_t)m->cfg.hidden_dim;
	k->kept = malloc((size_t)k->n_layers * k->hidden);
	k->count = malloc((size_t)k->n_layers * sizeof(*k->count));
	seen = calloc((size_t)k->n_layers, 1);
	if (!k->kept || !k->count || !seen) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	memset(k->kept, 1, (size_t)k->n_layers * k->hidden);
	for (int l = 0; l < k->n_layers; l++)
		k->count[l] = k->hidden;
	json_array_foreach(layers, i, L) {
		json_t *lv = json_object_get(L, "layer"), *nv = json_object_get(L, "neurons"), *x;
		json_int_t l;
		size_t j;

		if (!json_is_integer(lv) || (l = json_integer_value(lv)) < 0 || l >= k->n_layers) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: layers[%zu]: \"layer\" is not 0..%d", path, i,
					 k->n_layers - 1);
			goto out;
		}
		if (seen[l]++) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: layer %d listed twice", path, (int)l);
			goto out;
		}
		if (!json_is_array(nv) || !json_array_size(nv)) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: layer %d: \"neurons\" is not a non-empty array",
					 path, (int)l);
			goto out;
		}
		uint8_t *kl = k->kept + (size_t)l * k->hidden;
		memset(kl, 0, k->hidden);
		json_array_foreach(nv, j, x) {
			json_int_t n = json_is_integer(x) ? json_integer_value(x) : -1;
			if (n < 0 || n >= (json_int_t)k->hidden) {
				ret = sf_err_set(e, SF_EFORMAT,
						 "%s: layer %d: neuron %s is out of range: expected 0..%u",
						 path, (int)l, json_is_integer(x) ? "" : "(not an integer)",
						 k->hidden - 1);
				if (json_is_integer(x))
					sf_err_set(e, SF_EFORMAT,
						   "%s: layer %d: neuron %" JSON_INTEGER_FORMAT
						   " is out of range: expected 0..%u", path, (int)l, n,
						   k->hidden - 1);
				goto out;
			}
			if (kl[n]) {
				ret = sf_err_set(e, SF_EFORMAT, "%s: layer %d: neuron %" JSON_INTEGER_FORMAT
						 " listed twice", path, (int)l, n);
				goto out;
			}
			kl[n] = 1;
		}
		k->count[l] = (uint32_t)json_array_size(nv);
	}
	ret = 0;
out:
	free(seen);
	json_decref(root);
	if (ret)
		sf_image_keep_free(k);
	return ret;
}
