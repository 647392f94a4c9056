/* Opening a model and its chat template for sf-run and sf-serve: see
 * model.h. */
#include "common/model.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"
#include "engine/kernels_qrows.h"

void sf_model_opts_default(struct sf_model_opts *o)
{
	*o = (struct sf_model_opts){ .kv_k = SF_KV_F16, .kv_v = SF_KV_F16, .chat_template = -1 };
}

/* --chat-template NAME: a usage error lists the names. */
static int chat_template_opt(const char *name)
{
	char list[512] = "";
	int id = sf_chat_find(name);

	if (id >= 0)
		return id;
	for (int i = 0; i < sf_chat_count(); i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "",
			 sf_chat_name(i));
	sf_usage_error("--chat-template: '%s' is not one of %s", name, list);
}

int sf_model_opt(struct sf_model_opts *o, int key, const char *arg)
{
	switch (key) {
	case 'm': o->model_dir = sf_opt_path("--model", arg); return 1;
	case 'c': o->ctx = (int)sf_opt_u64("--ctx-size", arg, 1, 1u << 24); return 1;
	case SF_OPT_CACHE_TYPE_K:
	case SF_OPT_CACHE_TYPE_V:
		if (sf_kv_type_parse(arg, key == SF_OPT_CACHE_TYPE_K ? &o->kv_k : &o->kv_v))
			sf_usage_error("--cache-type-%c: '%s' is not f32, f16 or q8_0",
				       key == SF_OPT_CACHE_TYPE_K ? 'k' : 'v', arg);
		return 1;
	case SF_OPT_CHAT_TEMPLATE: o->chat_template = chat_template_opt(arg); return 1;
	}
	return 0;
}

void sf_model_opts_operands(struct sf_model_opts *o, int argc, char **argv)
{
	if (optind < argc)
		o->image = argv[optind++];
	if (optind < argc)
		sf_usage_error("unexpected argument '%s'", argv[optind]);
	if (!o->model_dir && !o->image)
		sf_usage_error("--model MODEL is required");
	if (o->model_dir && o->image)
		sf_usage_error("--model MODEL and IMAGE cannot be combined");
}

void sf_cli_llama_names(int argc, char **argv, const struct sf_cmd *cmd)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
		const char *a = argv[i];
		const struct sf_opt *p = NULL;
		if (!strcmp(a, "-cnv")) {
			argv[i] = (char *)"--conversation";
			continue;
		}
		if (!strcmp(a, "-ctk") || !strcmp(a, "-ctv")) {
			argv[i] = (char *)(a[3] == 'k' ? "--cache-type-k" : "--cache-type-v");
			i++;
			continue;
		}
		/* skip the value of an option that takes one */
		if (a[0] == '-' && a[1] && !a[2])
			p = sf_cli_opt(cmd, (unsigned char)a[1]);
		else if (!strncmp(a, "--", 2) && !strchr(a, '='))
			for (const struct sf_opt *q = cmd->opts; q->name; q++)
				if (*q->name && !strcmp(q->name, a + 2))
					p = q;
		if (p && p->arg)
			i++;
	}
}

unsigned sf_cli_image_flags(unsigned flags)
{
	return flags | (sf_qmatmul_rows_q6_tiles() ? SF_IMAGE_OPEN_TILE_HEAD : 0);
}

int sf_cli_open_model(const char *dir, const char *image, unsigned image_flags,
		      struct sf_image *img, struct sf_model *m, struct sf_tokenizer **tok,
		      struct sf_err *e)
{
	int ret;

	if (dir)
		return (ret = sf_model_open(m, dir, e)) ? ret
			: sf_tokenizer_open_model(tok, dir, m->cfg.vocab_size, e);
	if ((ret = sf_image_open_flags(img, image, sf_cli_image_flags(image_flags), e)) ||
	    (ret = sf_image_model(img, m, e)))
		return ret;
	return sf_tokenizer_open_image(tok, img, e);
}

int sf_cli_is_eos(const struct sf_model *m, const struct sf_tokenizer *tok, int32_t token)
{
	if (token == sf_tokenizer_eos(tok))
		return 1;
	for (int i = 0; i < m->cfg.n_eos; i++)
		if (token == m->cfg.eos_ids[i])
			return 1;
	return 0;
}

int sf_cli_chat_template(const struct sf_tokenizer *tok, int forced, const char *name,
			 int *tmpl, struct sf_err *e)
{
	const char *j = sf_tokenizer_chat_template(tok);

	if ((*tmpl = forced) >= 0)
		return 0;
	if (!j)
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: no chat_template in tokenizer_config.json: "
				  "give --chat-template NAME", name);
	if ((*tmpl = sf_chat_detect(j)) < 0)
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: tokenizer_config.json's chat_template is "
				  "none of the templates %s writes: give --chat-template NAME",
				  name, sf_progname);
	return 0;
}

int sf_cli_marker_token(const struct sf_tokenizer *tok, const char *marker, int32_t *id,
			struct sf_err *e)
{
	int32_t *ids;
	size_t n;
	int ret;

	*id = -1;
	if ((ret = sf_tokenizer_encode(tok, marker, strlen(marker), 0, &ids, &n, e)))
		return ret;
	if (n == 1)
		*id = ids[0];
	free(ids);
	return 0;
}

int sf_cli_chat_channels(const struct sf_tokenizer *tok, int tmpl, struct sf_chat_channels *c,
			 int *on, struct sf_err *e)
{
	int32_t mark[SF_CHAT_NMARKS];
	int ret;

	*on = 0;
	if (tmpl != sf_chat_find("gpt-oss"))
		return 0;
	for (int k = 0; k < SF_CHAT_NMARKS; k++)
		if ((ret = sf_cli_marker_token(tok, sf_chat_marks[k], &mark[k], e)))
			return ret;
		else if (mark[k] < 0)
			return 0;
	sf_chat_channels_init(c, mark);
	*on = 1;
	return 0;
}

int sf_cli_end_of_turn(const struct sf_model *m, const struct sf_tokenizer *tok, int tmpl,
		       int32_t *id, struct sf_err *e)
{
	const char *marker = sf_chat_end_of_turn(tmpl);
	int ret;

	*id = -1;
	if (!marker || (ret = sf_cli_marker_token(tok, marker, id, e)))
		return marker ? ret : 0;
	if (*id >= 0 && sf_cli_is_eos(m, tok, *id))
		*id = -1;
	return 0;
}
