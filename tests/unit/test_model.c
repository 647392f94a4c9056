/* Unit test of lib/common/formats/config.c and model.c: the embedded mix4-1m (and
 * ../shared's models when present) bind with the right config, shapes and
 * fingerprints; config.json variants and edited copies of the model in
 * $SF_TMP are refused with messages naming the file and the field. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/model.h"
#include "unit.h"

/* The fingerprints of models/mix4-1m. Pinned: a change to the fingerprint
 * text or the sampled blocks silently invalidates every stream made so
 * far, so it must be deliberate. */
#define MIX4_1M_FINGERPRINT "330c4fda0ed5bf30"	/* shape */
#define MIX4_1M_WEIGHTS "f99f1c420ae7a8cd"	/* weights */

static char tmpdir[4096];
static char model1[4096];	/* $SF_ROOT/models/mix4-1m */

static void check_err_at(int line, int ret, int code, const struct sf_err *e, ...)
{
	va_list ap;
	const char *s;

	if (getenv("UNIT_VERBOSE"))
		fprintf(stderr, "line %d: %s\n", line, e->msg);
	CHECK(ret == code, "line %d: returned %d, expected %d (%s)", line, ret, code, e->msg);
	CHECK(!strchr(e->msg, '\n'), "line %d: message '%s' is not one line", line, e->msg);
	va_start(ap, e);
	while ((s = va_arg(ap, const char *)))
		CHECK(strstr(e->msg, s), "line %d: message '%s' lacks '%s'", line, e->msg, s);
	va_end(ap);
}
#define CHECK_ERR(ret, code, e, ...) check_err_at(__LINE__, ret, code, e, __VA_ARGS__, NULL)

