/* Chat templates and a conversation's turns: see chat.h. Each template is
 * one table entry: the text around each role's message, the opening of
 * a turn where the format has one ([INST]), the generation prompt. The
 * detection follows llama.cpp's order of markers, so a template of a
 * family sf-run does not write (ChatGLM, Monarch, OpenChat...) is not
 * taken for a later one. */
#include "engine/chat.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum {
	TRIM = 1,		/* every message without its leading and trailing white space */
	TRIM_ANSWER = 2,	/* the assistant's only */
	SYS_MERGE = 4,		/* no system turn: its text opens the next user message */
};

struct tmpl {
	const char *name;
	const char *open;	/* before a system or user message that starts a turn */
	const char *open_next;	/* the same for every turn after the first; NULL: open */
	const char *pre[3], *suf[3];	/* around each role's message (sf_chat_role) */
	const char *gen;	/* the generation prompt: what opens the answer */
	const char *eot;	/* the marker that ends an answer; NULL: the EOS token */
	unsigned flags;
};

#define SAME3(s) { s, s, s }

static const struct tmpl tmpls[] = {
	{ "chatml", "", NULL,
	  { "<|im_start|>system\n", "<|im_start|>user\n", "<|im_start|>assistant\n" },
	  SAME3("<|im_end|>\n"), "<|im_start|>assistant\n", "<|im_end|>", 0 },
	{ "phi4", "", NULL,
	  { "<|im_start|>system<|im_sep|>", "<|im_start|>user<|im_sep|>",
	    "<|im_start|>assistant<|im_sep|>" },
	  SAME3("<|im_end|>"), "<|im_start|>assistant<|im_sep|>", "<|im_end|>", 0 },
	{ "llama2", "[INST] ", NULL, SAME3(""), { "\n", " [/INST]", "</s>" }, "", "</s>", 0 },
	{ "llama2-sys", "[INST] ", NULL, { "<<SYS>>\n", "", "" },
	  { "\n<</SYS>>\n\n", " [/INST]", "</s>" }, "", "</s>", 0 },
	{ "llama2-sys-bos", "[INST] ", "<s>[INST] ", { "<<SYS>>\n", "", "" },
	  { "\n<</SYS>>\n\n", " [/INST]", "</s>" }, "", "</s>", 0 },
	{ "llama2-sys-strip", "[INST] ", NULL, { "<<SYS>>\n", "", "" },
	  { "\n<</SYS>>\n\n", " [/INST]", "</s>" }, "", "</s>", TRIM },
	{ "mistral-v1", " [INST] ", NULL, { "", "", " " }, { "\n\n", " [/INST]", "</s>" }, "",
	  "</s>", 0 },
	{ "mistral-v3", "[INST] ", NULL, { "", "", " " }, { "\n\n", "[/INST]", "</s>" }, "",
	  "</s>", TRIM_ANSWER },
	{ "mistral-v3-tekken", "[INST]", NULL, SAME3(""), { "\n\n", "[/INST]", "</s>" }, "",
	  "</s>", 0 },
	{ "mistral-v7", "", NULL, { "[SYSTEM_PROMPT] ", "[INST] ", " " },
	  { "[/SYSTEM_PROMPT]", "[/INST]", "</s>" }, "", "</s>", 0 },
	{ "mistral-v7-tekken", "", NULL, { "[SYSTEM_PROMPT]", "[INST]", "" },
	  { "[/SYSTEM_PROMPT]", "[/INST]", "</s>" }, "", "</s>", 0 },
	{ "phi3", "", NULL, { "<|system|>\n", "<|user|>\n", "<|assistant|>\n" },
	  SAME3("<|end|>\n"), "<|assistant|>\n", "<|end|>", 0 },
	{ "falcon3", "", NULL, { "<|system|>\n", "<|user|>\n", "<|assistant|>\n" },
	  SAME3("\n"), "<|assistant|>\n", NULL, 0 },
	{ "zephyr", "", NULL, { "<|system|>\n", "<|user|>\n", "<|assistant|>\n" },
	  SAME3("<|endoftext|>\n"), "<|assistant|>\n", "<|endoftext|>", 0 },
	{ "gemma", "", NULL, { "", "<start_of_turn>user\n", "<start_of_turn>model\n" },
	  { "", "<end_of_turn>\n", "<end_of_turn>\n" }, "<start_of_turn>model\n", "<end_of_turn>",
	  TRIM | SYS_MERGE },
	{ "vicuna", "", NULL, { "", "USER: ", "ASSISTANT: " }, { "\n\n", "\n", "</s>\n" },
	  "ASSISTANT:", "</s>", 0 },
	{ "vicuna-orca", "", NULL, { "SYSTEM: ", "USER: ", "ASSISTANT: " }, { "\n", "\n", "</s>\n" },
	  "ASSISTANT:", "</s>", 0 },
	{ "deepseek", "", NULL, { "", "### Instruction:\n", "### Response:\n" },
	  { "", "\n", "\n<|EOT|>\n" }, "### Response:\n", "<|EOT|>", 0 },
	{ "command-r", "", NULL,
	  { "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>", "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>",
	    "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>" },
	  SAME3("<|END_OF_TURN_TOKEN|>"), "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
	  "<|END_OF_TURN_TOKEN|>", TRIM },
	{ "llama3", "", NULL,
	  { "<|start_header_id|>system<|end_header_id|>\n\n",
	    "<|start_header_id|>user<|end_header_id|>\n\n",
	    "<|start_header_id|>assistant<|end_header_id|>\n\n" },
	  SAME3("<|eot_id|>"), "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>",
	  TRIM },
	/* harmony: an answer in the history is its final channel, ended by
	 * <|end|>, as gpt-oss's own template writes it (llama.cpp's writes
	 * <|message|>...<|return|>): the answer's own <|return|> is never
	 * fed back, and what the model wrote after "<|start|>assistant"
	 * (its channels) stays in the KV cache */
	{ "gpt-oss", "", NULL,
	  { "<|start|>system<|message|>", "<|start|>user<|message|>",
	    "<|start|>assistant<|channel|>final<|message|>" },
	  SAME3("<|end|>"), "<|start|>assistant", "<|return|>", 0 },
};
#define NTMPL ((int)(sizeof(tmpls) / sizeof(tmpls[0])))

