/* Unit test of sf_config_from_gguf (lib/common/formats/config.c): a
 * qwen2 GGUF's metadata built byte by byte (gguf_build.h) read into a
 * config, each refusal with the key it names, then the shared mix4-5m
 * converted by tests/bench/llamacpp/hf2gguf.py (llama.cpp's gguf-py),
 * whose config must equal the one config.json gives and whose tensors
 * hold the safetensors' bytes (q and k rows where sf_gguf_rope_row says). That last part is
 * skipped (exit 77) without gguf-py or ../shared. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/config.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "gguf_build.h"
#include "ggufpy.h"
#include "unit.h"

static const char *tmpdir;

/* Which key of the valid file to change: none, or one of these; the
 * MOE ones make it a qwen2moe file. */
enum change {
	NONE, ARCH_GEMMA, NO_BLOCKS, EXPERTS, LINEAR, YARN, HEADS_7, ROPE_DIMS, ROPE_ODD, BIG_BOS,
	UNTIED, LONG_ONLY, MOE,
	MOE_TOPK, MOE_NO_EXPERTS, MOE_SCALE
};

/* ARCH.NAME of the file's architecture as a u32 key. */
static void kv_u32(struct gb *b, const char *arch, const char *name, uint32_t v)
{
	char key[96];
	snprintf(key, sizeof(key), "%s.%s", arch, name);
	gb_kv_u32(b, key, v);
}

/* A qwen2 file: 256 wide, 768 FFN, 3 layers, 8/2 heads, a vocabulary of 3
 * tokens from the token list, eps 1e-5, theta 1e6, BOS 1, EOS 2, EOT 0.
 * qwen2moe: 8 experts of 64, 2 a token, a shared one of 128. */
static void qwen2_file(struct gb *b, enum change ch)
{
	uint64_t ne[1] = { 32 };
	int moe = ch >= MOE;
	const char *a = moe ? "qwen2moe" : "qwen2";
	int nkv = ch == NO_BLOCKS ? 9 : ch == YARN ? 12 :
		  ch == EXPERTS || ch == LINEAR || ch == ROPE_DIMS || ch == ROPE_ODD ? 11 :
		  ch == MOE_NO_EXPERTS ? 12 : ch == MOE_SCALE ? 15 : moe ? 14 : 10;
	char key[96];

	b->n = 0;
	gb_header(b, 3, ch == UNTIED || ch == LONG_ONLY, (uint64_t)nkv);
	gb_kv_str(b, "general.architecture", ch == ARCH_GEMMA ? "gemma" : a);
	kv_u32(b, a, "embedding_length", 256);
	kv_u32(b, a, "feed_forward_length", 768);
	if (ch != NO_BLOCKS)
		kv_u32(b, a, "block_count", 3);
	kv_u32(b, a, "attention.head_count", ch == HEADS_7 ? 7 : 8);
	kv_u32(b, a, "attention.head_count_kv", 2);
	kv_u32(b, a, "context_length", 4096);
	snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon", a);
	gb_key(b, key, 6);
	gb_u32(b, 0x3727c5acu);	/* 1e-5f */
	gb_key(b, "tokenizer.ggml.tokens", 9);
	gb_u32(b, 8);
	gb_u64(b, 3);
	gb_str(b, "a");
	gb_str(b, "b");
	gb_str(b, "c");
	gb_kv_u32(b, "tokenizer.ggml.bos_token_id", ch == BIG_BOS ? 3 : 1);
	if (ch == EXPERTS)
		gb_kv_u32(b, "qwen2.expert_count", 8);
	if (moe && ch != MOE_NO_EXPERTS) {
		kv_u32(b, a, "expert_count", 8);
		kv_u32(b, a, "expert_used_count", ch == MOE_TOPK ? 9 : 2);
	}
	if (moe) {
		kv_u32(b, a, "expert_feed_forward_length", 64);
		kv_u32(b, a, "expert_shared_feed_forward_length", 128);
	}
	if (ch == MOE_SCALE) {
		gb_key(b, "qwen2moe.expert_weights_scale", 6);
		gb_u32(b, 0x40000000u);	/* 2.0f */
	}
	if (ch == LINEAR || ch == YARN)
		gb_kv_str(b, "qwen2.rope.scaling.type", ch == YARN ? "yarn" : "linear");
	if (ch == YARN) {
		gb_key(b, "qwen2.rope.scaling.factor", 6);
		gb_u32(b, 0x40800000u);	/* 4.0f */
	}
	if (ch == ROPE_DIMS || ch == ROPE_ODD)
		gb_kv_u32(b, "qwen2.rope.dimension_count", ch == ROPE_ODD ? 15 : 16);
	if (ch == UNTIED)
		gb_tensor(b, "output.weight", 1, ne, 0, 0);
	if (ch == LONG_ONLY)	/* head_dim / 2 LongRoPE factors, the short ones missing */
		gb_tensor(b, "rope_factors_long.weight", 1, (uint64_t[1]){ 16 }, 0, 0);
	gb_pad(b, 32);
	if (ch == UNTIED)
		gb_bytes(b, (unsigned char[128]){ 0 }, 128);
	for (int i = 0; ch == LONG_ONLY && i < 16; i++)
		gb_u32(b, 0x3f800000u);	/* 1.0f */
}

