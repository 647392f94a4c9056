/* config.json of a Hugging Face Llama, Mistral, Qwen2, Qwen3, Phi-3 or Gemma 3 causal LM,
 * or of the mixtures of experts Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE or
 * gpt-oss, into a
 * struct sf_config, with Hugging Face's defaults for absent fields and a
 * refusal, by name, of every feature the decoder does not implement. */
#include "formats/config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"

#define CONFIG_FILE_MAX (16u << 20)	/* bytes; real ones are about 1 KiB */

/* Sanity limits: far above any released model, low enough that sizes
 * computed from them stay well inside 64 bits. */
#define DIM_MAX 65536
#define HIDDEN_MAX (1 << 20)
#define LAYERS_MAX SF_LAYERS_MAX
#define HEADS_MAX 1024
#define HEAD_DIM_MAX 1024
#define VOCAB_MAX (4 << 20)
#define SEQ_MAX (1 << 24)

#define QWEN3_HEAD_DIM 128	/* Qwen3Config's head_dim when absent */
#define GEMMA_HEAD_DIM 256	/* Gemma2Config's and Gemma3TextConfig's */
#define EXPERTS_MAX 1024

/* The config classes' defaults where config.json leaves a value out. */
static const struct {
	const char *arch;	/* architectures[0] */
	const char *type;	/* model_type */
	enum sf_arch id;
	double eps;		/* rms_norm_eps */
	double theta;		/* rope_theta */
} archs[] = {
	{ "LlamaForCausalLM", "llama", SF_ARCH_LLAMA, 1e-6, 10000.0 },
	{ "MistralForCausalLM", "mistral", SF_ARCH_MISTRAL, 1e-6, 10000.0 },
	{ "MixtralForCausalLM", "mixtral", SF_ARCH_MIXTRAL, 1e-5, 1e6 },
	{ "Qwen2ForCausalLM", "qwen2", SF_ARCH_QWEN2, 1e-6, 10000.0 },
	{ "Qwen3ForCausalLM", "qwen3", SF_ARCH_QWEN3, 1e-6, 10000.0 },
	{ "Qwen2MoeForCausalLM", "qwen2_moe", SF_ARCH_QWEN2_MOE, 1e-6, 10000.0 },
	{ "Qwen3MoeForCausalLM", "qwen3_moe", SF_ARCH_QWEN3_MOE, 1e-6, 10000.0 },
	{ "OlmoeForCausalLM", "olmoe", SF_ARCH_OLMOE, 1e-5, 10000.0 },
	{ "GptOssForCausalLM", "gpt_oss", SF_ARCH_GPT_OSS, 1e-5, 150000.0 },
	{ "Phi3ForCausalLM", "phi3", SF_ARCH_PHI3, 1e-5, 10000.0 },
	{ "Gemma2ForCausalLM", "gemma2", SF_ARCH_GEMMA2, 1e-6, 10000.0 },
	{ "Gemma3ForCausalLM", "gemma3_text", SF_ARCH_GEMMA3, 1e-6, 1e6 },
};
#define NARCHS (sizeof(archs) / sizeof(archs[0]))

static int is_gemma(const struct sf_config *c)
{
	return c->arch == SF_ARCH_GEMMA2 || c->arch == SF_ARCH_GEMMA3;
}

const char *sf_arch_name(enum sf_arch a)
{
	for (size_t i = 0; i < NARCHS; i++)
		if (archs[i].id == a)
			return archs[i].arch;
	return "?";
}

/* Architecture a's defaults: *eps, *theta. */
static void arch_defaults(enum sf_arch a, double *eps, double *theta)
{
	*eps = 1e-6;
	*theta = 10000.0;
	for (size_t i = 0; i < NARCHS; i++)
		if (archs[i].id == a) {
			*eps = archs[i].eps;
			*theta = archs[i].theta;
		}
}

const char *sf_config_experts_key(const struct sf_config *c)
{
	return c->arch == SF_ARCH_MIXTRAL || c->arch == SF_ARCH_GPT_OSS ? "num_local_experts"
										: "num_experts";
}

static const char *json_type_word(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a number";
	case JSON_TRUE: return "true";
	case JSON_FALSE: return "false";
	case JSON_NULL: return "null";
	}
	return "?";
}

/* An integer field in [min, max]. Absent or null: *out = def when
 * !required, else an error. */
static int get_int(const char *path, json_t *obj, const char *ctx, const char *key, int required,
		   int def, long long min, long long max, int *out, struct sf_err *e)
{
	json_t *v = json_object_get(obj, key);
	long long x;

	if (!v || json_is_null(v)) {
		if (required)
			return sf_err_set(e, SF_EFORMAT, "%s: '%s%s': missing", path, ctx, key);
		*out = def;
		return 0;
	}
	if (!json_is_integer(v))
		return sf_err_set(e, SF_EFORMAT, "%s: '%s%s': %s, expected an integer", path, ctx, key,
				  json_type_word(v));
	x = json_integer_value(v);
	if (x < min || x > max)
		return sf_err_set(e, SF_ELIMIT, "%s: '%s%s': %lld, expected %lld..%lld", path, ctx, key,
				  x, min, max);
	*out = (int)x;
	return 0;
}

/* A number (integer or real) in (lo, hi], or [lo, hi] when lo_incl. */
static int get_num(const char *path, json_t *obj, const char *ctx, const char *key, int required,
		   double def, double lo, int lo_incl, double hi, float *out, struct sf_err *e)
{
	json_t *v = json_object_get(obj, key);
	double x;

	if (!v || json_is_null(v)) {
		if (required)
			return sf_err_set(e, SF_EFORMAT, "%s: '%s%s': missing", path, ctx, key);
		*out = (float)def;
		return 0;
	}
	if (!json_is_number(v))
		return sf_err_set(e, SF_EFORMAT, "%s: '%s%s': %s, expected a number", path, ctx, key,
				  json_type_word(v));
	x = json_number_value(v);
	if (!isfinite(x) || (lo_incl ? x < lo : x <= lo) || x > hi)
		return sf_err_set(e, SF_ELIMIT, "%s: '%s%s': %g, expected %s %g and at most %g", path,
				  ctx, key, x, lo_incl ? "at least" : "above", lo, hi);
	*out = (float)x;
	return 0;
}

static int get_bool(const char *path, json_t *obj, const char *key, int def, int *out,
		    struct sf_err *e)
{
	json_t *v = json_object_get(obj, key);

	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_boolean(v))
		return sf_err_set(e, SF_EFORMAT, "%s: '%s': %s, expected true or false", path, key,
				  json_type_word(v));
	*out = json_is_true(v);
	return 0;
}

/* KEY of obj (named CTX KEY in messages): a list of n finite numbers
 * above 0, into out. */
static int get_factors(const char *path, json_t *obj, const char *ctx, const char *key, int n,
		       const char *what, float *out, struct sf_err *e)
{
	json_t *v = json_object_get(obj, key);

	if (!v || !json_is_array(v) || json_array_size(v) != (size_t)n)
		return sf_err_set(e, SF_EFORMAT, "%s: '%s%s': expected a list of %d numbers (%s)",
				  path, ctx, key, n, what);
	for (size_t i = 0; i < json_array_size(v); i++) {
		double f = json_number_value(json_array_get(v, i));
		if (!json_is_number(json_array_get(v, i)) || !(f > 0) || !isfinite((float)f))
			return sf_err_set(e, SF_EFORMAT, "%s: '%s%s[%zu]': expected a finite number "
					  "above 0", path, ctx, key, i);
		out[i] = (float)f;
	}
	return 0;
}

/* "rope_freqs": sparseflash's own key, in the config.json an image of a
 * GGUF embeds (sf_config_json): head_dim / 2 factors above 0. */
static int parse_rope_freqs(const char *path, json_t *root, struct sf_config *c,
			    struct sf_err *e)
{
	json_t *v = json_object_get(root, "rope_freqs");
	int ret;

	if (!v || json_is_null(v))
		return 0;
	if (c->rope_longrope)	/* both would set the same factors */
		return sf_err_set(e, SF_EFORMAT, "%s: 'rope_freqs': beside a longrope rope_scaling, "
				  "which gives the factors", path);
	if ((ret = get_factors(path, root, "", "rope_freqs", c->rope_dim / 2, "rotated dimensions "
			       "/ 2", c->rope_freqs, e)))
		return ret;
	c->n_rope_freqs = c->rope_dim / 2;
	return 0;
}

/* Phi-3's partial_rotary_factor (1 by default): RoPE turns the first
 * int(head_dim * factor) dimensions of each head, which must be even. */
static int parse_rope_dim(const char *path, json_t *root, struct sf_config *c, struct sf_err *e)
{
	float f;
	int ret;

	c->rope_dim = c->head_dim;
	if (c->arch != SF_ARCH_PHI3)
		return 0;
	if ((ret = get_num(path, root, "", "partial_rotary_factor", 0, 1.0, 0, 0, 1, &f, e)))
		return ret;
	/* transformers' int(); the slack keeps a factor written back from
	 * rope_dim / head_dim (sf_config_json) from falling below it */
	c->rope_dim = (int)((double)c->head_dim * (double)f + 1e-6);
	if (c->rope_dim < 2 || c->rope_dim % 2)
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: 'partial_rotary_factor': %g of head_dim %d "
				  "turns %d dimensions, expected an even number of at least 2",
				  path, (double)f, c->head_dim, c->rope_dim);
	return 0;
}