int sf_chat_count(void) { return NTMPL; }
const char *sf_chat_name(int tmpl) { return tmpl >= 0 && tmpl < NTMPL ? tmpls[tmpl].name : NULL; }
const char *sf_chat_end_of_turn(int tmpl) { return sf_chat_name(tmpl) ? tmpls[tmpl].eot : NULL; }

int sf_chat_find(const char *name)
{
	for (int i = 0; i < NTMPL; i++)
		if (!strcmp(tmpls[i].name, name))
			return i;
	return -1;
}

int sf_chat_detect(const char *j)
{
	int id = sf_chat_find(j);
#define HAS(s) (strstr(j, s) != NULL)
#define T(name) sf_chat_find(name)

	if (id >= 0)
		return id;
	if (HAS("<|im_start|>"))	/* SmolVLM opens with it, but is not ChatML */
		return HAS("<|im_sep|>") ? T("phi4") : HAS("<end_of_utterance>") ? -1 : T("chatml");
	if (!strncmp(j, "mistral", 7) || HAS("[INST]")) {
		if (HAS("[SYSTEM_PROMPT]"))
			return T("mistral-v7");
		if (HAS("' [INST] ' + system_message") || HAS("[AVAILABLE_TOOLS]"))
			return HAS(" [INST]") ? T("mistral-v1")
				: HAS("\"[INST]\"") ? T("mistral-v3-tekken") : T("mistral-v3");
		return HAS("content.strip()") ? T("llama2-sys-strip")
			: HAS("bos_token + '[INST]") ? T("llama2-sys-bos")
			: HAS("<<SYS>>") ? T("llama2-sys") : T("llama2");
	}
	if (HAS("<|assistant|>") && HAS("<|end|>"))
		return T("phi3");
	if (HAS("[gMASK]<sop>"))	/* ChatGLM 4 */
		return -1;
	if (HAS("<|assistant|>") && HAS("<|user|>"))	/* else GLM-Edge */
		return HAS("</s>") ? T("falcon3") : -1;
	if (HAS("<|user|>") && HAS("<|endoftext|>"))
		return T("zephyr");
	if (HAS("bos_token + message['role']"))	/* Monarch */
		return -1;
	if (HAS("<start_of_turn>"))
		return T("gemma");
	if (HAS("'\\n\\nAssistant: ' + eos_token") || HAS("GPT4 Correct "))	/* Orion, OpenChat */
		return -1;
	if (HAS("USER: ") && HAS("ASSISTANT: "))
		return HAS("SYSTEM: ") ? T("vicuna-orca") : T("vicuna");
	if (HAS("### Instruction:") && HAS("<|EOT|>"))
		return T("deepseek");
	if (HAS("<|START_OF_TURN_TOKEN|>") && HAS("<|USER_TOKEN|>"))
		return T("command-r");
	if (HAS("<|start_header_id|>") && HAS("<|end_header_id|>"))
		return T("llama3");
	/* ChatGLM 3, MiniCPM, DeepSeek 2 and 3, EXAONE, RWKV, Granite,
	 * GigaChat, Megrez, Yandex, Bailing, Llama 4, dots.llm1, Hunyuan */
	if (HAS("[gMASK]sop") || HAS("<\xe7\x94\xa8\xe6\x88\xb7>") ||
	    HAS("'Assistant: ' + message['content'] + eos_token") ||
	    (HAS("<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>") && HAS("<\xef\xbd\x9cUser\xef\xbd\x9c>") &&
	     HAS("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>")) ||
	    (HAS("[|system|]") && HAS("[|assistant|]") && HAS("[|endofturn|]")) ||
	    HAS("rwkv-world") || HAS("{{- 'User: ' + message['content']|trim + '\\n\\n' -}}") ||
	    HAS("<|start_of_role|>") ||
	    HAS("message['role'] + additional_special_tokens[0] + message['content'] + "
		"additional_special_tokens[1]") ||
	    HAS("<|role_start|>") || HAS(" \xd0\x90\xd1\x81\xd1\x81\xd0\xb8\xd1\x81\xd1\x82\xd0\xb5\xd0\xbd\xd1\x82:") ||
	    (HAS("<role>ASSISTANT</role>") &&
	     (HAS("'HUMAN'") || (HAS("\"HUMAN\"") && HAS("<think>")) ||
	      (HAS("<role>HUMAN</role>") && HAS("<|role_end|>")))) ||
	    (HAS("<|header_start|>") && HAS("<|header_end|>")) || HAS("<|endofuserprompt|>") ||
	    (HAS("<|extra_0|>") && HAS("<|extra_4|>")))
		return -1;
	if (HAS("<|start|>") && HAS("<|channel|>"))
		return T("gpt-oss");
	return -1;
#undef HAS
#undef T
}