static int is_dir(const char *p)
{
	struct stat sb;
	return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int weight_is(const struct sf_weight *w, uint64_t rows, uint64_t cols)
{
	return w->data && w->rows == rows && w->cols == cols;
}

/* Every weight of m bound with the shape its config implies. */
static void check_bound(const struct sf_model *m, const char *what)
{
	const struct sf_config *c = &m->cfg;
	uint64_t dim = (uint64_t)c->dim, q = (uint64_t)c->n_heads * (uint64_t)c->head_dim;
	uint64_t kv = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim, hid = (uint64_t)c->hidden_dim;

	CHECK(weight_is(&m->embed, (uint64_t)c->vocab_size, dim), "%s: embed", what);
	CHECK(weight_is(&m->final_norm, dim, 1), "%s: final_norm", what);
	CHECK(weight_is(&m->lm_head, (uint64_t)c->vocab_size, dim), "%s: lm_head", what);
	CHECK(!c->tie_embeddings || m->lm_head.data == m->embed.data, "%s: lm_head not tied", what);
	CHECK(m->layers != NULL, "%s: no layers", what);
	for (int l = 0; m->layers && l < c->n_layers; l++) {
		const struct sf_layer_weights *w = &m->layers[l];

		CHECK(weight_is(&w->attn_norm, dim, 1) && weight_is(&w->ffn_norm, dim, 1),
		      "%s: layer %d norms", what, l);
		CHECK(weight_is(&w->wq, q, dim) && weight_is(&w->wk, kv, dim) &&
		      weight_is(&w->wv, kv, dim) && weight_is(&w->wo, dim, q),
		      "%s: layer %d attention", what, l);
		CHECK(weight_is(&w->w_gate, hid, dim) && weight_is(&w->w_up, hid, dim) &&
		      weight_is(&w->w_down, dim, hid), "%s: layer %d ffn", what, l);
		if (c->qkv_bias)
			CHECK(weight_is(&w->bq, q, 1) && weight_is(&w->bk, kv, 1) &&
			      weight_is(&w->bv, kv, 1), "%s: layer %d biases", what, l);
		else
			CHECK(!w->bq.data && !w->bk.data && !w->bv.data, "%s: layer %d biases bound", what, l);
	}
	CHECK(strlen(m->fingerprint.shape) == SF_FINGERPRINT_LEN &&
	      strspn(m->fingerprint.shape, "0123456789abcdef") == SF_FINGERPRINT_LEN &&
	      strlen(m->fingerprint.weights) == SF_FINGERPRINT_LEN &&
	      strspn(m->fingerprint.weights, "0123456789abcdef") == SF_FINGERPRINT_LEN,
	      "%s: fingerprint '%s' '%s'", what, m->fingerprint.shape, m->fingerprint.weights);
}

// --- the real models

static void test_mix4(void)
{
	struct sf_model m, m2;
	struct sf_err e = { 0 };
	char p1[4200], p5[4200];
	const char *shared = unit_env("SF_SHARED", NULL);
	int ret;

	ret = sf_model_open(&m, model1, &e);
	CHECK(ret == 0, "%s: %d %s", model1, ret, e.msg);
	if (ret)
		return;
	{
		const struct sf_config *c = &m.cfg;

		CHECK(c->arch == SF_ARCH_LLAMA && c->dim == 128 && c->hidden_dim == 384 &&
		      c->n_layers == 4 && c->n_heads == 4 && c->n_kv_heads == 2 && c->head_dim == 32 &&
		      c->vocab_size == 1024 && c->max_seq_len == 1024, "mix4-1m shape fields");
		CHECK(c->norm_eps == 1e-5f && c->rope_theta == 10000.0f && !c->rope_llama3,
		      "mix4-1m eps %g theta %g", c->norm_eps, c->rope_theta);
		CHECK(c->tie_embeddings && !c->qkv_bias && c->bos_id == 1 && c->n_eos == 1 &&
		      c->eos_ids[0] == 2 && c->sliding_window == 0, "mix4-1m tie/bias/bos/eos");
	}
	check_bound(&m, "mix4-1m");
	CHECK(m.embed.dtype == SF_DTYPE_BF16 && m.layers[3].w_down.dtype == SF_DTYPE_BF16,
	      "mix4-1m dtype");
	CHECK(m.st.ntensors == 38, "mix4-1m: %zu tensors", m.st.ntensors);
	CHECK(!strcmp(m.fingerprint.shape, MIX4_1M_FINGERPRINT), "mix4-1m fingerprint %s, pinned %s",
	      m.fingerprint.shape, MIX4_1M_FINGERPRINT);
	CHECK(!strcmp(m.fingerprint.weights, MIX4_1M_WEIGHTS), "mix4-1m weights %s, pinned %s",
	      m.fingerprint.weights, MIX4_1M_WEIGHTS);

	/* Stable: a second open gives the same. */
	ret = sf_model_open(&m2, model1, &e);
	CHECK(ret == 0 && !memcmp(&m.fingerprint, &m2.fingerprint, sizeof(m.fingerprint)),
	      "second open: %s", e.msg);
	sf_model_close(&m2);

	if (!shared) {
		fprintf(stderr, "SF_SHARED unset: shared models not tested\n");
		sf_model_close(&m);
		return;
	}
	snprintf(p1, sizeof(p1), "%s/models/mix4-1m", shared);
	snprintf(p5, sizeof(p5), "%s/models/mix4-5m", shared);
	if (is_dir(p1)) {
		ret = sf_model_open(&m2, p1, &e);
		CHECK(ret == 0, "%s: %s", p1, e.msg);
		if (!ret)
			CHECK(!memcmp(&m2.fingerprint, &m.fingerprint, sizeof(m.fingerprint)),
			      "shared mix4-1m fingerprint %s vs %s", m2.fingerprint.weights,
			      m.fingerprint.weights);
		sf_model_close(&m2);
	}
	if (is_dir(p5)) {
		ret = sf_model_open(&m2, p5, &e);
		CHECK(ret == 0, "%s: %s", p5, e.msg);
		if (!ret) {
			const struct sf_config *c = &m2.cfg;

			CHECK(c->dim == 256 && c->hidden_dim == 768 && c->n_layers == 6 &&
			      c->n_heads == 8 && c->n_kv_heads == 4 && c->head_dim == 32 &&
			      c->vocab_size == 1024 && c->tie_embeddings, "mix4-5m config");
			check_bound(&m2, "mix4-5m");
			CHECK(strcmp(m2.fingerprint.shape, m.fingerprint.shape), "mix4-5m and mix4-1m "
			      "share %s", m.fingerprint.shape);
		}
		sf_model_close(&m2);
	}
	sf_model_close(&m);
}

// --- config.json variants

static json_t *base_config(void)
{
	char p[4200];
	json_error_t je;
	json_t *c;

	snprintf(p, sizeof(p), "%s/config.json", model1);
	c = json_load_file(p, 0, &je);
	CHECK(c != NULL, "%s: %s", p, je.text);
	return c;
}

static void write_text(const char *path, const char *s)
{
	FILE *f = fopen(path, "w");

	CHECK(f && fputs(s, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
}

/* Loads cfg (consumed) as DIR/cfg/config.json. */
static int load_variant(json_t *cfg, struct sf_config *c, struct sf_err *e, char *path,
			size_t size)
{
	snprintf(path, size, "%s/cfg", tmpdir);
	mkdir(path, 0755);
	snprintf(path, size, "%s/cfg/config.json", tmpdir);
	CHECK(json_dump_file(cfg, path, JSON_INDENT(2)) == 0, "cannot write %s", path);
	json_decref(cfg);
	return sf_config_load(c, path, e);
}

/* base config with one key set (v consumed; NULL deletes the key) */
static json_t *with(json_t *cfg, const char *key, json_t *v)
{
	if (v)
		json_object_set_new(cfg, key, v);
	else
		json_object_del(cfg, key);
	return cfg;
}

/* sf_config_json's text of c (an image of a GGUF embeds it) parses back
 * into c, bit for bit. */
static void reads_back(const struct sf_config *c, const char *what)
{
	char *text = sf_config_json(c);
	struct sf_config back;
	struct sf_err e = { 0 };

	CHECK(text && sf_config_parse(&back, "config.json", text, strlen(text), &e) == 0 &&
	      !memcmp(&back, c, sizeof(*c)), "%s sf_config_json: '%s' reads back otherwise: %s",
	      what, text ? text : "(null)", e.msg);
	free(text);
}

static void test_config(void)
{
	struct sf_config c;
	struct sf_err e = { 0 };
	char path[4200];
	json_t *j;
	int ret;

#define VARIANT(cfg) load_variant(cfg, &c, &e, path, sizeof(path))
	/* Shape fields are required. */
	ret = VARIANT(with(base_config(), "hidden_size", NULL));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'hidden_size': missing");
	ret = VARIANT(with(base_config(), "vocab_size", json_null()));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'vocab_size': missing");
	ret = VARIANT(with(base_config(), "num_hidden_layers", json_string("4")));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'num_hidden_layers': a string, expected an integer");
	ret = VARIANT(with(base_config(), "hidden_size", json_integer(0)));
	CHECK_ERR(ret, SF_ELIMIT, &e, path, "'hidden_size': 0, expected 1..65536");
	ret = VARIANT(with(base_config(), "vocab_size", json_integer(5000000)));
	CHECK_ERR(ret, SF_ELIMIT, &e, path, "'vocab_size': 5000000, expected 1..4194304");
	ret = VARIANT(with(base_config(), "num_key_value_heads", json_integer(3)));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'num_attention_heads' 4 is not a multiple of 'num_key_value_heads' 3");
	ret = VARIANT(with(base_config(), "num_attention_heads", json_integer(3)));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'hidden_size' 128 is not a multiple of 'num_attention_heads' 3");
	ret = VARIANT(with(base_config(), "rms_norm_eps", json_real(-1)));
	CHECK_ERR(ret, SF_ELIMIT, &e, path, "'rms_norm_eps': -1");

	/* Architectures. */
	j = base_config();
	json_object_set_new(j, "architectures", json_pack("[s]", "GPT2LMHeadModel"));
	ret = VARIANT(j);
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, path, "architectures[0] 'GPT2LMHeadModel': unsupported architecture");
	j = with(base_config(), "architectures", NULL);
	ret = VARIANT(with(j, "model_type", json_string("qwen2")));
	CHECK(ret == 0 && c.arch == SF_ARCH_QWEN2 && c.qkv_bias, "model_type qwen2: %s", e.msg);
	/* Qwen3: q/k norms, no biases; head_dim's default is 128, not
	 * hidden / heads (a hidden_size no multiple of the heads is fine). */
	j = with(base_config(), "architectures", json_pack("[s]", "Qwen3ForCausalLM"));
	j = with(j, "head_dim", NULL);
	ret = VARIANT(with(j, "hidden_size", json_integer(130)));
	CHECK(ret == 0 && c.arch == SF_ARCH_QWEN3 && c.qk_norm && !c.qkv_bias && c.head_dim == 128,
	      "qwen3: %d %s", ret, e.msg);
	j = with(base_config(), "architectures", json_pack("[s]", "Qwen3ForCausalLM"));
	ret = VARIANT(with(j, "attention_bias", json_true()));
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, path, "'attention_bias': true unsupported");
	/* Mixtral: MixtralConfig's 8 experts, 2 a token, rope_theta 1e6; a
	 * top k above the count refused. */
	j = with(base_config(), "architectures", json_pack("[s]", "MixtralForCausalLM"));
	ret = VARIANT(with(j, "rope_theta", NULL));
	CHECK(ret == 0 && c.arch == SF_ARCH_MIXTRAL && c.n_experts == 8 && c.n_experts_used == 2 &&
	      c.rope_theta == 1e6f, "mixtral: %d %s theta %g", ret, e.msg, c.rope_theta);
	j = with(base_config(), "architectures", json_pack("[s]", "MixtralForCausalLM"));
	ret = VARIANT(with(j, "num_experts_per_tok", json_integer(9)));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'num_experts_per_tok' 9 is above 'num_local_experts' 8");
	ret = VARIANT(with(base_config(), "num_local_experts", json_integer(8)));
	CHECK(ret == 0 && c.n_experts == 0, "num_local_experts outside Mixtral: %d %s", ret, e.msg);
	/* Qwen2-MoE: Qwen2MoeConfig's 60 experts, 4 a token, not renormalised;
	 * the experts' width moe_intermediate_size, a shared expert; biases
	 * unless qkv_bias is false; only every layer a mixture. */
	j = with(base_config(), "architectures", json_pack("[s]", "Qwen2MoeForCausalLM"));
	j = with(j, "moe_intermediate_size", json_integer(64));
	j = with(j, "shared_expert_intermediate_size", json_integer(512));
	ret = VARIANT(json_deep_copy(j));
	CHECK(ret == 0 && c.arch == SF_ARCH_QWEN2_MOE && c.n_experts == 60 && c.n_experts_used == 4 &&
	      !c.norm_topk && c.hidden_dim == 64 && c.shared_hidden_dim == 512 && c.qkv_bias &&
	      !c.qk_norm, "qwen2_moe: %d %s", ret, e.msg);
	ret = VARIANT(with(json_deep_copy(j), "qkv_bias", json_false()));
	CHECK(ret == 0 && !c.qkv_bias, "qwen2_moe qkv_bias false: %d %s", ret, e.msg);
	ret = VARIANT(with(json_deep_copy(j), "decoder_sparse_step", json_integer(2)));
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, path, "'decoder_sparse_step': 2 unsupported");
	ret = VARIANT(with(json_deep_copy(j), "mlp_only_layers", json_pack("[i]", 0)));
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, path, "'mlp_only_layers': unsupported unless empty");
	ret = VARIANT(with(j, "moe_intermediate_size", NULL));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'moe_intermediate_size': missing");
	/* Qwen3-MoE: per-head q/k norms, head_dim from hidden / heads when
	 * absent (its config class has none), 128 experts, 8 a token */
	j = with(base_config(), "architectures", json_pack("[s]", "Qwen3MoeForCausalLM"));
	j = with(j, "head_dim", NULL);
	j = with(j, "norm_topk_prob", json_true());
	ret = VARIANT(with(j, "moe_intermediate_size", json_integer(96)));
	CHECK(ret == 0 && c.arch == SF_ARCH_QWEN3_MOE && c.qk_norm == SF_QK_NORM_HEAD &&
	      c.head_dim == 32 && c.n_experts == 128 && c.n_experts_used == 8 && c.norm_topk &&
	      c.hidden_dim == 96 && !c.shared_hidden_dim && !c.qkv_bias, "qwen3_moe: %d %s", ret,
	      e.msg);
	/* OLMoE: q/k norms over the whole projection, 64 experts, 8 a token,
	 * OlmoeConfig's eps 1e-5, clip_qkv null or above 0 */
	j = with(base_config(), "architectures", NULL);
	j = with(j, "model_type", json_string("olmoe"));
	j = with(j, "rms_norm_eps", NULL);
	ret = VARIANT(json_deep_copy(j));
	CHECK(ret == 0 && c.arch == SF_ARCH_OLMOE && c.qk_norm == SF_QK_NORM_ALL &&
	      c.n_experts == 64 && c.n_experts_used == 8 && !c.norm_topk && c.hidden_dim == 384 &&
	      c.norm_eps == 1e-5f && c.clip_qkv == 0.0f, "olmoe: %d %s", ret, e.msg);
	ret = VARIANT(with(json_deep_copy(j), "clip_qkv", json_real(8.0)));
	CHECK(ret == 0 && c.clip_qkv == 8.0f, "olmoe clip_qkv: %d %s", ret, e.msg);
	ret = VARIANT(with(json_deep_copy(j), "clip_qkv", json_integer(0)));
	CHECK_ERR(ret, SF_ELIMIT, &e, path, "'clip_qkv': 0, expected above 0");
	ret = VARIANT(with(json_deep_copy(j), "num_experts", json_integer(0)));
	CHECK_ERR(ret, SF_ELIMIT, &e, path, "'num_experts': 0, expected 1..1024");
	ret = VARIANT(with(j, "attention_bias", json_true()));
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, path, "'attention_bias': true unsupported");
	/* gpt-oss: GptOssConfig's 128 experts, 4 a token, the softmax over
	 * the top k (renormalised), eps 1e-5, rope_theta 150000, yarn of
	 * factor 32 over 4096 positions untruncated, biases, sinks, sliding
	 * even layers of 128, swiglu_limit 7 and alpha 1.702 when absent */
	j = with(base_config(), "architectures", json_pack("[s]", "GptOssForCausalLM"));
	j = with(j, "rms_norm_eps", NULL);
	j = with(j, "rope_theta", NULL);
	j = with(j, "attention_bias", NULL);
	ret = VARIANT(json_deep_copy(j));
	CHECK(ret == 0 && c.arch == SF_ARCH_GPT_OSS && c.n_experts == 128 &&
	      c.n_experts_used == 4 && c.norm_topk && c.hidden_dim == 384 && c.norm_eps == 1e-5f &&
	      c.rope_theta == 150000.0f && c.rope_yarn && c.rope_factor == 32.0f &&
	      c.rope_orig_max_pos == 4096 && !c.rope_truncate &&
	      c.rope_attn_factor == (float)(0.1 * log(32.0) + 1.0) && c.qkv_bias && c.o_bias &&
	      c.attn_sinks && c.moe_bias && c.sliding_window == 128 && c.layer_sliding[0] &&
	      !c.layer_sliding[1] && c.swiglu_limit == 7.0f && c.swiglu_alpha == 1.702f &&
	      c.layer_sliding[2] && c.max_seq_len == 1024, "gpt_oss: %d %s", ret, e.msg);
	ret = VARIANT(with(json_deep_copy(j), "attention_bias", json_false()));
	CHECK(ret == 0 && !c.qkv_bias && !c.o_bias, "gpt_oss attention_bias false: %d %s", ret,
	      e.msg);
	ret = VARIANT(with(json_deep_copy(j), "layer_types", json_pack("[s]", "full_attention")));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'layer_types': expected a list of 4 strings (num_hidden_layers)");
	ret = VARIANT(with(json_deep_copy(j), "layer_types", json_pack("[s,s,s,s]", "full_attention", "full_attention", "chunked_attention", "full_attention")));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'layer_types[2]': expected \"sliding_attention\" or \"full_attention\"");
	ret = VARIANT(with(json_deep_copy(j), "num_experts_per_tok", json_integer(129)));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'num_experts_per_tok' 129 is above 'num_local_experts' 128");
	ret = VARIANT(with(json_deep_copy(j), "rope_scaling", json_pack("{s:s}", "rope_type", "longrope")));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'rope_scaling.short_factor': expected a list of 16 numbers (rotated dimensions / 2)");
	ret = VARIANT(with(json_deep_copy(j), "rope_parameters", json_pack("{s:s}", "rope_type", "yarn")));
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, path, "'rope_parameters': unsupported (give rope_theta and rope_scaling)");
	ret = VARIANT(with(j, "swiglu_limit", json_integer(0)));
	CHECK_ERR(ret, SF_ELIMIT, &e, path, "'swiglu_limit': 0, expected above 0");
	/* Phi-3: Phi3Config's eps 1e-5; partial_rotary_factor 0.5 turns 16
	 * of head_dim 32; longrope's 8 factors each, the pretrained context
	 * the config's own key (factor 1024 / 256: attention factor
	 * sqrt(1 + ln 4 / ln 256)); the window in every layer, the context
	 * not cut to it; sf_config_json's text reads back the same */
	j = with(base_config(), "architectures", json_pack("[s]", "Phi3ForCausalLM"));
	j = with(j, "rms_norm_eps", NULL);
	j = with(j, "partial_rotary_factor", json_real(0.5));
	j = with(j, "sliding_window", json_integer(100));
	j = with(j, "original_max_position_embeddings", json_integer(256));
	j = with(j, "rope_scaling", json_pack("{s:s,s:[f,f,f,f,f,f,f,f],s:[f,f,f,f,f,f,f,f]}", "type",
					      "longrope", "short_factor", 1.0, 1.0, 1.0, 1.0, 1.5,
					      2.0, 2.0, 2.5, "long_factor", 1.0, 2.0, 3.0, 4.0, 5.0,
					      6.0, 7.0, 8.0));
	ret = VARIANT(json_deep_copy(j));
	CHECK(ret == 0 && c.arch == SF_ARCH_PHI3 && c.norm_eps == 1e-5f && c.head_dim == 32 &&
	      c.rope_dim == 16 && c.rope_longrope && c.n_rope_freqs == 8 &&
	      c.rope_freqs[7] == 2.5f && c.rope_freqs_long[7] == 8.0f && c.rope_orig_max_pos == 256 &&
	      c.rope_attn_factor == (float)sqrt(1 + log(4.0) / log(256.0)) &&
	      c.sliding_window == 100 && c.layer_sliding[0] && c.layer_sliding[3] &&
	      c.max_seq_len == 1024, "phi3: %d %s", ret, e.msg);
	reads_back(&c, "phi3");
	/* without its own original_max_position_embeddings: the context and
	 * rope_scaling's factor (1 by default: attention factor 1) */
	ret = VARIANT(with(json_deep_copy(j), "original_max_position_embeddings", NULL));
	CHECK(ret == 0 && c.rope_orig_max_pos == 1024 && c.rope_attn_factor == 1.0f,
	      "phi3 no original: %d %s", ret, e.msg);
	ret = VARIANT(with(json_deep_copy(j), "rope_freqs", json_pack("[f,f,f,f,f,f,f,f]", 1.0, 1.0,
					 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'rope_freqs': beside a longrope rope_scaling");
	ret = VARIANT(with(j, "partial_rotary_factor", json_real(1.5)));
	CHECK_ERR(ret, SF_ELIMIT, &e, path, "'partial_rotary_factor': 1.5, expected above 0 and at most 1");
	/* Gemma 3: Gemma3TextConfig's head_dim 256, eps 1e-6, theta 1e6,
	 * tied head, query_pre_attn_scalar 256, sliding layers of 4096 but
	 * every sixth, their base 10000, gains stored less one, sqrt(dim)
	 * on the embeddings; rope_scaling linear; its text reads back */
	j = with(base_config(), "architectures", json_pack("[s]", "Gemma3ForCausalLM"));
	j = with(j, "rms_norm_eps", NULL);
	j = with(j, "rope_theta", NULL);
	j = with(j, "tie_word_embeddings", NULL);
	j = with(j, "hidden_act", NULL);
	j = with(j, "num_hidden_layers", json_integer(7));
	j = with(j, "rope_scaling", json_pack("{s:s,s:f}", "rope_type", "linear", "factor", 8.0));
	ret = VARIANT(json_deep_copy(j));
	CHECK(ret == 0 && c.arch == SF_ARCH_GEMMA3 && c.head_dim == 256 && c.norm_eps == 1e-6f &&
	      c.rope_theta == 1e6f && c.tie_embeddings && c.attn_scalar == 256.0f &&
	      c.sliding_window == 4096 && c.layer_sliding[0] && c.layer_sliding[4] &&
	      !c.layer_sliding[5] && c.layer_sliding[6] && c.rope_theta_local == 10000.0f &&
	      c.norm_offset == 1.0f && c.embed_scale == (float)sqrt(128.0) && c.act_gelu &&
	      c.post_norms && c.qk_norm == SF_QK_NORM_HEAD && c.rope_linear == 8.0f,
	      "gemma3: %d %s", ret, e.msg);
	reads_back(&c, "gemma3");
	ret = VARIANT(with(json_deep_copy(j), "sliding_window_pattern", json_integer(2)));
	CHECK(ret == 0 && c.layer_sliding[0] && !c.layer_sliding[1] && c.layer_sliding[2],
	      "gemma3 pattern 2: %d %s", ret, e.msg);
	ret = VARIANT(with(json_deep_copy(j), "final_logit_softcapping", json_real(30.0)));
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, path, "'final_logit_softcapping': unsupported");
	ret = VARIANT(with(j, "hidden_activation", json_string("silu")));
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, path, "'hidden_activation': unsupported (only gelu_pytorch_tanh)");
	/* Gemma 2: Gemma2Config's head_dim 256, eps 1e-6, theta 10000, tied
	 * head, query_pre_attn_scalar 256, even layers sliding by 4096 on the
	 * global base, soft-capping at 50 and 30 (null: none), no q/k norms;
	 * its text reads back */
	j = with(base_config(), "architectures", json_pack("[s]", "Gemma2ForCausalLM"));
	j = with(j, "rms_norm_eps", NULL);
	j = with(j, "rope_theta", NULL);
	j = with(j, "tie_word_embeddings", NULL);
	j = with(j, "hidden_act", NULL);
	j = with(j, "num_hidden_layers", json_integer(3));
	ret = VARIANT(json_deep_copy(j));
	CHECK(ret == 0 && c.arch == SF_ARCH_GEMMA2 && c.head_dim == 256 && c.norm_eps == 1e-6f &&
	      c.rope_theta == 10000.0f && c.tie_embeddings && c.attn_scalar == 256.0f &&
	      c.sliding_window == 4096 && c.layer_sliding[0] && !c.layer_sliding[1] &&
	      c.layer_sliding[2] && c.rope_theta_local == 0.0f && c.attn_softcap == 50.0f &&
	      c.final_softcap == 30.0f && c.norm_offset == 1.0f && c.act_gelu && c.post_norms &&
	      c.qk_norm == SF_QK_NORM_NONE, "gemma2: %d %s", ret, e.msg);
	reads_back(&c, "gemma2");
	ret = VARIANT(with(json_deep_copy(j), "final_logit_softcapping", json_null()));
	CHECK(ret == 0 && c.final_softcap == 0.0f && c.attn_softcap == 50.0f,
	      "gemma2 without final soft-capping: %d %s", ret, e.msg);
	reads_back(&c, "gemma2 without final soft-capping");
	ret = VARIANT(with(j, "attn_logit_softcapping", json_real(-1.0)));
	CHECK_ERR(ret, SF_ELIMIT, &e, path, "'attn_logit_softcapping': -1, expected above 0");
	j = with(base_config(), "architectures", NULL);
	ret = VARIANT(with(j, "model_type", json_string("gemma")));
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, path, "model_type 'gemma'");
	j = with(base_config(), "architectures", NULL);
	ret = VARIANT(with(j, "model_type", NULL));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'architectures': missing");

	/* Unsupported features, by name. */
	ret = VARIANT(with(base_config(), "rope_scaling", json_pack("{s:s,s:f}", "type", "dynamic", "factor", 4.0)));
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, path, "'rope_scaling': type 'dynamic' unsupported (only llama3, yarn, longrope and linear)");
	ret = VARIANT(with(base_config(), "rope_scaling", json_pack("{s:s,s:f,s:f}", "type", "yarn", "factor", 4.0, "mscale", 0.7)));
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, path, "'rope_scaling.mscale': unsupported");
	ret = VARIANT(with(base_config(), "rope_scaling", json_pack("{s:s,s:f}", "rope_type", "linear", "factor", 2.0)));
	CHECK(ret == 0 && c.rope_linear == 2.0f, "linear rope_scaling: %d %s", ret, e.msg);
	ret = VARIANT(with(base_config(), "attention_bias", json_true()));
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, path, "'attention_bias': true unsupported");
	ret = VARIANT(with(base_config(), "mlp_bias", json_true()));
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, path, "'mlp_bias': true unsupported");
	ret = VARIANT(with(base_config(), "hidden_act", json_string("gelu")));
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, path, "'hidden_act': 'gelu' unsupported");
	ret = VARIANT(with(base_config(), "tie_word_embeddings", json_integer(1)));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'tie_word_embeddings': an integer, expected true or false");

	/* Accepted variants and defaults. */
	ret = VARIANT(with(base_config(), "rope_scaling",
			   json_pack("{s:s,s:f,s:f,s:f,s:i}", "rope_type", "llama3", "factor", 8.0,
				     "low_freq_factor", 1.0, "high_freq_factor", 4.0,
				     "original_max_position_embeddings", 8192)));
	CHECK(ret == 0 && c.rope_llama3 && c.rope_factor == 8 && c.rope_low_freq_factor == 1 &&
	      c.rope_high_freq_factor == 4 && c.rope_orig_max_pos == 8192, "llama3: %s", e.msg);
	ret = VARIANT(with(base_config(), "rope_scaling",
			   json_pack("{s:s,s:f,s:f}", "rope_type", "llama3", "factor", 8.0,
				     "low_freq_factor", 1.0)));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'rope_scaling.high_freq_factor': missing");
	ret = VARIANT(with(base_config(), "rope_scaling", json_null()));
	CHECK(ret == 0 && !c.rope_llama3, "rope_scaling null: %s", e.msg);
	j = with(base_config(), "head_dim", json_null());
	j = with(j, "num_key_value_heads", NULL);
	j = with(j, "rope_theta", NULL);
	j = with(j, "tie_word_embeddings", NULL);
	j = with(j, "bos_token_id", NULL);
	ret = VARIANT(with(j, "eos_token_id", json_pack("[i,i,i]", 2, 5, 7)));
	CHECK(ret == 0 && c.head_dim == 32 && c.n_kv_heads == 4 && c.rope_theta == 10000.0f &&
	      !c.tie_embeddings && c.bos_id == -1 && c.n_eos == 3 && c.eos_ids[2] == 7,
	      "defaults: %d %s", ret, e.msg);
	ret = VARIANT(with(base_config(), "head_dim", json_integer(64)));
	CHECK(ret == 0 && c.head_dim == 64, "head_dim 64: %s", e.msg);
	ret = VARIANT(with(base_config(), "head_dim", json_integer(33)));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'head_dim' 33 is odd");
	ret = VARIANT(with(base_config(), "eos_token_id", json_integer(1024)));
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "'eos_token_id': 1024, expected 0..1023");
	/* Mistral: context limited to the sliding window. */
	j = with(base_config(), "architectures", json_pack("[s]", "MistralForCausalLM"));
	j = with(j, "attention_bias", json_true());	/* MistralConfig ignores it */
	ret = VARIANT(with(j, "sliding_window", json_integer(256)));
	CHECK(ret == 0 && c.arch == SF_ARCH_MISTRAL && c.max_seq_len == 256 &&
	      c.sliding_window == 256, "mistral window: %d %s", ret, e.msg);
	j = with(base_config(), "architectures", json_pack("[s]", "MistralForCausalLM"));
	ret = VARIANT(with(j, "sliding_window", json_null()));
	CHECK(ret == 0 && c.max_seq_len == 1024 && !c.sliding_window, "mistral no window: %s", e.msg);

	/* The file itself. */
	snprintf(path, sizeof(path), "%s/cfg/config.json", tmpdir);
	write_text(path, "{\"hidden_size\": 128,");
	ret = sf_config_load(&c, path, &e);
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "not valid JSON");
	write_text(path, "[1]");
	ret = sf_config_load(&c, path, &e);
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "an array, expected a JSON object");
	write_text(path, "{\"hidden_size\": 1, \"hidden_size\": 2}");
	ret = sf_config_load(&c, path, &e);
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "duplicate");
	unlink(path);
	ret = sf_config_load(&c, path, &e);
	CHECK_ERR(ret, -ENOENT, &e, path, "cannot open");