static int parse_arch(const char *path, json_t *root, struct sf_config *c, struct sf_err *e)
{
	json_t *a = json_object_get(root, "architectures");
	json_t *t = json_object_get(root, "model_type");

	if (a && !json_is_null(a)) {
		const char *name;

		if (!json_is_array(a) || !json_array_size(a) ||
		    !json_is_string(json_array_get(a, 0)))
			return sf_err_set(e, SF_EFORMAT,
					  "%s: 'architectures': expected a non-empty array of strings",
					  path);
		name = json_string_value(json_array_get(a, 0));
		for (size_t i = 0; i < NARCHS; i++)
			if (!strcmp(name, archs[i].arch)) {
				c->arch = archs[i].id;
				return 0;
			}
		return sf_err_set(e, SF_EUNSUPPORTED,
				  "%s: architectures[0] '%.100s': unsupported architecture (expected LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, OlmoeForCausalLM or GptOssForCausalLM)",
				  path, name);
	}
	if (json_is_string(t)) {
		const char *name = json_string_value(t);

		for (size_t i = 0; i < NARCHS; i++)
			if (!strcmp(name, archs[i].type)) {
				c->arch = archs[i].id;
				return 0;
			}
		return sf_err_set(e, SF_EUNSUPPORTED,
				  "%s: model_type '%.100s': unsupported architecture (expected llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text, gemma3, mixtral, qwen2_moe, qwen3_moe, olmoe or gpt_oss)",
				  path, name);
	}
	return sf_err_set(e, SF_EFORMAT, "%s: 'architectures': missing (and no 'model_type')", path);
}

/* rope_scaling's number fields: each above 0 and at most 1e6, def when
 * absent and not required. */
struct rs_num {
	const char *key;
	int required;
	double def;
	float *out;
};

static int get_rs_nums(const char *path, json_t *rs, const struct rs_num *f, size_t n,
		       struct sf_err *e)
{
	int ret;

	for (size_t i = 0; i < n; i++)
		if ((ret = get_num(path, rs, "rope_scaling.", f[i].key, f[i].required, f[i].def, 0,
				   0, 1e6, f[i].out, e)))
			return ret;
	return 0;
}

/* YaRN's keys of rope_scaling, with transformers' defaults
 * (_compute_yarn_parameters): beta_fast 32, beta_slow 1, the original
 * context max_position_embeddings, truncate true, attention_factor
 * 0.1 ln(factor) + 1 (1 when factor <= 1). DeepSeek's mscale and
 * mscale_all_dim are refused. */
static int parse_yarn(const char *path, json_t *rs, struct sf_config *c, struct sf_err *e)
{
	static const char *const refused[] = { "mscale", "mscale_all_dim" };
	int ret;

	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		json_t *v = json_object_get(rs, refused[i]);
		if (v && !json_is_null(v))
			return sf_err_set(e, SF_EUNSUPPORTED, "%s: 'rope_scaling.%s': unsupported "
					  "(yarn's attention factor from mscale)", path, refused[i]);
	}
	const struct rs_num nums[] = {
		{ "factor", 1, 0, &c->rope_factor },
		{ "beta_fast", 0, 32, &c->rope_beta_fast },
		{ "beta_slow", 0, 1, &c->rope_beta_slow },
	};

	c->rope_yarn = 1;
	if ((ret = get_rs_nums(path, rs, nums, sizeof(nums) / sizeof(nums[0]), e)) ||
	    (ret = get_int(path, rs, "rope_scaling.", "original_max_position_embeddings", 0,
			   c->max_seq_len, 1, SEQ_MAX, &c->rope_orig_max_pos, e)) ||
	    (ret = get_bool(path, rs, "truncate", 1, &c->rope_truncate, e)) ||
	    (ret = get_num(path, rs, "rope_scaling.", "attention_factor", 0,
			   c->rope_factor > 1 ? 0.1 * log(c->rope_factor) + 1.0 : 1.0, 0, 0, 1e6,
			   &c->rope_attn_factor, e)))
		return ret;
	return 0;
}

/* LongRoPE (_compute_longrope_parameters): short_factor and long_factor,
 * rope_dim / 2 numbers each; the pretrained context from the config's
 * own original_max_position_embeddings (then the factor is
 * max_position_embeddings over it), else max_position_embeddings with
 * rope_scaling's factor; attention_factor, else sqrt(1 + ln factor /
 * ln original) above a factor of 1. */
static int parse_longrope(const char *path, json_t *root, json_t *rs, struct sf_config *c,
			  struct sf_err *e)
{
	int n = c->rope_dim / 2, ret;
	float factor;

	if ((ret = get_factors(path, rs, "rope_scaling.", "short_factor", n, "rotated dimensions "
			       "/ 2", c->rope_freqs, e)) ||
	    (ret = get_factors(path, rs, "rope_scaling.", "long_factor", n, "rotated dimensions "
			       "/ 2", c->rope_freqs_long, e)) ||
	    (ret = get_int(path, root, "", "original_max_position_embeddings", 0, 0, 1, SEQ_MAX,
			   &c->rope_orig_max_pos, e)) ||
	    (ret = get_num(path, rs, "rope_scaling.", "factor", 0, 1.0, 0, 0, 1e6, &factor, e)))
		return ret;
	if (c->rope_orig_max_pos)
		factor = (float)((double)c->max_seq_len / (double)c->rope_orig_max_pos);
	else
		c->rope_orig_max_pos = c->max_seq_len;
	if ((ret = get_num(path, rs, "rope_scaling.", "attention_factor", 0,
			   factor > 1 ? sqrt(1 + log(factor) / log(c->rope_orig_max_pos)) : 1.0, 0,
			   0, 1e6, &c->rope_attn_factor, e)))
		return ret;
	c->rope_longrope = 1;
	c->n_rope_freqs = n;
	return 0;
}

/* rope_scaling: null, a "default" type (plain RoPE), llama3, yarn,
 * longrope ("su" its older name) or linear.
 * GptOssConfig's default when absent is yarn of factor 32 over 4096
 * positions, not truncated. */
static int parse_rope_scaling(const char *path, json_t *root, struct sf_config *c,
			      struct sf_err *e)
{
	json_t *rs = json_object_get(root, "rope_scaling");
	const struct rs_num llama3[] = {
		{ "factor", 1, 0, &c->rope_factor },
		{ "low_freq_factor", 1, 0, &c->rope_low_freq_factor },
		{ "high_freq_factor", 1, 0, &c->rope_high_freq_factor },
	};
	json_t *jt, *rp = json_object_get(root, "rope_parameters");
	const char *type;
	int ret;

	c->rope_attn_factor = 1.0f;
	/* newer transformers' spelling of rope_theta and rope_scaling
	 * together: not read, so refused rather than left unapplied */
	if (rp && !json_is_null(rp))
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: 'rope_parameters': unsupported (give "
				  "rope_theta and rope_scaling)", path);
	if ((!rs || json_is_null(rs)) && c->arch == SF_ARCH_GPT_OSS) {
		c->rope_yarn = 1;
		c->rope_factor = 32.0f;
		c->rope_beta_fast = 32.0f;
		c->rope_beta_slow = 1.0f;
		c->rope_orig_max_pos = 4096;
		c->rope_attn_factor = (float)(0.1 * log(32.0) + 1.0);
		return 0;
	}
	if (!rs || json_is_null(rs))
		return 0;
	if (!json_is_object(rs))
		return sf_err_set(e, SF_EFORMAT, "%s: 'rope_scaling': %s, expected an object or null",
				  path, json_type_word(rs));
	/* Transformers renamed "type" to "rope_type"; both are seen. */
	jt = json_object_get(rs, "rope_type");
	if (!jt)
		jt = json_object_get(rs, "type");
	if (!json_is_string(jt))
		return sf_err_set(e, SF_EFORMAT, "%s: 'rope_scaling.rope_type': %s, expected a string",
				  path, jt ? json_type_word(jt) : "missing");
	type = json_string_value(jt);
	if (!strcmp(type, "default"))
		return 0;
	if (!strcmp(type, "yarn"))
		return parse_yarn(path, rs, c, e);
	if (!strcmp(type, "longrope") || !strcmp(type, "su"))
		return parse_longrope(path, root, rs, c, e);
	if (!strcmp(type, "linear"))	/* every frequency over the factor */
		return get_num(path, rs, "rope_scaling.", "factor", 1, 0, 0, 0, 1e6, &c->rope_linear,
			       e);
	if (strcmp(type, "llama3"))
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: 'rope_scaling': type '%.60s' unsupported "
				  "(only llama3, yarn, longrope and linear)", path, type);
	c->rope_llama3 = 1;
	if ((ret = get_rs_nums(path, rs, llama3, sizeof(llama3) / sizeof(llama3[0]), e)) ||
	    (ret = get_int(path, rs, "rope_scaling.", "original_max_position_embeddings", 1, 0, 1,
			   SEQ_MAX, &c->rope_orig_max_pos, e)))
		return ret;
	/* The smoothing divides by high - low. */
	if (!(c->rope_high_freq_factor > c->rope_low_freq_factor))
		return sf_err_set(e, SF_EFORMAT,
				  "%s: 'rope_scaling.high_freq_factor': %g, expected above low_freq_factor %g",
				  path, c->rope_high_freq_factor, c->rope_low_freq_factor);
	return 0;
}

