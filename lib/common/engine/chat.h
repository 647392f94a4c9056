/* Chat templates without a Jinja interpreter: the common formats, found
 * by their markers in tokenizer_config.json's chat_template as llama.cpp
 * finds them (llama_chat_detect_template), or named; a conversation's
 * text turn by turn, so that the KV cache carries over (sf-run
 * --conversation; man/sf-run.1, CONVERSATION). */
#ifndef SF_CHAT_H
#define SF_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

enum sf_chat_role { SF_CHAT_SYSTEM, SF_CHAT_USER, SF_CHAT_ASSISTANT };

struct sf_chat_msg {
	enum sf_chat_role role;
	const char *text;	/* NUL-terminated */
};

/* The templates, numbered 0 to sf_chat_count() - 1. */
int sf_chat_count(void);
const char *sf_chat_name(int tmpl);
/* The template named name ("chatml", "llama3", ...), or -1. */
int sf_chat_find(const char *name);
/* The template a Jinja chat_template is, by its markers (a bare name is
 * taken too, as llama.cpp does), or -1 when none matches. */
int sf_chat_detect(const char *jinja);
/* The marker that ends an answer ("<|im_end|>"), or NULL when the model's
 * end-of-text token does. */
const char *sf_chat_end_of_turn(int tmpl);

/* The text of n messages as the template writes it, without the BOS
 * token the tokenizer adds; with add_generation_prompt, followed by what
 * opens the answer. *out is malloc'ed and NUL-terminated. 0 or -ENOMEM. */
int sf_chat_render(int tmpl, const struct sf_chat_msg *m, size_t n, int add_generation_prompt,
		   char **out, size_t *len);

/* An answer as gpt-oss writes it, in harmony's channels:
 * <|channel|>NAME<|message|>TEXT<|end|>, then <|start|>assistant and the
 * next, the last one named final. Each token's text goes to the answer
 * (the final channel's, or text outside any channel), the reasoning (the
 * other channels': analysis, commentary) or nowhere (the markers, the
 * channels' names, the role after <|start|>). */
enum sf_chat_part { SF_CHAT_PART_ANSWER, SF_CHAT_PART_REASONING, SF_CHAT_PART_NONE };
enum { SF_CHAT_MARK_START, SF_CHAT_MARK_CHANNEL, SF_CHAT_MARK_MESSAGE, SF_CHAT_MARK_END,
       SF_CHAT_NMARKS };
/* The markers' text, by the enum above. */
extern const char *const sf_chat_marks[SF_CHAT_NMARKS];

struct sf_chat_channels {
	int32_t mark[SF_CHAT_NMARKS];	/* the markers' token ids */
	int state;
	char name[16];			/* the channel's name, cut to fit */
	size_t nname;
};

void sf_chat_channels_init(struct sf_chat_channels *c, const int32_t *mark);
/* An answer begins (after the generation prompt's <|start|>assistant). */
void sf_chat_channels_start(struct sf_chat_channels *c);
/* Token id, whose decoded text is text (n bytes): where that text goes. */
enum sf_chat_part sf_chat_channels_push(struct sf_chat_channels *c, int32_t id, const char *text,
					size_t n);

/* A conversation. Each user turn gives the text to feed the model: the
 * rest of the previous answer's turn as the template writes it (its
 * end-of-turn marker; the answer's own tokens are in the KV cache
 * already), the user's message and the opening of the answer; on a
 * system message, it comes before the first. Fields are private. */
struct sf_chat {
	int tmpl;
	struct sf_chat_msg *msgs;	/* (n) texts owned */
	size_t n, cap;
	char *fed;		/* the rendering of what the model has been given */
	size_t nfed;
	char *tail;		/* the end of the last answer's turn, not fed yet */
};

/* system may be NULL (no system message). 0 or -ENOMEM. */
int sf_chat_init(struct sf_chat *c, int tmpl, const char *system, struct sf_err *e);
/* The text to feed for a user message (*turn malloc'ed, NUL-terminated). */
int sf_chat_user(struct sf_chat *c, const char *text, char **turn, size_t *len, struct sf_err *e);
/* The answer to the last user message as generated (decoded, without the
 * end-of-turn token). */
int sf_chat_answer(struct sf_chat *c, const char *text, struct sf_err *e);
void sf_chat_free(struct sf_chat *c);	/* accepts a zeroed c */

#endif