#undef VARIANT
}

// --- edited copies of the model

struct tensors {
	struct sf_safetensors st;
	struct sf_tensor_out *t;	/* (n + 1): room for one more */
	size_t n;
};

static int load_tensors(struct tensors *ts)
{
	struct sf_err e = { 0 };
	int ret = sf_safetensors_open(&ts->st, model1, &e);

	CHECK(ret == 0, "%s: %s", model1, e.msg);
	if (ret)
		return ret;
	ts->n = ts->st.ntensors;
	ts->t = calloc(ts->n + 1, sizeof(*ts->t));
	for (size_t i = 0; i < ts->n; i++) {
		const struct sf_tensor *s = &ts->st.tensors[i];

		ts->t[i] = (struct sf_tensor_out){ .name = s->name, .dtype = s->dtype,
						   .ndim = s->ndim, .data = s->data };
		memcpy(ts->t[i].shape, s->shape, sizeof(s->shape));
	}
	return 0;
}

static struct sf_tensor_out *find_out(struct tensors *ts, const char *name)
{
	for (size_t i = 0; i < ts->n; i++)
		if (!strcmp(ts->t[i].name, name))
			return &ts->t[i];
	return NULL;
}

/* DIR/NAME with config.json from cfg (consumed; NULL: none) and
 * model.safetensors from t[0..n). Returns the directory. */