static int parse_eos(const char *path, json_t *root, struct sf_config *c, struct sf_err *e)
{
	json_t *v = json_object_get(root, "eos_token_id");

	c->n_eos = 0;
	if (!v || json_is_null(v))
		return 0;
	if (json_is_integer(v)) {
		json_int_t x = json_integer_value(v);

		if (x < 0 || x >= c->vocab_size)
			return sf_err_set(e, SF_EFORMAT, "%s: 'eos_token_id': %lld, expected 0..%d", path,
					  (long long)x, c->vocab_size - 1);
		c->eos_ids[c->n_eos++] = (int)x;
		return 0;
	}
	if (!json_is_array(v))
		return sf_err_set(e, SF_EFORMAT,
				  "%s: 'eos_token_id': %s, expected an integer or a list of integers",
				  path, json_type_word(v));
	if (json_array_size(v) > SF_MAX_EOS)
		return sf_err_set(e, SF_ELIMIT, "%s: 'eos_token_id': %zu ids, at most %d supported",
				  path, json_array_size(v), SF_MAX_EOS);
	for (size_t i = 0; i < json_array_size(v); i++) {
		json_t *x = json_array_get(v, i);

		if (!json_is_integer(x) || json_integer_value(x) < 0 ||
		    json_integer_value(x) >= c->vocab_size)
			return sf_err_set(e, SF_EFORMAT, "%s: 'eos_token_id[%zu]': expected an integer 0..%d",
					  path, i, c->vocab_size - 1);
		c->eos_ids[c->n_eos++] = (int)json_integer_value(x);
	}
	return 0;
}

/* The mixtures' config classes: expert count and top k by default, and
 * what else their routers and experts read. */
static const struct {
	enum sf_arch arch;
	int experts, used;	/* the config class's defaults */
	int moe_hidden;		/* 1: moe_intermediate_size gives the experts' width */
	int shared;		/* 1: a shared expert (shared_expert_intermediate_size) */
	int sparse_step;	/* 1: decoder_sparse_step and mlp_only_layers exist */
} moes[] = {
	{ SF_ARCH_MIXTRAL, 8, 2, 0, 0, 0 },
	{ SF_ARCH_QWEN2_MOE, 60, 4, 1, 1, 1 },
	{ SF_ARCH_QWEN3_MOE, 128, 8, 1, 0, 1 },
	{ SF_ARCH_OLMOE, 64, 8, 0, 0, 0 },
	{ SF_ARCH_GPT_OSS, 128, 4, 0, 0, 0 },
};

/* Qwen2/3-MoE put a dense FFN in place of the experts in the layers
 * decoder_sparse_step skips or mlp_only_layers names; only the common
 * case, every layer a mixture, is computed. */
static int check_all_moe(const char *path, json_t *root, struct sf_err *e)
{
	json_t *v = json_object_get(root, "mlp_only_layers");
	int step, ret;

	if ((ret = get_int(path, root, "", "decoder_sparse_step", 0, 1, 1, LAYERS_MAX, &step, e)))
		return ret;
	if (step != 1)
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: 'decoder_sparse_step': %d unsupported "
				  "(only 1: dense layers among the mixtures are not computed)", path,
				  step);
	if (v && !json_is_null(v) && !(json_is_array(v) && !json_array_size(v)))
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: 'mlp_only_layers': unsupported unless "
				  "empty (dense layers among the mixtures are not computed)", path);
	return 0;
}

/* A mixture's experts: their count and top k with the config class's
 * defaults, a top k above the count refused; norm_topk_prob (Mixtral
 * always renormalises); the experts' and the shared expert's widths. */
static int parse_experts(const char *path, json_t *root, struct sf_config *c, struct sf_err *e)
{
	const char *key = sf_config_experts_key(c);
	size_t i;
	int ret;

	for (i = 0; i < sizeof(moes) / sizeof(moes[0]) && moes[i].arch != c->arch; i++)
		;
	if (i == sizeof(moes) / sizeof(moes[0]))
		return 0;
	if ((ret = get_int(path, root, "", key, 0, moes[i].experts, 1, EXPERTS_MAX, &c->n_experts,
			   e)) ||
	    (ret = get_int(path, root, "", "num_experts_per_tok", 0, moes[i].used, 1, EXPERTS_MAX,
			   &c->n_experts_used, e)))
		return ret;
	if (c->n_experts_used > c->n_experts)
		return sf_err_set(e, SF_EFORMAT, "%s: 'num_experts_per_tok' %d is above '%s' %d",
				  path, c->n_experts_used, key, c->n_experts);
	/* gpt-oss takes the softmax over the top k's logits: the same as
	 * over all, renormalised over the k */
	c->norm_topk = 1;
	if (c->arch != SF_ARCH_MIXTRAL && c->arch != SF_ARCH_GPT_OSS &&
	    (ret = get_bool(path, root, "norm_topk_prob", 0, &c->norm_topk, e)))
		return ret;
	/* required, as the other shapes: the class's defaults are a large model's */
	if (moes[i].moe_hidden &&
	    (ret = get_int(path, root, "", "moe_intermediate_size", 1, 0, 1, HIDDEN_MAX,
			   &c->hidden_dim, e)))
		return ret;
	if (moes[i].shared &&
	    (ret = get_int(path, root, "", "shared_expert_intermediate_size", 1, 0, 1, HIDDEN_MAX,
			   &c->shared_hidden_dim, e)))
		return ret;
	return moes[i].sparse_step ? check_all_moe(path, root, e) : 0;
}

/* Features of these architectures that the decoder does not compute. */
static int refuse_unsupported(const char *path, json_t *root, const struct sf_config *c,
			      struct sf_err *e)
{
	json_t *act = json_object_get(root, "hidden_act");
	int b = 0, ret;

	/* Gemma's configs read hidden_activation instead (parse_gemma) */
	if (act && !json_is_null(act) && !is_gemma(c)) {
		const char *s = json_string_value(act);

		if (!s)
			return sf_err_set(e, SF_EFORMAT, "%s: 'hidden_act': %s, expected a string", path,
					  json_type_word(act));
		/* Transformers maps both names to the same SiLU. */
		if (strcmp(s, "silu") && strcmp(s, "swish"))
			return sf_err_set(e, SF_EUNSUPPORTED,
					  "%s: 'hidden_act': '%.60s' unsupported (only silu)", path, s);
	}
	/* Only LlamaConfig, Qwen3Config, Qwen3MoeConfig and OlmoeConfig read
	 * attention_bias, only LlamaConfig mlp_bias; Mistral, Mixtral, Qwen2
	 * and Qwen2-MoE build their Linear layers without them. */
	if (c->arch == SF_ARCH_LLAMA || c->arch == SF_ARCH_QWEN3 || c->arch == SF_ARCH_QWEN3_MOE ||
	    c->arch == SF_ARCH_OLMOE) {
		if ((ret = get_bool(path, root, "attention_bias", 0, &b, e)))
			return ret;
		if (b)
			return sf_err_set(e, SF_EUNSUPPORTED,
					  "%s: 'attention_bias': true unsupported (q/k/v/o biases)",
					  path);
	}
	if (c->arch == SF_ARCH_LLAMA) {
		if ((ret = get_bool(path, root, "mlp_bias", 0, &b, e)))
			return ret;
		if (b)
			return sf_err_set(e, SF_EUNSUPPORTED, "%s: 'mlp_bias': true unsupported", path);
	}
	return 0;
}

/* The layers a window of WINDOW positions (0: none) slides in: every
 * layer (PATTERN 0, Phi-3), or all but each PATTERN-th (gpt-oss's and
 * Gemma 2's 2, Gemma 3's 6, as their config classes and llama.cpp's
 * set_swa_pattern make them). */
static void set_sliding(struct sf_config *c, int window, int pattern)
{
	c->sliding_window = window;
	for (int l = 0; l < c->n_layers; l++)
		c->layer_sliding[l] = window > 0 && (pattern == 0 || (l + 1) % pattern != 0);
}

/* gpt-oss's and Gemma's layer_types: n_layers of "sliding_attention"
 * and "full_attention" (when absent, as their config classes make them:
 * layer l slides unless l + 1 is a multiple of the pattern, 2 for gpt-oss
 * and Gemma 2, Gemma 3's sliding_window_pattern, 6 by default), the window
 * sliding_window (window when absent). */