static int config_of(const struct gb *b, struct sf_config *c, struct sf_err *e)
{
	const char *path = unit_write_file(tmpdir, "config.gguf", b->p, b->n);
	struct sf_gguf g;
	int ret = sf_gguf_open(&g, path, e);

	CHECK(ret == 0, "%s", e->msg);
	if (ret)
		return ret;
	ret = sf_config_from_gguf(c, &g, e);
	sf_gguf_close(&g);
	return ret;
}

static void refused_at(int line, enum change ch, int code, const char *want)
{
	struct gb b = { 0 };
	struct sf_config c;
	struct sf_err e = { 0 };
	int ret;

	qwen2_file(&b, ch);
	ret = config_of(&b, &c, &e);
	CHECK(ret == code && strstr(e.msg, want) && c.dim == 0,
	      "line %d: returned %d, expected %d; message '%s', expected '%s'", line, ret, code,
	      e.msg, want);
	free(b.p);
}
#define REFUSED(ch, code, want) refused_at(__LINE__, ch, code, want)

static void test_built(void)
{
	struct gb b = { 0 };
	struct sf_config c;
	struct sf_err e;

	qwen2_file(&b, NONE);
	CHECK(config_of(&b, &c, &e) == 0, "%s", e.msg);
	CHECK(c.arch == SF_ARCH_QWEN2 && c.dim == 256 && c.hidden_dim == 768 && c.n_layers == 3 &&
	      c.n_heads == 8 && c.n_kv_heads == 2 && c.head_dim == 32 && c.vocab_size == 3 &&
	      c.max_seq_len == 4096 && c.qkv_bias && c.tie_embeddings, "shape");
	CHECK(c.norm_eps == 1e-5f && c.rope_theta == 10000.0f && c.bos_id == 1 && c.n_eos == 0,
	      "eps %g, theta %g, bos %d, %d eos", (double)c.norm_eps, (double)c.rope_theta,
	      c.bos_id, c.n_eos);
	qwen2_file(&b, UNTIED);
	CHECK(config_of(&b, &c, &e) == 0 && !c.tie_embeddings, "output.weight: untied");
	/* the expert keys; llama.cpp's qwen2moe graph never renormalises */
	qwen2_file(&b, MOE);
	CHECK(config_of(&b, &c, &e) == 0, "%s", e.msg);
	CHECK(c.arch == SF_ARCH_QWEN2_MOE && c.n_experts == 8 && c.n_experts_used == 2 &&
	      c.hidden_dim == 64 && c.shared_hidden_dim == 128 && !c.norm_topk && c.qkv_bias &&
	      !c.rope_interleaved, "qwen2moe: arch %d, %d experts, %d used, width %d, shared %d",
	      (int)c.arch, c.n_experts, c.n_experts_used, c.hidden_dim, c.shared_hidden_dim);
	/* YaRN as llama.cpp computes it: the correction range rounded out,
	 * the original context the file's when no key gives it */
	qwen2_file(&b, YARN);
	CHECK(config_of(&b, &c, &e) == 0, "%s", e.msg);
	CHECK(c.rope_yarn && c.rope_truncate && c.rope_factor == 4.0f && c.rope_orig_max_pos == 4096 &&
	      c.rope_beta_fast == 32.0f && c.rope_beta_slow == 1.0f &&
	      fabsf(c.rope_attn_factor - (float)(0.1 * log(4.0) + 1.0)) < 1e-6f,
	      "yarn: factor %g, original %d, attention factor %g", (double)c.rope_factor,
	      c.rope_orig_max_pos, (double)c.rope_attn_factor);
	/* linear RoPE scaling: every frequency over the factor (1 when absent) */
	qwen2_file(&b, LINEAR);
	CHECK(config_of(&b, &c, &e) == 0 && c.rope_linear == 1.0f, "linear: %g (%s)",
	      (double)c.rope_linear, e.msg);
	/* RoPE on the first 16 of each head's 32 dimensions (Phi-3's partial
	 * rotation) */
	qwen2_file(&b, ROPE_DIMS);
	CHECK(config_of(&b, &c, &e) == 0 && c.rope_dim == 16 && c.head_dim == 32,
	      "rope.dimension_count 16: %d of %d (%s)", c.rope_dim, c.head_dim, e.msg);
	free(b.p);

	REFUSED(ARCH_GEMMA, SF_EUNSUPPORTED,
		"key 'general.architecture': 'gemma' unsupported (expected llama, qwen2, qwen3, "
		"phi3, gemma2, gemma3, qwen2moe, qwen3moe, olmoe or gpt-oss)");
	REFUSED(NO_BLOCKS, -ENOENT, "key 'qwen2.block_count': missing");
	REFUSED(EXPERTS, SF_EUNSUPPORTED, "key 'qwen2.expert_count': 8, experts in architecture "
		"qwen2 unsupported");
	REFUSED(MOE_TOPK, SF_EFORMAT, "key 'qwen2moe.expert_used_count' 9 is above "
		"'qwen2moe.expert_count' 8");
	REFUSED(MOE_NO_EXPERTS, -ENOENT, "key 'qwen2moe.expert_count': missing");
	REFUSED(MOE_SCALE, SF_EUNSUPPORTED, "key 'qwen2moe.expert_weights_scale': 2 unsupported");

	REFUSED(HEADS_7, SF_EFORMAT, "'embedding_length' 256 is not a multiple of 'attention.head_count' 7");
	REFUSED(ROPE_ODD, SF_EUNSUPPORTED, "'qwen2.rope.dimension_count' 15, expected an even "
		"number up to the key length 32");
	REFUSED(BIG_BOS, SF_EFORMAT, "key 'tokenizer.ggml.bos_token_id': 3, expected 0..2");
	REFUSED(LONG_ONLY, SF_EFORMAT, "tensor 'rope_factors_long.weight': without its long or "
		"short twin");
}