static const char *make_model(const char *name, json_t *cfg, const struct sf_tensor_out *t,
			      size_t n)
{
	static char dir[4200];
	char p[4300];
	struct sf_err e = { 0 };
	int ret;

	snprintf(dir, sizeof(dir), "%s/%s", tmpdir, name);
	mkdir(dir, 0755);
	snprintf(p, sizeof(p), "%s/config.json", dir);
	unlink(p);
	if (cfg) {
		CHECK(json_dump_file(cfg, p, JSON_INDENT(2)) == 0, "cannot write %s", p);
		json_decref(cfg);
	}
	snprintf(p, sizeof(p), "%s/model.safetensors", dir);
	ret = sf_safetensors_write(p, t, n, &e);
	CHECK(ret == 0, "write %s: %s", p, e.msg);
	return dir;
}

/* One byte of a copy's tensor NAME changed at offset at: the shape
 * fingerprint stays, the weights fingerprint changes when the byte is in a
 * sampled block (sf-formats(5), FINGERPRINTS), and only then. */
static void changed_byte(struct tensors *ts, const char *name, uint64_t at, int sampled)
{
	struct sf_tensor_out *o = find_out(ts, name), saved;
	struct sf_model m;
	struct sf_err e = { 0 };
	char label[64];

	if (!o)
		return;
	uint64_t n = o->shape[0] * (o->ndim > 1 ? o->shape[1] : 1) * sf_dtype_size(o->dtype);
	unsigned char *b = malloc(n);
	CHECK(b && at < n, "%s: %llu bytes", name, (unsigned long long)n);
	if (!b || at >= n) {
		free(b);
		return;
	}
	memcpy(b, o->data, n);
	b[at] ^= 0x01;
	saved = *o;
	o->data = b;
	snprintf(label, sizeof(label), "changed-%llu", (unsigned long long)at);
	const char *dir = make_model(label, base_config(), ts->t, ts->n);
	int ret = sf_model_open(&m, dir, &e);
	CHECK(ret == 0 && !strcmp(m.fingerprint.shape, MIX4_1M_FINGERPRINT), "%s byte %llu: %s",
	      name, (unsigned long long)at, e.msg);
	CHECK(ret || !strcmp(m.fingerprint.weights, MIX4_1M_WEIGHTS) == !sampled,
	      "%s byte %llu: weights fingerprint %s, sampled %d", name, (unsigned long long)at,
	      m.fingerprint.weights, sampled);
	sf_model_close(&m);
	*o = saved;
	free(b);
}