static int parse_layer_types(const char *path, json_t *root, struct sf_config *c, int window,
			     int pattern, struct sf_err *e)
{
	json_t *v = json_object_get(root, "layer_types");
	int ret;

	if ((ret = get_int(path, root, "", "sliding_window", 0, window, 1, SEQ_MAX, &window, e)))
		return ret;
	set_sliding(c, window, pattern);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_array(v) || json_array_size(v) != (size_t)c->n_layers)
		return sf_err_set(e, SF_EFORMAT, "%s: 'layer_types': expected a list of %d strings "
				  "(num_hidden_layers)", path, c->n_layers);
	for (int l = 0; l < c->n_layers; l++) {
		const char *t = json_string_value(json_array_get(v, (size_t)l));
		if (!t || (strcmp(t, "sliding_attention") && strcmp(t, "full_attention")))
			return sf_err_set(e, SF_EFORMAT, "%s: 'layer_types[%d]': expected "
					  "\"sliding_attention\" or \"full_attention\"", path, l);
		c->layer_sliding[l] = !strcmp(t, "sliding_attention");
	}
	return 0;
}

/* What gpt-oss has beyond the other mixtures: attention_bias (true by
 * default: q, k, v and o), the sinks, alternating sliding layers, the
 * router's and experts' biases and the clamped SwiGLU's constants. */
static int parse_gpt_oss(const char *path, json_t *root, struct sf_config *c, struct sf_err *e)
{
	int ret;

	if ((ret = get_bool(path, root, "attention_bias", 1, &c->qkv_bias, e)) ||
	    (ret = parse_layer_types(path, root, c, 128, 2, e)) ||
	    (ret = get_num(path, root, "", "swiglu_limit", 0, 7.0, 0, 0, 1e30, &c->swiglu_limit, e)) ||
	    (ret = get_num(path, root, "", "swiglu_alpha", 0, 1.702, 0, 0, 1e30, &c->swiglu_alpha,
			   e)))
		return ret;
	c->o_bias = c->qkv_bias;
	c->attn_sinks = 1;
	c->moe_bias = 1;
	return 0;
}

/* A soft-capping bound of Gemma2Config: def when absent, null for none
 * (0). */
static int get_softcap(const char *path, json_t *root, const char *key, double def, float *out,
		       struct sf_err *e)
{
	json_t *v = json_object_get(root, key);

	if (v && json_is_null(v)) {
		*out = 0.0f;
		return 0;
	}
	return get_num(path, root, "", key, 0, def, 0, 0, 1e9, out, e);
}

/* Gemma 2 (Gemma2Config) and Gemma 3 (Gemma3TextConfig): GELU's tanh
 * approximation (hidden_activation), the gains stored less one, the
 * embeddings times sqrt(hidden_size), the scores by
 * query_pre_attn_scalar^-0.5 (256), the sliding layers of sliding_window
 * (4096: Gemma 2's every other layer from the first; Gemma 3's all but
 * each 6th, on their own RoPE base, rope_local_base_freq, 10000,
 * unscaled), the sandwich norms; Gemma 2's soft-capping of the scores
 * (attn_logit_softcapping, 50) and the logits (final_logit_softcapping,
 * 30), Gemma 3's q and k norms; what they may have and we do not compute
 * (Gemma 3's soft-capping, bidirectional attention, biases) refused by
 * name. */
static int parse_gemma(const char *path, json_t *root, struct sf_config *c, struct sf_err *e)
{
	static const char *const refused[] = { "final_logit_softcapping", "attn_logit_softcapping" };
	json_t *act = json_object_get(root, "hidden_activation");
	int g3 = c->arch == SF_ARCH_GEMMA3, pattern = 2, b, ret;

	for (size_t i = 0; g3 && i < sizeof(refused) / sizeof(refused[0]); i++) {
		json_t *v = json_object_get(root, refused[i]);
		if (v && !json_is_null(v))
			return sf_err_set(e, SF_EUNSUPPORTED, "%s: '%s': unsupported in Gemma 3 (no "
					  "soft-capping)", path, refused[i]);
	}
	if (act && !json_is_null(act) &&
	    (!json_is_string(act) || strcmp(json_string_value(act), "gelu_pytorch_tanh")))
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: 'hidden_activation': unsupported (only "
				  "gelu_pytorch_tanh)", path);
	if ((ret = get_bool(path, root, "use_bidirectional_attention", 0, &b, e)))
		return ret;
	if (b)
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: 'use_bidirectional_attention': true "
				  "unsupported", path);
	if ((ret = get_bool(path, root, "attention_bias", 0, &b, e)))
		return ret;
	if (b)
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: 'attention_bias': true unsupported (q/k/v/o "
				  "biases)", path);
	if ((g3 && (ret = get_int(path, root, "", "sliding_window_pattern", 0, 6, 1, LAYERS_MAX,
				  &pattern, e))) ||
	    (ret = parse_layer_types(path, root, c, 4096, pattern, e)) ||
	    (ret = get_num(path, root, "", "query_pre_attn_scalar", 0, 256, 0, 0, 1e9,
			   &c->attn_scalar, e)) ||
	    /* Gemma 2's own key only in an image of a GGUF whose
	     * rope.freq_base_swa differs (sf_config_json) */
	    (ret = get_num(path, root, "", "rope_local_base_freq", 0, g3 ? 10000 : 0, 0, 0, 1e12,
			   &c->rope_theta_local, e)) ||
	    (!g3 && ((ret = get_softcap(path, root, "attn_logit_softcapping", 50.0,
					&c->attn_softcap, e)) ||
		     (ret = get_softcap(path, root, "final_logit_softcapping", 30.0,
					&c->final_softcap, e)))) ||
	    /* sparseflash's own key: 0 in the config an image of a GGUF
	     * embeds (sf_config_json), whose gains hold the one */
	    (ret = get_num(path, root, "", "rms_norm_offset", 0, 1.0, 0, 1, 1, &c->norm_offset, e)))
		return ret;
	c->embed_scale = (float)sqrt((double)c->dim);
	c->act_gelu = 1;
	c->post_norms = 1;
	c->qk_norm = g3 ? SF_QK_NORM_HEAD : SF_QK_NORM_NONE;
	return 0;
}

/* A sliding window narrower than the context changes attention: Phi-3's
 * every layer computes its window (as gpt-oss's sliding layers:
 * parse_layer_types); the others keep attention exact by limiting the
 * context to the window instead. */
static int parse_sliding_window(const char *path, json_t *root, struct sf_config *c,
				struct sf_err *e)
{
	int use = 0, window, ret;

	if (c->arch == SF_ARCH_MISTRAL || c->arch == SF_ARCH_MIXTRAL || c->arch == SF_ARCH_PHI3)
		use = 1;	/* their configs apply sliding_window whenever set */
	else if ((c->arch == SF_ARCH_QWEN2 || c->arch == SF_ARCH_QWEN3 ||
		  c->arch == SF_ARCH_QWEN2_MOE || c->arch == SF_ARCH_QWEN3_MOE) &&
		 (ret = get_bool(path, root, "use_sliding_window", 0, &use, e)))
		return ret;
	if (!use)
		return 0;
	if ((ret = get_int(path, root, "", "sliding_window", 0, 0, 1, SEQ_MAX, &window, e)))
		return ret;
	if (c->arch == SF_ARCH_PHI3) {
		set_sliding(c, window, 0);
		return 0;
	}
	c->sliding_window = window;
	if (c->sliding_window && c->sliding_window < c->max_seq_len)
		c->max_seq_len = c->sliding_window;
	return 0;
}

/* What config.json and a GGUF call the fields check_heads names. */
struct head_names {
	const char *dim, *heads, *kv_heads, *head_dim;
};
static const struct head_names json_names = {
	"hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
};

/* The heads divide as attention needs (head_dim_default: head_dim was
 * not given, so dim must split into the heads). */
static int check_heads(const char *path, const struct sf_config *c, int head_dim_default,
		       const struct head_names *n, struct sf_err *e)
{
	if (head_dim_default && c->dim % c->n_heads)
		return sf_err_set(e, SF_EFORMAT, "%s: '%s' %d is not a multiple of '%s' %d", path,
				  n->dim, c->dim, n->heads, c->n_heads);
	if (c->n_heads % c->n_kv_heads)
		return sf_err_set(e, SF_EFORMAT, "%s: '%s' %d is not a multiple of '%s' %d", path,
				  n->heads, c->n_heads, n->kv_heads, c->n_kv_heads);
	/* Rotate-half RoPE pairs element i with i + head_dim / 2. */
	if (c->head_dim % 2)
		return sf_err_set(e, SF_EFORMAT, "%s: '%s' %d is odd, expected even for RoPE", path,
				  n->head_dim, c->head_dim);
	return 0;
}

int sf_config_load(struct sf_config *c, const char *path, struct sf_err *e)
{
	char *text = NULL;
	size_t len = 0;
	int ret;

	memset(c, 0, sizeof(*c));
	if ((ret = sf_file_read(path, CONFIG_FILE_MAX, SF_FILE_REGULAR, &text, &len, e)))
		return ret;
	ret = sf_config_parse(c, path, text, len, e);
	free(text);
	return ret;
}

/* Gemma 3's checkpoints of 4B and up are Gemma3ForConditionalGeneration
 * (model_type gemma3): their text model's config is text_config. Else
 * NULL. */
static json_t *gemma3_text_config(json_t *top)
{
	json_t *a = json_object_get(top, "architectures"), *t = json_object_get(top, "model_type");
	const char *name = json_is_array(a) ? json_string_value(json_array_get(a, 0)) : NULL;

	if (name ? !strcmp(name, "Gemma3ForConditionalGeneration")
		 : json_is_string(t) && !strcmp(json_string_value(t), "gemma3"))
		return json_object_get(top, "text_config");
	return NULL;
}

