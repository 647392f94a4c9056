/* The least --ram of sf-run for an image (ram.h): the decoder set up as
 * sf-run sets it up by default, its memory figures read back. */
#include "common/ram.h"

#include "base/pool.h"
#include "common/device.h"
#include "engine/forward.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"
#include "formats/image.h"
#include "formats/model.h"

int sf_cli_ram_least(const char *path, int threads, struct sf_sparse_memory *mem,
		     struct sf_err *e)
{
	struct sf_image img = { 0 };
	struct sf_model m = { 0 };
	struct sf_tokenizer *tok = NULL;
	struct sf_pool *pool = NULL;
	struct sf_sparse *sp = NULL;
	struct sf_runstate st = { 0 };
	struct sf_sampler smp = { 0 };
	struct sf_sparse_opts so;
	double peak = 0, iops = 0, buffered = 0;
	int ret;

	if ((ret = sf_image_open_flags(&img, path, SF_IMAGE_OPEN_EMBED_ON_FLASH, e)) ||
	    (ret = sf_image_model(&img, &m, e)) || (ret = sf_tokenizer_open_image(&tok, &img, e)))
		goto out;
	if ((ret = sf_pool_create(&pool, threads))) {
		ret = sf_err_set(e, ret, "thread pool of %d: %s", threads, sf_strerror(ret));
		goto out;
	}
	int ctx = sf_config_default_ctx(&m.cfg);
	int batch = SF_RUN_DEFAULT_BATCH < ctx ? SF_RUN_DEFAULT_BATCH : ctx;
	/* the state and sampler sf-run holds when it sets up the decoder: the
	 * pages they touch are in the resident set it measures */
	struct sf_state_opts sto = { .seq_len = ctx, .batch = batch, .kv_k = SF_KV_F16,
				     .kv_v = SF_KV_F16, .last_logits = 1 };
	if ((ret = sf_state_init_opts(&st, &m.cfg, &sto, e)) ||
	    (ret = sf_sampler_init(&smp, m.cfg.vocab_size, 0.8f, 0.95f, 42, e)))
		goto out;
	sf_sparse_opts_default(&so);
	/* what sf-run's open_sparse sets for a generation at the defaults */
	sf_cli_kv_opts(&so, &st, &m.cfg, SF_RUN_KV_LEAST < ctx ? SF_RUN_KV_LEAST : ctx);
	so.kv_positions = so.kv_least;	/* no --ram here: the least RAM's positions */
	so.max_tokens = (uint64_t)ctx;
	so.prefetch = 0;	/* the budget that cannot hold read-ahead's buffers goes without */
	so.tokens = batch;
	if ((ret = sf_device_load(path, &peak, &iops, &buffered, e)) < 0)
		goto out;
	ret = 0;
	so.buffered = buffered > peak && peak > 0;
	so.device_peak = peak;
	so.device_iops = iops;
	if ((ret = sf_sparse_open(&sp, &img, &m, pool, &so, e)))
		goto out;
	sf_sparse_memory(sp, mem);
	mem->process += SF_SPARSE_RUN_TO_RUN_BYTES;
	mem->total += SF_SPARSE_RUN_TO_RUN_BYTES;
out:
	sf_sparse_close(sp);
	sf_sampler_free(&smp);
	sf_state_free(&st);
	sf_pool_destroy(pool);
	sf_tokenizer_close(tok);
	sf_model_close(&m);
	sf_image_close(&img);
	return ret;
}

void sf_cli_kv_opts(struct sf_sparse_opts *so, const struct sf_runstate *st,
		    const struct sf_config *cfg, int least)
{
	struct sf_state_opts o = { .seq_len = st->seq_len, .batch = st->batch,
				   .last_logits = st->logit_rows < st->batch };
	so->state_bytes = sf_state_buffer_bytes(cfg, &o);
	sf_state_kv_cost(cfg, st->batch, st->kv_k, st->kv_v, &so->kv_cost);
	so->kv_positions = (uint32_t)st->seq_len;
	so->kv_least = (uint32_t)least;
}