static void test_changed_weight(struct tensors *ts)
{
	/* 32 KiB, whole; 96 KiB and 256 KiB, 16 blocks of 4 KiB at
	 * i * floor((n - 4096) / 15): 6280 and 17203 bytes apart */
	changed_byte(ts, "model.layers.2.self_attn.q_proj.weight", 20000, 1);
	changed_byte(ts, "model.layers.3.mlp.down_proj.weight", 0, 1);
	changed_byte(ts, "model.layers.3.mlp.down_proj.weight", 98303, 0);
	changed_byte(ts, "model.embed_tokens.weight", 17203 + 4095, 1);
	changed_byte(ts, "model.embed_tokens.weight", 17203 + 4096, 0);
	changed_byte(ts, "model.norm.weight", 255, 1);
}

static void test_bad_models(void)
{
	struct tensors ts = { 0 };
	struct sf_model m;
	struct sf_err e = { 0 };
	struct sf_tensor_out *o, saved;
	const char *dir;
	char want[4400], fp_tied[SF_FINGERPRINT_LEN + 1];
	int ret;

	if (load_tensors(&ts))
		return;

	/* An unchanged copy opens with the same fingerprint. */
	dir = make_model("copy", base_config(), ts.t, ts.n);
	ret = sf_model_open(&m, dir, &e);
	CHECK(ret == 0 && !strcmp(m.fingerprint.shape, MIX4_1M_FINGERPRINT) &&
	      !strcmp(m.fingerprint.weights, MIX4_1M_WEIGHTS), "copy: %d %s", ret, e.msg);
	sf_model_close(&m);
	test_changed_weight(&ts);

	dir = make_model("noconfig", NULL, ts.t, ts.n);
	ret = sf_model_open(&m, dir, &e);
	snprintf(want, sizeof(want), "%s/config.json", dir);
	CHECK_ERR(ret, -ENOENT, &e, want, "No such file");
	CHECK(m.layers == NULL && m.st.ntensors == 0, "model not cleared on failure");
	sf_model_close(&m);

	dir = make_model("badjson", NULL, ts.t, ts.n);
	snprintf(want, sizeof(want), "%s/config.json", dir);
	write_text(want, "{\"architectures\": [\"LlamaForCausalLM\"]");
	ret = sf_model_open(&m, dir, &e);
	CHECK_ERR(ret, SF_EFORMAT, &e, want, "not valid JSON");

	dir = make_model("gpt2", with(base_config(), "architectures", json_pack("[s]", "GPT2LMHeadModel")),
			 ts.t, ts.n);
	ret = sf_model_open(&m, dir, &e);
	snprintf(want, sizeof(want), "%s/config.json", dir);
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, want, "'GPT2LMHeadModel': unsupported architecture");

	dir = make_model("dynamic", with(base_config(), "rope_scaling",
					 json_pack("{s:s,s:f}", "rope_type", "dynamic", "factor", 4.0)),
			 ts.t, ts.n);
	ret = sf_model_open(&m, dir, &e);
	snprintf(want, sizeof(want), "%s/config.json", dir);
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, want, "'rope_scaling'", "'dynamic'");

	/* A tensor missing: move it to the end and write one fewer. */
	o = find_out(&ts, "model.layers.2.mlp.up_proj.weight");
	CHECK(o != NULL, "no up_proj");
	if (o) {
		saved = *o;
		*o = ts.t[ts.n - 1];
		ts.t[ts.n - 1] = saved;
		dir = make_model("missing", base_config(), ts.t, ts.n - 1);
		ret = sf_model_open(&m, dir, &e);
		snprintf(want, sizeof(want), "%s/model.safetensors", dir);
		CHECK_ERR(ret, SF_EMISMATCH, &e, want,
			  "tensor 'model.layers.2.mlp.up_proj.weight': missing");
	}

	/* A tensor with the wrong shape (same bytes, dimensions swapped). */
	o = find_out(&ts, "model.layers.1.self_attn.k_proj.weight");
	CHECK(o != NULL, "no k_proj");
	if (o) {
		saved = *o;
		o->shape[0] = 128;
		o->shape[1] = 64;
		dir = make_model("shape", base_config(), ts.t, ts.n);
		ret = sf_model_open(&m, dir, &e);
		snprintf(want, sizeof(want), "%s/model.safetensors", dir);
		CHECK_ERR(ret, SF_EMISMATCH, &e, want, "tensor 'model.layers.1.self_attn.k_proj.weight'",
			  "shape [128, 64], expected [64, 128]");
		o->shape[0] = 64 * 128;
		o->ndim = 1;
		dir = make_model("shape1", base_config(), ts.t, ts.n);
		ret = sf_model_open(&m, dir, &e);
		CHECK_ERR(ret, SF_EMISMATCH, &e, "shape [8192], expected [64, 128]");
		*o = saved;
	}

	/* A config that does not match the file: 4 kv heads, not 2. */
	dir = make_model("kv", with(base_config(), "num_key_value_heads", json_integer(4)), ts.t, ts.n);
	ret = sf_model_open(&m, dir, &e);
	CHECK_ERR(ret, SF_EMISMATCH, &e, "tensor 'model.layers.0.self_attn.k_proj.weight'",
		  "shape [64, 128], expected [128, 128]");

	/* Qwen2 needs q/k/v biases the file does not have. */
	dir = make_model("qwen", with(base_config(), "architectures", json_pack("[s]", "Qwen2ForCausalLM")),
			 ts.t, ts.n);
	ret = sf_model_open(&m, dir, &e);
	CHECK_ERR(ret, SF_EMISMATCH, &e, "tensor 'model.layers.0.self_attn.q_proj.bias': missing");

	/* Qwen3 needs the q/k norms the file does not have. */
	dir = make_model("qwen3", with(with(base_config(), "architectures",
					    json_pack("[s]", "Qwen3ForCausalLM")),
				       "head_dim", json_integer(32)), ts.t, ts.n);
	ret = sf_model_open(&m, dir, &e);
	CHECK_ERR(ret, SF_EMISMATCH, &e, "tensor 'model.layers.0.self_attn.q_norm.weight': missing");

	/* An unused tensor would be silently ignored: refused. */
	o = &ts.t[ts.n];
	*o = *find_out(&ts, "model.norm.weight");
	o->name = "model.layers.0.self_attn.o_proj.bias";
	dir = make_model("extra", base_config(), ts.t, ts.n + 1);
	ret = sf_model_open(&m, dir, &e);
	CHECK_ERR(ret, SF_EUNSUPPORTED, &e, "tensor 'model.layers.0.self_attn.o_proj.bias': not part of");
	o->name = "model.layers.0.self_attn.rotary_emb.inv_freq";	/* ignored, as by HF */
	dir = make_model("invfreq", base_config(), ts.t, ts.n + 1);
	ret = sf_model_open(&m, dir, &e);
	CHECK(ret == 0, "inv_freq: %s", e.msg);
	sf_model_close(&m);

	/* lm_head: untied and absent; untied and present; tied and present. */
	dir = make_model("untied", with(base_config(), "tie_word_embeddings", json_false()), ts.t, ts.n);
	ret = sf_model_open(&m, dir, &e);
	CHECK_ERR(ret, SF_EMISMATCH, &e, "tensor 'lm_head.weight': missing");
	*o = *find_out(&ts, "model.embed_tokens.weight");
	o->name = "lm_head.weight";
	dir = make_model("head", with(base_config(), "tie_word_embeddings", json_false()), ts.t, ts.n + 1);
	ret = sf_model_open(&m, dir, &e);
	CHECK(ret == 0, "untied with lm_head: %s", e.msg);
	if (!ret) {
		check_bound(&m, "untied");
		CHECK(m.lm_head.data != m.embed.data && !m.cfg.tie_embeddings, "lm_head is embed");
		CHECK(strcmp(m.fingerprint.shape, MIX4_1M_FINGERPRINT), "untied fingerprint equals tied");
	}
	sf_model_close(&m);
	dir = make_model("tiedhead", base_config(), ts.t, ts.n + 1);
	ret = sf_model_open(&m, dir, &e);
	CHECK(ret == 0 && m.lm_head.data == m.embed.data, "tied with lm_head: %s", e.msg);
	snprintf(fp_tied, sizeof(fp_tied), "%s", m.fingerprint.shape);
	CHECK(!strcmp(fp_tied, MIX4_1M_FINGERPRINT), "tied + lm_head fingerprint %s", fp_tied);
	sf_model_close(&m);

	/* Mixed dtypes: the embeddings widened to F32 (bf16 is the top half). */
	o = find_out(&ts, "model.embed_tokens.weight");
	if (o) {
		uint64_t n = o->shape[0] * o->shape[1];
		unsigned char *f = malloc(n * 4);
		const unsigned char *b = o->data;

		for (uint64_t i = 0; i < n; i++) {
			f[4 * i] = f[4 * i + 1] = 0;
			f[4 * i + 2] = b[2 * i];
			f[4 * i + 3] = b[2 * i + 1];
		}
		saved = *o;
		o->dtype = SF_DTYPE_F32;
		o->data = f;
		dir = make_model("mixed", base_config(), ts.t, ts.n);
		ret = sf_model_open(&m, dir, &e);
		CHECK(ret == 0 && m.embed.dtype == SF_DTYPE_F32 && m.lm_head.dtype == SF_DTYPE_F32 &&
		      m.layers[0].wq.dtype == SF_DTYPE_BF16, "mixed dtypes: %s", e.msg);
		CHECK(ret || strcmp(m.fingerprint.shape, MIX4_1M_FINGERPRINT), "dtype not in fingerprint");
		sf_model_close(&m);
		*o = saved;
		free(f);
	}

	free(ts.t);
	sf_safetensors_close(&ts.st);
}