/* The shape fields: required, as Hugging Face's defaults are a 7B model's,
 * never what a small checkpoint means; but Gemma3TextConfig's, on which
 * the released Gemma 3 text_configs rely (1B's widths). */
static int parse_shape(const char *path, json_t *root, struct sf_config *c, struct sf_err *e)
{
	int g = c->arch == SF_ARCH_GEMMA3, ret;

	if ((ret = get_int(path, root, "", "hidden_size", !g, 2304, 1, DIM_MAX, &c->dim, e)) ||
	    (ret = get_int(path, root, "", "intermediate_size", !g, 9216, 1, HIDDEN_MAX,
			   &c->hidden_dim, e)) ||
	    (ret = get_int(path, root, "", "num_hidden_layers", !g, 26, 1, LAYERS_MAX, &c->n_layers,
			   e)) ||
	    (ret = get_int(path, root, "", "num_attention_heads", !g, 8, 1, HEADS_MAX, &c->n_heads,
			   e)) ||
	    (ret = get_int(path, root, "", "num_key_value_heads", 0, g ? 4 : c->n_heads, 1,
			   HEADS_MAX, &c->n_kv_heads, e)) ||
	    (ret = get_int(path, root, "", "vocab_size", !g, 262208, 1, VOCAB_MAX, &c->vocab_size,
			   e)))
		return ret;
	return get_int(path, root, "", "max_position_embeddings", !g, 131072, 1, SEQ_MAX,
		       &c->max_seq_len, e);
}

int sf_config_parse(struct sf_config *c, const char *path, const char *text, size_t len,
		    struct sf_err *e)
{
	json_t *top = NULL, *root, *v;
	json_error_t jerr;
	int ret, head_dim_default;

	memset(c, 0, sizeof(*c));
	if (len > CONFIG_FILE_MAX) {
		ret = sf_err_set(e, SF_ELIMIT, "%s: larger than the limit of %u bytes", path,
				 CONFIG_FILE_MAX);
		goto out;
	}
	root = top = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!top) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: not valid JSON: %s at line %d column %d", path,
				 jerr.text, jerr.line, jerr.column);
		goto out;
	}
	if (!json_is_object(top)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: %s, expected a JSON object", path,
				 json_type_word(top));
		goto out;
	}
	if ((v = gemma3_text_config(top))) {
		if (!json_is_object(v)) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: 'text_config': %s, expected an object",
					 path, json_type_word(v));
			goto out;
		}
		root = v;
		c->arch = SF_ARCH_GEMMA3;
	} else if ((ret = parse_arch(path, root, c, e))) {
		goto out;
	}
	if ((ret = parse_shape(path, root, c, e)))
		goto out;
	v = json_object_get(root, "head_dim");
	head_dim_default = !v || json_is_null(v);
	/* Qwen3Config's own default is 128, Gemma's 256, whatever hidden_size
	 * says. */
	if ((ret = get_int(path, root, "", "head_dim", 0,
			   c->arch == SF_ARCH_QWEN3 ? QWEN3_HEAD_DIM :
			   is_gemma(c) ? GEMMA_HEAD_DIM : c->dim / c->n_heads, 1,
			   HEAD_DIM_MAX, &c->head_dim, e)))
		goto out;
	/* Qwen3's and Gemma's head_dim need not divide hidden_size */
	if ((ret = check_heads(path, c, head_dim_default && c->arch != SF_ARCH_QWEN3 &&
				  !is_gemma(c), &json_names, e)))
		goto out;
	if ((ret = parse_rope_dim(path, root, c, e)))
		goto out;
	double eps, theta;
	arch_defaults(c->arch, &eps, &theta);
	if ((ret = get_num(path, root, "", "rms_norm_eps", 0, eps, 0, 0, 1, &c->norm_eps, e)) ||
	    (ret = get_num(path, root, "", "rope_theta", 0, theta, 0, 0, 1e12, &c->rope_theta,
			   e)) ||
	    (ret = parse_rope_scaling(path, root, c, e)) ||
	    (ret = get_bool(path, root, "tie_word_embeddings", is_gemma(c),
			    &c->tie_embeddings, e)) ||
	    (ret = refuse_unsupported(path, root, c, e)) ||
	    (ret = parse_sliding_window(path, root, c, e)) ||
	    (ret = parse_experts(path, root, c, e)) ||
	    /* a wrapper's token ids at its top (Gemma's BOS 2) */
	    (ret = get_int(path, json_object_get(top, "bos_token_id") ? top : root, "",
			   "bos_token_id", 0, is_gemma(c) ? 2 : -1, 0,
			   c->vocab_size - 1, &c->bos_id, e)) ||
	    (ret = parse_eos(path, json_object_get(top, "eos_token_id") ? top : root, c, e)) ||
	    (ret = get_bool(path, root, "rope_interleaved", 0, &c->rope_interleaved, e)) ||
	    (ret = parse_rope_freqs(path, root, c, e)))
		goto out;
	/* Qwen2MoeConfig reads qkv_bias (true by default); Qwen2's are always there */
	c->qkv_bias = c->arch == SF_ARCH_QWEN2;
	if (c->arch == SF_ARCH_QWEN2_MOE &&
	    (ret = get_bool(path, root, "qkv_bias", 1, &c->qkv_bias, e)))
		goto out;
	if (c->arch == SF_ARCH_GPT_OSS && (ret = parse_gpt_oss(path, root, c, e)))
		goto out;
	c->qk_norm = c->arch == SF_ARCH_QWEN3 || c->arch == SF_ARCH_QWEN3_MOE ? SF_QK_NORM_HEAD
		     : c->arch == SF_ARCH_OLMOE ? SF_QK_NORM_ALL : SF_QK_NORM_NONE;
	/* OlmoeConfig's clip_qkv: null, or a bound above 0 */
	if (c->arch == SF_ARCH_OLMOE &&
	    (ret = get_num(path, root, "", "clip_qkv", 0, 0, 0, 0, 1e30, &c->clip_qkv, e)))
		goto out;
	if (is_gemma(c) && (ret = parse_gemma(path, root, c, e)))
		goto out;
	ret = 0;
out:
	json_decref(top);
	if (ret)
		memset(c, 0, sizeof(*c));
	return ret;
}

/* n floats as a JSON list (NULL when out of memory: json_pack and
 * json_object_set_new then fail too); doubles that parse back to them */
static json_t *float_list(const float *v, int n)
{
	json_t *f = json_array();

	for (int i = 0; f && i < n; i++)
		if (json_array_append_new(f, json_real((double)v[i]))) {
			json_decref(f);
			return NULL;
		}
	return f;
}