// ----------------------------------------------------------------------------
// Rendering

struct sbuf {
	char *p;
	size_t n, cap;
	bool failed;		/* an allocation failed: every later add is a no-op */
};

static void add(struct sbuf *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->failed = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static void adds(struct sbuf *b, const char *s)
{
	add(b, s, strlen(s));
}

static bool space(char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

static void render(const struct tmpl *t, const struct sf_chat_msg *m, size_t n, int gen,
		   struct sbuf *b)
{
	struct sbuf held = { 0 };	/* SYS_MERGE: system text for the next user message */
	bool inside = false, opened = false;

	adds(b, "");	/* a string even for nothing */
	for (size_t i = 0; i < n; i++) {
		const char *s = m[i].text;
		size_t len = strlen(s);
		if ((t->flags & TRIM) || ((t->flags & TRIM_ANSWER) && m[i].role == SF_CHAT_ASSISTANT)) {
			while (len && space(*s))
				s++, len--;
			while (len && space(s[len - 1]))
				len--;
		}
		if ((t->flags & SYS_MERGE) && m[i].role == SF_CHAT_SYSTEM) {
			add(&held, s, len);
			continue;
		}
		if (m[i].role != SF_CHAT_ASSISTANT && !inside) {
			adds(b, opened && t->open_next ? t->open_next : t->open);
			inside = opened = true;
		}
		adds(b, t->pre[m[i].role]);
		if (m[i].role == SF_CHAT_USER && held.n) {
			add(b, held.p, held.n);
			adds(b, "\n\n");
			held.n = 0;
		}
		add(b, s, len);
		adds(b, t->suf[m[i].role]);
		if (m[i].role == SF_CHAT_ASSISTANT)
			inside = false;
	}
	if (gen)
		adds(b, t->gen);
	b->failed |= held.failed;
	free(held.p);
}

int sf_chat_render(int tmpl, const struct sf_chat_msg *m, size_t n, int add_generation_prompt,
		   char **out, size_t *len)
{
	struct sbuf b = { 0 };

	render(&tmpls[tmpl], m, n, add_generation_prompt, &b);
	if (b.failed) {
		free(b.p);
		return -ENOMEM;
	}
	*out = b.p;
	*len = b.n;
	return 0;
}

// ----------------------------------------------------------------------------
// Harmony's channels

const char *const sf_chat_marks[SF_CHAT_NMARKS] = { "<|start|>", "<|channel|>", "<|message|>",
						     "<|end|>" };

enum { OUTSIDE, ROLE, NAME, BODY };

void sf_chat_channels_init(struct sf_chat_channels *c, const int32_t *mark)
{
	memcpy(c->mark, mark, sizeof(c->mark));
	sf_chat_channels_start(c);
}

void sf_chat_channels_start(struct sf_chat_channels *c)
{
	c->state = OUTSIDE;	/* after the generation prompt's <|start|>assistant */
	c->nname = 0;
}

enum sf_chat_part sf_chat_channels_push(struct sf_chat_channels *c, int32_t id, const char *text,
					size_t n)
{
	static const int after[SF_CHAT_NMARKS] = { ROLE, NAME, BODY, OUTSIDE };

	for (int k = 0; k < SF_CHAT_NMARKS; k++)
		if (id == c->mark[k]) {
			c->state = after[k];
			if (k == SF_CHAT_MARK_CHANNEL)
				c->nname = 0;
			return SF_CHAT_PART_NONE;
		}
	switch (c->state) {
	case ROLE:
		return SF_CHAT_PART_NONE;
	case NAME:
		for (size_t i = 0; i < n && c->nname < sizeof(c->name); i++)
			c->name[c->nname++] = text[i];
		return SF_CHAT_PART_NONE;
	case BODY:
		/* "final", or "final" and a constraint after a space */
		return c->nname >= 5 && !memcmp(c->name, "final", 5) &&
		       (c->nname == 5 || c->name[5] == ' ') ? SF_CHAT_PART_ANSWER
							     : SF_CHAT_PART_REASONING;
	default:
		return SF_CHAT_PART_ANSWER;
	}
}

// ----------------------------------------------------------------------------
// A conversation

static int nomem(struct sf_err *e)
{
	return sf_err_set(e, -ENOMEM, "chat: %s", strerror(ENOMEM));
}

static int push(struct sf_chat *c, enum sf_chat_role role, const char *text, struct sf_err *e)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 8;
		struct sf_chat_msg *m = realloc(c->msgs, cap * sizeof(*m));
		if (!m)
			return nomem(e);
		c->msgs = m;
		c->cap = cap;
	}
	if (!(c->msgs[c->n].text = strdup(text)))
		return nomem(e);
	c->msgs[c->n++].role = role;
	return 0;
}