// --- models made by mkmodel, when the fixture is built

static void test_mkmodel(void)
{
	char dir[4200];
	struct sf_model m;
	struct sf_err e = { 0 };
	int ret;

	if (unit_mkmodel(tmpdir, "mk-qwen", "--arch qwen2 --shards 3 --no-tie --dtype f16 "
			 "--hidden 64 --heads 4 --kv-heads 1 --layers 2 --vocab 300 --seed 9", dir,
			 sizeof(dir), "mkmodel models"))
		return;
	ret = sf_model_open(&m, dir, &e);
	CHECK(ret == 0, "%s: %s", dir, e.msg);
	if (!ret) {
		CHECK(m.cfg.arch == SF_ARCH_QWEN2 && m.cfg.qkv_bias && !m.cfg.tie_embeddings &&
		      m.cfg.n_kv_heads == 1 && m.st.nfiles == 3 && m.embed.dtype == SF_DTYPE_F16,
		      "mkmodel qwen2 config");
		check_bound(&m, "mkmodel qwen2");
	}
	sf_model_close(&m);
}

int main(void)
{
	const char *root = unit_env("SF_ROOT", ".");
	const char *base = unit_env("SF_TMP", "/tmp");

	snprintf(model1, sizeof(model1), "%s/models/mix4-1m", root);
	if (!is_dir(model1))
		unit_skip("models/mix4-1m not found (SF_ROOT unset?)");
	snprintf(tmpdir, sizeof(tmpdir), "%s/test_model.%d", base, (int)getpid());
	if (mkdir(tmpdir, 0755) && errno != EEXIST) {
		fprintf(stderr, "cannot create %s: %s\n", tmpdir, strerror(errno));
		return 1;
	}
	test_mix4();
	test_config();
	test_bad_models();
	test_mkmodel();
	return unit_exit();
}