char *sf_config_json(const struct sf_config *c)
{
	const char *arch = sf_arch_name(c->arch), *type = NULL;
	json_t *o, *eos = json_array();
	char *text = NULL;

	for (size_t i = 0; i < NARCHS; i++)
		if (archs[i].id == c->arch)
			type = archs[i].type;
	for (int i = 0; eos && i < c->n_eos; i++)
		if (json_array_append_new(eos, json_integer(c->eos_ids[i])))
			goto out;
	/* floats as doubles: each parses back to the same float */
	o = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:b, s:o*}",
		      "architectures", arch, "model_type", type, "hidden_size", c->dim,
		      "intermediate_size", c->hidden_dim, "num_hidden_layers", c->n_layers,
		      "num_attention_heads", c->n_heads, "num_key_value_heads", c->n_kv_heads,
		      "head_dim", c->head_dim, "vocab_size", c->vocab_size,
		      "max_position_embeddings", c->max_seq_len, "rms_norm_eps", (double)c->norm_eps,
		      "rope_theta", (double)c->rope_theta, "tie_word_embeddings", c->tie_embeddings,
		      "eos_token_id", eos);
	eos = NULL;
	if (!o)
		goto out;
	if ((c->bos_id >= 0 && json_object_set_new(o, "bos_token_id", json_integer(c->bos_id))) ||
	    (c->rope_interleaved && json_object_set_new(o, "rope_interleaved", json_true())))
		goto done;
	/* a mixture's experts as its config class names them */
	if (c->n_experts &&
	    (json_object_set_new(o, sf_config_experts_key(c), json_integer(c->n_experts)) ||
	     json_object_set_new(o, "num_experts_per_tok", json_integer(c->n_experts_used)) ||
	     (c->arch != SF_ARCH_MIXTRAL &&
	      json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk))) ||
	     ((c->arch == SF_ARCH_QWEN2_MOE || c->arch == SF_ARCH_QWEN3_MOE) &&
	      json_object_set_new(o, "moe_intermediate_size", json_integer(c->hidden_dim))) ||
	     (c->shared_hidden_dim &&
	      json_object_set_new(o, "shared_expert_intermediate_size",
				  json_integer(c->shared_hidden_dim))) ||
	     (c->clip_qkv > 0 && json_object_set_new(o, "clip_qkv", json_real((double)c->clip_qkv)))))
		goto done;
	if (c->rope_yarn &&
	    json_object_set_new(o, "rope_scaling", json_pack(
		    "{s:s, s:f, s:f, s:f, s:i, s:b, s:f}", "rope_type", "yarn", "factor",
		    (double)c->rope_factor, "beta_fast", (double)c->rope_beta_fast, "beta_slow",
		    (double)c->rope_beta_slow, "original_max_position_embeddings",
		    c->rope_orig_max_pos, "truncate", c->rope_truncate, "attention_factor",
		    (double)c->rope_attn_factor)))
		goto done;
	if (c->rope_linear > 0 &&
	    json_object_set_new(o, "rope_scaling", json_pack("{s:s, s:f}", "rope_type", "linear",
							     "factor", (double)c->rope_linear)))
		goto done;
	if (is_gemma(c) &&
	    (json_object_set_new(o, "query_pre_attn_scalar", json_real((double)c->attn_scalar)) ||
	     json_object_set_new(o, "rms_norm_offset", json_real((double)c->norm_offset))))
		goto done;
	if (c->rope_theta_local > 0 &&
	    json_object_set_new(o, "rope_local_base_freq", json_real((double)c->rope_theta_local)))
		goto done;
	if (c->arch == SF_ARCH_GEMMA2 &&
	    (json_object_set_new(o, "attn_logit_softcapping", c->attn_softcap > 0 ?
				 json_real((double)c->attn_softcap) : json_null()) ||
	     json_object_set_new(o, "final_logit_softcapping", c->final_softcap > 0 ?
				 json_real((double)c->final_softcap) : json_null())))
		goto done;
	if (c->arch == SF_ARCH_GPT_OSS || is_gemma(c)) {
		json_t *types = json_array();
		for (int l = 0; types && l < c->n_layers; l++)
			if (json_array_append_new(types, json_string(c->layer_sliding[l] ?
								     "sliding_attention" :
								     "full_attention")))
				break;
		if (json_object_set_new(o, "layer_types", types) ||
		    json_array_size(types) != (size_t)c->n_layers ||
		    json_object_set_new(o, "sliding_window", json_integer(c->sliding_window)))
			goto done;
	}
	if (c->arch == SF_ARCH_GPT_OSS &&
	    (json_object_set_new(o, "attention_bias", json_boolean(c->qkv_bias)) ||
	     json_object_set_new(o, "swiglu_limit", json_real((double)c->swiglu_limit)) ||
	     json_object_set_new(o, "swiglu_alpha", json_real((double)c->swiglu_alpha))))
		goto done;
	if (c->rope_longrope &&
	    (json_object_set_new(o, "rope_scaling", json_pack(
		    "{s:s, s:o, s:o, s:f}", "rope_type", "longrope", "short_factor",
		    float_list(c->rope_freqs, c->n_rope_freqs), "long_factor",
		    float_list(c->rope_freqs_long, c->n_rope_freqs), "attention_factor",
		    (double)c->rope_attn_factor)) ||
	     json_object_set_new(o, "original_max_position_embeddings",
				 json_integer(c->rope_orig_max_pos))))
		goto done;
	if (c->arch == SF_ARCH_PHI3 &&
	    (json_object_set_new(o, "partial_rotary_factor",
				 json_real((double)c->rope_dim / (double)c->head_dim)) ||
	     (c->sliding_window &&
	      json_object_set_new(o, "sliding_window", json_integer(c->sliding_window)))))
		goto done;
	if (c->n_rope_freqs && !c->rope_longrope &&
	    json_object_set_new(o, "rope_freqs", float_list(c->rope_freqs, c->n_rope_freqs)))
		goto done;
	text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
done:
	json_decref(o);
out:
	json_decref(eos);
	return text;
}

int sf_config_default_ctx(const struct sf_config *c)
{
	return c->rope_longrope && c->rope_orig_max_pos < c->max_seq_len ? c->rope_orig_max_pos
									  : c->max_seq_len;
}

size_t sf_group_entries(const struct sf_config *c, enum sf_group g)
{
	switch (g) {
	case SF_GROUP_ATTN_IN: return (size_t)c->dim;
	case SF_GROUP_ATTN_OUT: return (size_t)c->n_heads * c->head_dim;
	case SF_GROUP_FFN_IN: return (size_t)c->dim;
	case SF_GROUP_FFN_OUT: return (size_t)c->hidden_dim;
	default: return 0;
	}
}

// --- a GGUF's metadata (llama.cpp's LLM_KV keys)

/* ARCH.SUFFIX as an integer in [min, max]; absent: def, or an error when
 * required. */
static int gguf_int(const struct sf_gguf *g, const char *arch, const char *suffix, int required,
		    int def, long long min, long long max, int *out, struct sf_err *e)
{
	char key[128];
	int32_t v;
	int ret;

	snprintf(key, sizeof(key), "%s.%s", arch, suffix);
	ret = sf_gguf_get_i32(g, key, &v, e);
	if (ret == -ENOENT && !required) {
		*out = def;
		return 0;
	}
	if (ret)
		return ret;
	if (v < min || v > max)
		return sf_err_set(e, SF_ELIMIT, "%s: key '%s': %d, expected %lld..%lld", g->path, key,
				  (int)v, min, max);
	*out = (int)v;
	return 0;
}

/* ARCH.SUFFIX as a number in (lo, hi]; absent: def. */
static int gguf_num(const struct sf_gguf *g, const char *arch, const char *suffix, double def,
		    double lo, double hi, float *out, struct sf_err *e)
{
	char key[128];
	int ret;

	snprintf(key, sizeof(key), "%s.%s", arch, suffix);
	ret = sf_gguf_get_f32(g, key, out, e);
	if (ret == -ENOENT) {
		*out = (float)def;
		return 0;
	}
	if (ret)
		return ret;
	if (!(*out > lo && *out <= hi))
		return sf_err_set(e, SF_ELIMIT, "%s: key '%s': %g, expected above %g and at most %g",
				  g->path, key, (double)*out, lo, hi);
	return 0;
}

/* A token id key, -1 when absent. */
static int gguf_token(const struct sf_gguf *g, const char *key, int vocab, int *out,
		      struct sf_err *e)
{
	uint32_t v;
	int ret = sf_gguf_get_u32(g, key, &v, e);

	*out = -1;
	if (ret == -ENOENT)
		return 0;
	if (ret)
		return ret;
	if (v >= (uint32_t)vocab)
		return sf_err_set(e, SF_EFORMAT, "%s: key '%s': %u, expected 0..%d", g->path, key, v,
				  vocab - 1);
	*out = (int)v;
	return 0;
}

/* What llama.cpp can store but the decoder does not compute. */
static int gguf_refuse_unsupported(const struct sf_gguf *g, const char *arch, struct sf_err *e)
{
	float scale;
	int ret;

	if ((ret = gguf_num(g, arch, "expert_weights_scale", 1.0, -1, 1e9, &scale, e)))
		return ret;
	if (scale != 0.0f && scale != 1.0f)
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: key '%s.expert_weights_scale': %g "
				  "unsupported (only 1: the experts' weights unscaled)", g->path, arch,
				  (double)scale);
	if ((ret = gguf_num(g, arch, "rope.scaling.yarn_log_multiplier", 0.0, -1e9, 1e9, &scale, e)))
		return ret;
	if (scale != 0.0f)
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: key '%s.rope.scaling.yarn_log_multiplier': "
				  "%g unsupported (yarn's attention factor from mscale)", g->path, arch,
				  (double)scale);
	return 0;
}

/* rope.scaling.type: none, linear (every frequency over rope.scaling.factor;
 * gemma3's global layers), or YaRN as llama.cpp computes it from its keys:
 * factor (1), original_context_length (context_length), yarn_beta_fast
 * and yarn_beta_slow (32, 1), the correction range rounded outwards
 * (ggml_rope_yarn_corr_dims: transformers' truncate), and cos and sin
 * scaled by attn_factor (1) times 0.1 ln(factor) + 1. */
static int gguf_rope_scaling(const struct sf_gguf *g, const char *arch, struct sf_config *c,
			     struct sf_err *e)
{
	char key[128];
	const char *s;
	uint64_t len;
	float attn;
	int ret;

	snprintf(key, sizeof(key), "%s.rope.scaling.type", arch);
	ret = sf_gguf_get_str(g, key, &s, &len, e);
	if (ret == -ENOENT || (!ret && len == 4 && !memcmp(s, "none", 4)))
		return 0;
	if (ret)
		return ret;
	if (len == 6 && !memcmp(s, "linear", 6))
		return gguf_num(g, arch, "rope.scaling.factor", 1.0, 0, 1e6, &c->rope_linear, e);
	if (!(len == 4 && !memcmp(s, "yarn", 4)))
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: key '%s': '%.*s' unsupported (only none, "
				  "linear and yarn)", g->path, key, len > 60 ? 60 : (int)len, s);
	c->rope_yarn = 1;
	c->rope_truncate = 1;
	if ((ret = gguf_num(g, arch, "rope.scaling.factor", 1.0, 0, 1e6, &c->rope_factor, e)) ||
	    (ret = gguf_int(g, arch, "rope.scaling.original_context_length", 0, c->max_seq_len, 1,
			    SEQ_MAX, &c->rope_orig_max_pos, e)) ||
	    (ret = gguf_num(g, arch, "rope.scaling.yarn_beta_fast", 32.0, 0, 1e6,
			    &c->rope_beta_fast, e)) ||
	    (ret = gguf_num(g, arch, "rope.scaling.yarn_beta_slow", 1.0, 0, 1e6,
			    &c->rope_beta_slow, e)) ||
	    (ret = gguf_num(g, arch, "rope.scaling.attn_factor", 1.0, 0, 1e6, &attn, e)))
		return ret;
	c->rope_attn_factor = attn * (c->rope_factor > 1.0f ?
				      (float)(0.1 * log(c->rope_factor) + 1.0) : 1.0f);
	return 0;
}