/* The rendering of the messages, which must begin with what was fed. */
static int render_after_fed(struct sf_chat *c, int gen, char **out, size_t *len,
			    struct sf_err *e)
{
	if (sf_chat_render(c->tmpl, c->msgs, c->n, gen, out, len))
		return nomem(e);
	if (*len < c->nfed || memcmp(*out, c->fed, c->nfed)) {
		free(*out);
		return sf_err_set(e, SF_EUNSUPPORTED, "chat template %s: the conversation does not "
				  "render as its history followed by the new turn",
				  tmpls[c->tmpl].name);
	}
	return 0;
}

int sf_chat_init(struct sf_chat *c, int tmpl, const char *system, struct sf_err *e)
{
	memset(c, 0, sizeof(*c));
	c->tmpl = tmpl;
	if (!(c->fed = strdup("")) || !(c->tail = strdup("")))
		return nomem(e);
	return system ? push(c, SF_CHAT_SYSTEM, system, e) : 0;
}

int sf_chat_user(struct sf_chat *c, const char *text, char **turn, size_t *len, struct sf_err *e)
{
	char *r;
	size_t n, nt = strlen(c->tail);
	int ret;

	*turn = NULL;
	if ((ret = push(c, SF_CHAT_USER, text, e)) ||
	    (ret = render_after_fed(c, 1, &r, &n, e)))
		return ret;
	if (!(*turn = malloc(nt + n - c->nfed + 1))) {
		free(r);
		return nomem(e);
	}
	memcpy(*turn, c->tail, nt);
	memcpy(*turn + nt, r + c->nfed, n - c->nfed + 1);
	*len = nt + n - c->nfed;
	c->tail[0] = '\0';
	free(c->fed);
	c->fed = r;
	c->nfed = n;
	return 0;
}

int sf_chat_answer(struct sf_chat *c, const char *text, struct sf_err *e)
{
	const char *s = tmpls[c->tmpl].suf[SF_CHAT_ASSISTANT];
	char *r;
	size_t n;
	int ret;

	/* what the template writes after an answer, less the spaces before
	 * it, which the model writes itself; not what opens the answer in
	 * the history beyond the generation prompt (harmony's final
	 * channel), which the model wrote its own way */
	while (*s == ' ')
		s++;
	if (!(r = strdup(s)))
		return nomem(e);
	free(c->tail);
	c->tail = r;
	if ((ret = push(c, SF_CHAT_ASSISTANT, text, e)) ||
	    (ret = render_after_fed(c, 0, &r, &n, e)))
		return ret;
	free(c->fed);
	c->fed = r;
	c->nfed = n;
	return 0;
}

void sf_chat_free(struct sf_chat *c)
{
	for (size_t i = 0; i < c->n; i++)
		free((char *)c->msgs[i].text);
	free(c->msgs);
	free(c->fed);
	free(c->tail);
	memset(c, 0, sizeof(*c));
}