/* mix4-5m through hf2gguf.py: the same config as its config.json. */
static void test_mix4_5m(const char *py)
{
	char model[4200], json[4300], out[4200], args[8600];
	struct sf_config want, got;
	struct sf_gguf g;
	struct sf_err e;
	int ret;

	snprintf(model, sizeof(model), "%s/models/mix4-5m", unit_env("SF_SHARED", "../shared"));
	snprintf(json, sizeof(json), "%s/config.json", model);
	snprintf(out, sizeof(out), "%s/mix4-5m.gguf", tmpdir);
	snprintf(args, sizeof(args), "'%s' '%s' --outtype bf16 >/dev/null", model, out);
	CHECK(unit_gguf_py_run(py, "tests/bench/llamacpp/hf2gguf.py", args) == 0,
	      "hf2gguf.py %s failed", model);
	CHECK(sf_config_load(&want, json, &e) == 0, "%s", e.msg);
	ret = sf_gguf_open(&g, out, &e);
	CHECK(ret == 0, "%s", e.msg);
	if (ret)
		return;
	CHECK(sf_config_from_gguf(&got, &g, &e) == 0, "%s", e.msg);
	want.rope_interleaved = 1;	/* llama.cpp's order of the q and k rows */
	CHECK(!memcmp(&got, &want, sizeof(got)),
	      "differs: dim %d/%d ffn %d/%d layers %d/%d heads %d/%d kv %d/%d head_dim %d/%d vocab %d/%d "
	      "ctx %d/%d eps %g/%g theta %g/%g tie %d/%d bos %d/%d eos %d:%d/%d:%d",
	      got.dim, want.dim, got.hidden_dim, want.hidden_dim, got.n_layers, want.n_layers,
	      got.n_heads, want.n_heads, got.n_kv_heads, want.n_kv_heads, got.head_dim,
	      want.head_dim, got.vocab_size, want.vocab_size, got.max_seq_len, want.max_seq_len,
	      (double)got.norm_eps, (double)want.norm_eps, (double)got.rope_theta,
	      (double)want.rope_theta, got.tie_embeddings, want.tie_embeddings, got.bos_id,
	      want.bos_id, got.n_eos, got.eos_ids[0], want.n_eos, want.eos_ids[0]);
	/* the config.json an image of the file embeds reads back the same */
	char *text = sf_config_json(&got);
	struct sf_config back;
	CHECK(text && sf_config_parse(&back, "config.json", text, strlen(text), &e) == 0 &&
	      !memcmp(&back, &got, sizeof(got)), "sf_config_json: '%s' reads back otherwise: %s",
	      text ? text : "(null)", e.msg);
	free(text);
	/* every tensor of the model is there; the embedding's and a down
	 * projection's BF16 bytes the safetensors' own */
	CHECK(g.ntensors == 2 + 9 * (size_t)want.n_layers, "%zu tensors", g.ntensors);
	struct sf_safetensors st;
	CHECK(sf_safetensors_open(&st, model, &e) == 0, "%s", e.msg);
	const char *pairs[2][2] = { { "token_embd.weight", "model.embed_tokens.weight" },
				    { "blk.5.ffn_down.weight", "model.layers.5.mlp.down_proj.weight" } };
	for (int i = 0; i < 2; i++) {
		const struct sf_gguf_tensor *t = sf_gguf_tensor(&g, pairs[i][0]);
		const struct sf_tensor *s = sf_safetensors_find(&st, pairs[i][1]);
		CHECK(t && s && t->type == SF_GGML_BF16 && t->n_dims == 2 &&
		      t->ne[0] == s->shape[1] && t->ne[1] == s->shape[0] && t->nbytes == s->nbytes &&
		      !memcmp(t->data, s->data, s->nbytes), "%s differs from %s", pairs[i][0],
		      pairs[i][1]);
	}
	/* q and k: every Hugging Face row where sf_gguf_rope_row says */
	const char *qk[2][2] = { { "blk.2.attn_q.weight", "model.layers.2.self_attn.q_proj.weight" },
				 { "blk.2.attn_k.weight", "model.layers.2.self_attn.k_proj.weight" } };
	for (int i = 0; i < 2; i++) {
		const struct sf_gguf_tensor *t = sf_gguf_tensor(&g, qk[i][0]);
		const struct sf_tensor *s = sf_safetensors_find(&st, qk[i][1]);
		size_t row = (size_t)want.dim * 2, bad = 0;

		CHECK(t && s && t->nbytes == s->nbytes && s->shape[0] % (uint64_t)want.head_dim == 0,
		      "%s", qk[i][0]);
		for (uint64_t r = 0; t && s && t->nbytes == s->nbytes && r < s->shape[0]; r++)
			bad += !!memcmp((const char *)t->data + sf_gguf_rope_row(r, (uint64_t)want.head_dim) * row,
					(const char *)s->data + r * row, row);
		CHECK(t && s && !bad, "%s: %zu rows not where sf_gguf_rope_row puts them", qk[i][0], bad);
	}
	sf_safetensors_close(&st);
	sf_gguf_close(&g);
	remove(out);
}

int main(void)
{
	const char *py = unit_gguf_py();
	char model[4200];
	struct stat sb;

	tmpdir = unit_env("SF_TMP", "/tmp");
	test_built();
	if (unit_failures)
		return unit_exit();
	snprintf(model, sizeof(model), "%s/models/mix4-5m/config.json",
		 unit_env("SF_SHARED", "../shared"));
	if (!py)
		unit_skip(UNIT_NO_GGUF_PY ": mix4-5m's GGUF not checked");
	if (stat(model, &sb))
		unit_skip("../shared absent: mix4-5m's GGUF not checked");
	test_mix4_5m(py);
	return unit_exit();
}