/* gpt-oss as llama.cpp's graph computes it, which no key says: q, k, v
 * and o biases, the sinks, the router's and experts' biases, SwiGLU
 * clamped at 7.0 with alpha 1.702; the window attention.sliding_window in
 * the layers attention.sliding_window_pattern marks (2 when absent: every
 * other one from layer 0, llama.cpp's set_swa_pattern). */
static int gguf_gpt_oss(const struct sf_gguf *g, const char *arch, struct sf_config *c,
			struct sf_err *e)
{
	int window, pattern, ret;

	if ((ret = gguf_int(g, arch, "attention.sliding_window", 1, 0, 1, SEQ_MAX, &window, e)) ||
	    (ret = gguf_int(g, arch, "attention.sliding_window_pattern", 0, 2, 1, LAYERS_MAX,
			    &pattern, e)))
		return ret;
	set_sliding(c, window, pattern);
	c->qkv_bias = c->o_bias = c->attn_sinks = c->moe_bias = 1;
	c->swiglu_limit = 7.0f;
	c->swiglu_alpha = 1.702f;
	return 0;
}

/* A tensor of rope_dim / 2 RoPE factors (F32, finite, above 0) into out:
 * 1, or 0 when the file has no tensor NAME. */
static int gguf_factors(const struct sf_gguf *g, const char *name, const struct sf_config *c,
			float *out, struct sf_err *e)
{
	const struct sf_gguf_tensor *t = sf_gguf_tensor(g, name);

	if (!t)
		return 0;
	if (t->type != SF_GGML_F32 || t->n_dims != 1 || t->ne[0] != (uint64_t)c->rope_dim / 2)
		return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': %s [%llu], expected F32 [%d] "
				  "(rope.dimension_count / 2)", g->path, name,
				  sf_ggml_type_name(t->type), (unsigned long long)t->ne[0],
				  c->rope_dim / 2);
	for (int i = 0; i < c->rope_dim / 2; i++) {
		float f;
		memcpy(&f, (const char *)t->data + 4 * i, 4);
		if (!(f > 0.0f) || !isfinite(f))
			return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': factor %d is %g, expected a "
					  "finite number above 0", g->path, name, i, (double)f);
		out[i] = f;
	}
	return 1;
}

/* convert_hf_to_gguf.py stores llama3's rope_scaling as per-frequency
 * factors in rope_freqs.weight, not as keys: each frequency divided by
 * one; and Phi-3's LongRoPE as two such tensors, the short factors and
 * the long ones, with the pretrained context in
 * rope.scaling.original_context_length and the attention factor in
 * rope.scaling.attn_factor (1 when absent), as llama.cpp reads them. */
static int gguf_rope_freqs(const struct sf_gguf *g, const char *arch, struct sf_config *c,
			   struct sf_err *e)
{
	int ret, s, l;

	if ((ret = gguf_factors(g, SF_GGUF_ROPE_FREQS, c, c->rope_freqs, e)) < 0)
		return ret;
	c->n_rope_freqs = ret ? c->rope_dim / 2 : 0;
	if ((s = gguf_factors(g, SF_GGUF_ROPE_FACTORS_SHORT, c, c->rope_freqs, e)) < 0 ||
	    (l = gguf_factors(g, SF_GGUF_ROPE_FACTORS_LONG, c, c->rope_freqs_long, e)) < 0)
		return s < 0 ? s : l;
	if (!s && !l)
		return 0;
	if (!s || !l || ret || c->rope_yarn)
		return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': %s", g->path,
				  s ? SF_GGUF_ROPE_FACTORS_SHORT : SF_GGUF_ROPE_FACTORS_LONG,
				  !s || !l ? "without its long or short twin" :
				  "beside rope_freqs.weight or YaRN");
	c->rope_longrope = 1;
	c->n_rope_freqs = c->rope_dim / 2;
	if ((ret = gguf_int(g, arch, "rope.scaling.original_context_length", 1, 0, 1, SEQ_MAX,
			    &c->rope_orig_max_pos, e)))
		return ret;
	return gguf_num(g, arch, "rope.scaling.attn_factor", 1.0, 0, 1e6, &c->rope_attn_factor, e);
}

/* Gemma 2 and 3 as llama.cpp's graphs compute them:
 * attention.sliding_window (Gemma 2: 4096 when absent; Gemma 3: none) in
 * the layers attention.sliding_window_pattern (2; 6) marks, on
 * rope.freq_base_swa (Gemma 2: the others' base when absent; Gemma 3:
 * 10000) unscaled; the scores by 1 / sqrt(head_dim) but the 27Bs' (46
 * and 62 layers) by 1 / sqrt(dim / heads) (their query_pre_attn_scalar);
 * the gains already hold the one (the converter adds it); the embeddings
 * times sqrt(dim); GELU; the sandwich norms; Gemma 2's soft-capping
 * (attn_logit_softcapping 50, final_logit_softcapping 30 when absent),
 * Gemma 3's refused. */
static int gguf_gemma(const struct sf_gguf *g, const char *arch, struct sf_config *c,
		      struct sf_err *e)
{
	int g3 = c->arch == SF_ARCH_GEMMA3, window, pattern, ret;
	float cap;

	if ((ret = gguf_num(g, arch, "final_logit_softcapping", g3 ? 0.0 : 30.0, g3 ? -1 : 0, 1e9,
			    &cap, e)) ||
	    (!g3 && (ret = gguf_num(g, arch, "attn_logit_softcapping", 50.0, 0, 1e9,
				    &c->attn_softcap, e))))
		return ret;
	if (g3 && cap > 0)
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: key '%s.final_logit_softcapping': %g "
				  "unsupported in Gemma 3 (no soft-capping)", g->path, arch,
				  (double)cap);
	c->final_softcap = g3 ? 0.0f : cap;
	if ((ret = gguf_int(g, arch, "attention.sliding_window", 0, g3 ? 0 : 4096, 0, SEQ_MAX,
			    &window, e)) ||
	    (ret = gguf_int(g, arch, "attention.sliding_window_pattern", 0, g3 ? 6 : 2, 1,
			    LAYERS_MAX, &pattern, e)) ||
	    (ret = gguf_num(g, arch, "rope.freq_base_swa", g3 ? 10000.0 : 0.0, 0, 1e12,
			    &c->rope_theta_local, e)))
		return ret;
	set_sliding(c, window, pattern);
	c->attn_scalar = (float)(c->n_layers == (g3 ? 62 : 46) ? c->dim / c->n_heads : c->head_dim);
	c->embed_scale = (float)sqrt((double)c->dim);
	c->act_gelu = 1;
	c->post_norms = 1;
	return 0;
}

/* Phi-3's attention.sliding_window (0 or absent: none) in every layer, as
 * transformers computes it; llama.cpp's graph leaves it out for now (full
 * attention), which agrees within the window. */
static int gguf_phi3(const struct sf_gguf *g, const char *arch, struct sf_config *c,
		     struct sf_err *e)
{
	int window, ret = gguf_int(g, arch, "attention.sliding_window", 0, 0, 0, SEQ_MAX, &window, e);

	if (!ret)
		set_sliding(c, window, 0);
	return ret;
}

/* llama.cpp's architectures we compute, and what its graph of each does
 * that no key says: whether the router's top k is renormalised (Mixtral,
 * which is llama with experts, and Qwen3-MoE; not Qwen2-MoE or OLMoE,
 * whatever their checkpoints' norm_topk_prob was). */
static const struct {
	const char *name;
	enum sf_arch arch;
	int moe;		/* 1: experts required; llama: when it has them */
	int norm_topk;
} gguf_archs[] = {
	{ "llama", SF_ARCH_LLAMA, 0, 1 },
	{ "qwen2", SF_ARCH_QWEN2, 0, 0 },
	{ "qwen3", SF_ARCH_QWEN3, 0, 0 },
	{ "qwen2moe", SF_ARCH_QWEN2_MOE, 1, 0 },
	{ "qwen3moe", SF_ARCH_QWEN3_MOE, 1, 1 },
	{ "olmoe", SF_ARCH_OLMOE, 1, 0 },
	{ "gpt-oss", SF_ARCH_GPT_OSS, 1, 1 },	/* a softmax of the top k logits */
	{ "phi3", SF_ARCH_PHI3, 0, 0 },
	{ "gemma2", SF_ARCH_GEMMA2, 0, 0 },
	{ "gemma3", SF_ARCH_GEMMA3, 0, 0 },
};

/* A mixture's experts from the ARCH.expert_* keys: count, top k, their
 * width (expert_feed_forward_length, else feed_forward_length) and
 * Qwen2-MoE's shared expert's (else feed_forward_length, as llama.cpp). */
static int gguf_experts(const struct sf_gguf *g, const char *arch, int a, struct sf_config *c,
			struct sf_err *e)
{
	int dense_ff = c->hidden_dim, ret;

	if ((ret = gguf_int(g, arch, "expert_count", gguf_archs[a].moe, 0,
			    gguf_archs[a].moe ? 1 : 0, EXPERTS_MAX, &c->n_experts, e)))
		return ret;
	if (!c->n_experts)
		return 0;
	if (c->arch != SF_ARCH_LLAMA && !gguf_archs[a].moe)
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: key '%s.expert_count': %d, experts in "
				  "architecture %s unsupported (llama.cpp's are llama, qwen2moe, "
				  "qwen3moe, olmoe, gpt-oss)", g->path, arch, c->n_experts, arch);
	if (c->arch == SF_ARCH_LLAMA)
		c->arch = SF_ARCH_MIXTRAL;
	if ((ret = gguf_int(g, arch, "expert_used_count", 1, 0, 1, EXPERTS_MAX, &c->n_experts_used,
			    e)))
		return ret;
	if (c->n_experts_used > c->n_experts)
		return sf_err_set(e, SF_EFORMAT, "%s: key '%s.expert_used_count' %d is above '%s."
				  "expert_count' %d", g->path, arch, c->n_experts_used, arch,
				  c->n_experts);
	if ((ret = gguf_int(g, arch, "expert_feed_forward_length", 0, dense_ff, 1, HIDDEN_MAX,
			    &c->hidden_dim, e)))
		return ret;
	if (c->arch == SF_ARCH_QWEN2_MOE &&
	    (ret = gguf_int(g, arch, "expert_shared_feed_forward_length", 0, dense_ff, 1,
			    HIDDEN_MAX, &c->shared_hidden_dim, e)))
		return ret;
	c->norm_topk = gguf_archs[a].norm_topk;
	return 0;
}

int sf_config_from_gguf(struct sf_config *c, const struct sf_gguf *g, struct sf_err *e)
{
	static const struct head_names gguf_names = {
		"embedding_length", "attention.head_count", "attention.head_count_kv",
		"attention.key_length",
	};
	const struct sf_gguf_kv *tokens;
	const char *name;
	char arch[32];
	uint64_t len;
	int ret, head_dim_default, v_len, rope_dims, eos, eot;
	size_t a;

	memset(c, 0, sizeof(*c));
	if ((ret = sf_gguf_get_str(g, "general.architecture", &name, &len, e)))
		goto out;
	for (a = 0; a < sizeof(gguf_archs) / sizeof(gguf_archs[0]); a++)
		if (len == strlen(gguf_archs[a].name) && !memcmp(name, gguf_archs[a].name, len))
			break;
	if (a == sizeof(gguf_archs) / sizeof(gguf_archs[0])) {
		ret = sf_err_set(e, SF_EUNSUPPORTED,
				 "%s: key 'general.architecture': '%.*s' unsupported (expected llama, "
				 "qwen2, qwen3, phi3, gemma2, gemma3, qwen2moe, qwen3moe, olmoe or gpt-oss)",
				 g->path, len > 60 ? 60 : (int)len, name);
		goto out;
	}
	c->arch = gguf_archs[a].arch;
	c->rope_attn_factor = 1.0f;	/* no YaRN: sf_config_parse's */
	memcpy(arch, name, len);
	arch[len] = 0;
	if ((ret = gguf_int(g, arch, "embedding_length", 1, 0, 1, DIM_MAX, &c->dim, e)) ||
	    (ret = gguf_int(g, arch, "feed_forward_length", 1, 0, 1, HIDDEN_MAX, &c->hidden_dim, e)) ||
	    (ret = gguf_int(g, arch, "block_count", 1, 0, 1, LAYERS_MAX, &c->n_layers, e)) ||
	    (ret = gguf_int(g, arch, "attention.head_count", 1, 0, 1, HEADS_MAX, &c->n_heads, e)) ||
	    (ret = gguf_int(g, arch, "attention.head_count_kv", 0, c->n_heads, 1, HEADS_MAX,
			    &c->n_kv_heads, e)) ||
	    (ret = gguf_int(g, arch, "context_length", 1, 0, 1, SEQ_MAX, &c->max_seq_len, e)) ||
	    (ret = gguf_int(g, arch, "attention.key_length", 0, 0, 1, HEAD_DIM_MAX, &c->head_dim, e)))
		goto out;
	head_dim_default = !c->head_dim;
	if (head_dim_default)
		c->head_dim = c->dim / c->n_heads;
	/* Qwen3's head_dim need not divide hidden_size */
	if ((ret = check_heads(g->path, c, head_dim_default && c->arch != SF_ARCH_QWEN3, &gguf_names,
			       e)) ||
	    (ret = gguf_int(g, arch, "attention.value_length", 0, c->head_dim, 1, HEAD_DIM_MAX,
			    &v_len, e)) ||
	    (ret = gguf_int(g, arch, "rope.dimension_count", 0, c->head_dim, 1, HEAD_DIM_MAX,
			    &rope_dims, e)))
		goto out;
	if (v_len != c->head_dim) {
		ret = sf_err_set(e, SF_EUNSUPPORTED,
				 "%s: '%s.attention.value_length' %d, expected the key length %d (other "
				 "value heads unsupported)", g->path, arch, v_len, c->head_dim);
		goto out;
	}
	/* RoPE on the first rope.dimension_count of each head (Phi-3's
	 * partial_rotary_factor), in pairs */
	if (rope_dims % 2 || rope_dims > c->head_dim) {
		ret = sf_err_set(e, SF_EUNSUPPORTED, "%s: '%s.rope.dimension_count' %d, expected an "
				 "even number up to the key length %d", g->path, arch, rope_dims,
				 c->head_dim);
		goto out;
	}
	c->rope_dim = rope_dims;
	/* the vocabulary: its own key, else the tokenizer's token list */
	ret = gguf_int(g, arch, "vocab_size", 0, 0, 1, VOCAB_MAX, &c->vocab_size, e);
	if (!ret && !c->vocab_size) {
		ret = sf_gguf_get_arr(g, "tokenizer.ggml.tokens", SF_GGUF_STRING, &tokens, e);
		if (!ret && (tokens->n < 1 || tokens->n > VOCAB_MAX))
			ret = sf_err_set(e, SF_ELIMIT, "%s: key 'tokenizer.ggml.tokens': %llu tokens, expected 1..%d",
					 g->path, (unsigned long long)tokens->n, VOCAB_MAX);
		if (!ret)
			c->vocab_size = (int)tokens->n;
	}
	if (ret)
		goto out;
	if ((ret = gguf_num(g, arch, "attention.layer_norm_rms_epsilon", 1e-6, 0, 1, &c->norm_eps, e)) ||
	    (ret = gguf_num(g, arch, "rope.freq_base", 10000.0, 0, 1e12, &c->rope_theta, e)) ||
	    (ret = gguf_refuse_unsupported(g, arch, e)) ||
	    (ret = gguf_rope_scaling(g, arch, c, e)) ||
	    (ret = gguf_experts(g, arch, (int)a, c, e)) ||
	    (c->arch == SF_ARCH_GPT_OSS && (ret = gguf_gpt_oss(g, arch, c, e))) ||
	    (c->arch == SF_ARCH_PHI3 && (ret = gguf_phi3(g, arch, c, e))) ||
	    (is_gemma(c) && (ret = gguf_gemma(g, arch, c, e))) ||
	    (ret = gguf_rope_freqs(g, arch, c, e)) ||
	    (ret = gguf_token(g, "tokenizer.ggml.bos_token_id", c->vocab_size, &c->bos_id, e)) ||
	    (ret = gguf_token(g, "tokenizer.ggml.eos_token_id", c->vocab_size, &eos, e)) ||
	    (ret = gguf_token(g, "tokenizer.ggml.eot_token_id", c->vocab_size, &eot, e)))
		goto out;
	/* the end of a turn ends generation as the end of text does */
	if (eos >= 0)
		c->eos_ids[c->n_eos++] = eos;
	if (eot >= 0 && eot != eos)
		c->eos_ids[c->n_eos++] = eot;
	/* llama.cpp's converters leave the head out when tied */
	c->tie_embeddings = !sf_gguf_tensor(g, "output.weight");
	c->qkv_bias |= c->arch == SF_ARCH_QWEN2 || c->arch == SF_ARCH_QWEN2_MOE;
	c->qk_norm = c->arch == SF_ARCH_QWEN3 || c->arch == SF_ARCH_QWEN3_MOE ||
		     c->arch == SF_ARCH_GEMMA3 ? SF_QK_NORM_HEAD :
		     c->arch == SF_ARCH_OLMOE ? SF_QK_NORM_ALL : SF_QK_NORM_NONE;
	/* llama.cpp's converters reorder llama's (and Mixtral's) q and k rows
	 * for its RoPE (sf_gguf_rope_row); the others keep Hugging Face's.
	 * OLMoE's clip_qkv is not in its GGUF: llama.cpp computes none */
	c->rope_interleaved = c->arch == SF_ARCH_LLAMA || c->arch == SF_ARCH_MIXTRAL;
	ret = 0;
out:
	if (ret)
		memset(c, 0, sizeof(*c));
	return ret;
}
