/* engine/chat: each template renders llama.cpp's test conversation as
 * llama.cpp's own tests expect (tests/test-chat-template.cpp), templates
 * are told by their markers, and a conversation's turns are the parts of
 * the whole rendering the model has not seen yet. */
#include <string.h>

#include "engine/chat.h"
#include "unit.h"

static const struct sf_chat_msg conv[] = {
	{ SF_CHAT_SYSTEM, "You are a helpful assistant" },
	{ SF_CHAT_USER, "Hello" },
	{ SF_CHAT_ASSISTANT, "Hi there" },
	{ SF_CHAT_USER, "Who are you" },
	{ SF_CHAT_ASSISTANT, "   I am an assistant   " },
	{ SF_CHAT_USER, "Another question" },
};
#define NCONV (sizeof(conv) / sizeof(conv[0]))

static const struct {
	const char *name, *want;
} renders[] = {
	{ "chatml", "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\n"
	  "Hello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are "
	  "you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>"
	  "user\nAnother question<|im_end|>\n<|im_start|>assistant\n" },
	{ "llama2", "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are "
	  "you [/INST]   I am an assistant   </s>[INST] Another question [/INST]" },
	{ "llama2-sys-bos", "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]"
	  "Hi there</s><s>[INST] Who are you [/INST]   I am an assistant   </s><s>[INST] Another "
	  "question [/INST]" },
	{ "llama2-sys-strip", "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello "
	  "[/INST]Hi there</s>[INST] Who are you [/INST]I am an assistant</s>[INST] Another "
	  "question [/INST]" },
	{ "mistral-v1", " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] "
	  "Who are you [/INST]    I am an assistant   </s> [INST] Another question [/INST]" },
	{ "mistral-v3", "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who "
	  "are you[/INST] I am an assistant</s>[INST] Another question[/INST]" },
	{ "gemma", "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
	  "<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you"
	  "<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user"
	  "\nAnother question<end_of_turn>\n<start_of_turn>model\n" },
	{ "deepseek", "You are a helpful assistant### Instruction:\nHello\n### Response:\nHi there\n"
	  "<|EOT|>\n### Instruction:\nWho are you\n### Response:\n   I am an assistant   \n<|EOT|>\n"
	  "### Instruction:\nAnother question\n### Response:\n" },
	{ "vicuna", "You are a helpful assistant\n\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who "
	  "are you\nASSISTANT:    I am an assistant   </s>\nUSER: Another question\nASSISTANT:" },
	{ "vicuna-orca", "SYSTEM: You are a helpful assistant\nUSER: Hello\nASSISTANT: Hi there</s>\n"
	  "USER: Who are you\nASSISTANT:    I am an assistant   </s>\nUSER: Another question\n"
	  "ASSISTANT:" },
	{ "command-r", "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful assistant"
	  "<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|>"
	  "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
	  "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who are you<|END_OF_TURN_TOKEN|>"
	  "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>I am an assistant<|END_OF_TURN_TOKEN|>"
	  "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Another question<|END_OF_TURN_TOKEN|>"
	  "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>" },
	{ "llama3", "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant"
	  "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>"
	  "assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>"
	  "\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an "
	  "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question"
	  "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n" },
	{ "phi3", "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n"
	  "<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an "
	  "assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n" },
	/* not llama.cpp's (<|message|>...<|return|> for an answer): the
	 * user's turns, the answers and the generation prompt as gpt-oss's
	 * own template writes them for inference */
	{ "gpt-oss", "<|start|>system<|message|>You are a helpful assistant<|end|><|start|>user"
	  "<|message|>Hello<|end|><|start|>assistant<|channel|>final<|message|>Hi there<|end|>"
	  "<|start|>user<|message|>Who are you<|end|><|start|>assistant<|channel|>final<|message|>"
	  "   I am an assistant   <|end|><|start|>user<|message|>Another question<|end|>"
	  "<|start|>assistant" },
};

static void test_render(void)
{
	for (size_t i = 0; i < sizeof(renders) / sizeof(renders[0]); i++) {
		int t = sf_chat_find(renders[i].name);
		char *s = NULL;
		size_t n = 0;
		CHECK(t >= 0, "%s: no such template", renders[i].name);
		if (t < 0)
			continue;
		CHECK(!sf_chat_render(t, conv, NCONV, 1, &s, &n) && s && n == strlen(s) &&
		      !strcmp(s, renders[i].want), "%s renders\n%s\nnot\n%s", renders[i].name,
		      s ? s : "(null)", renders[i].want);
		free(s);
	}
}

/* Templates as models ship them, told apart by their markers. */
static void test_detect(void)
{
	static const struct {
		const char *jinja, *want;	/* want NULL: none sf-run writes */
	} cases[] = {
		{ "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
		  "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}", "chatml" },
		{ "{% for m in messages %}{{'<|im_start|>' + m['role'] + '<|im_sep|>' + m['content'] "
		  "+ '<|im_end|>'}}{% endfor %}", "phi4" },
		{ "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
		  "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
		  "'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}", "llama2" },
		{ "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' "
		  "+ system_message %}{% endif %}{{ '[INST] ' + content.strip() + ' [/INST]' }}",
		  "llama2-sys-strip" },
		{ "{{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}",
		  "mistral-v1" },
		{ "{{ '[INST] <<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' }}", "llama2-sys" },
		{ "{{ bos_token + '[INST] ' + content }}<<SYS>>", "llama2-sys-bos" },
		{ "[AVAILABLE_TOOLS]{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}",
		  "mistral-v3-tekken" },
		{ "{{ '<|user|>\\n' + c }}{{ '<|assistant|>\\n' + c + '</s>' }}", "falcon3" },
		{ "{{-'SYSTEM: ' + c}}{{-'USER: ' + c}}{{-'ASSISTANT: ' + c}}", "vicuna-orca" },
		{ "[AVAILABLE_TOOLS] {{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}",
		  "mistral-v3" },
		{ "{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}[INST]", "mistral-v7" },
		{ "{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + '<|assistant|>'}}",
		  "phi3" },
		{ "{{ '<|user|>\\n' + message['content'] + '<|endoftext|>' }}", "zephyr" },
		{ "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + "
		  "'<end_of_turn>\\n' }}", "gemma" },
		{ "{{-'USER: ' + message['content'] + '\\n'-}}{{-'ASSISTANT: ' + message['content']}}",
		  "vicuna" },
		{ "{{'### Instruction:\\n' + message['content'] + '\\n'}}{{'\\n<|EOT|>\\n'}}",
		  "deepseek" },
		{ "{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content.strip() }}", "command-r" },
		{ "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}",
		  "llama3" },
		{ "llama3", "llama3" },	/* a name, as llama.cpp takes it */
		{ "{{- \"<|start|>user<|message|>\" + message.content + \"<|end|>\" }}{{- "
		  "\"<|start|>assistant<|channel|>final<|message|>\" + message.content }}", "gpt-oss" },
		{ "gpt-oss", "gpt-oss" },
		/* Llama 4's markers come first in llama.cpp's order */
		{ "<|header_start|>user<|header_end|><|start|><|channel|>", NULL },
		/* families sf-run does not write are not taken for a later one */
		{ "[gMASK]<sop>{% for item in messages %}<|{{ item['role'] }}|>\\n{{ item['content'] }}"
		  "{% endfor %}<|assistant|>\\n<|user|>", NULL },	/* ChatGLM 4 */
		{ "<|system|>\\n{{ c }}<|user|>\\n{{ c }}<|assistant|>", NULL },	/* GLM-Edge */
		{ "{{bos_token + message['role'] + '\\n' + message['content'] + eos_token}}", NULL },
		{ "{{ 'GPT4 Correct ' + message['role'].title() + ': ' }}", NULL },
		{ "{{ messages }}", NULL },
		{ "", NULL },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int got = sf_chat_detect(cases[i].jinja);
		CHECK(cases[i].want ? got == sf_chat_find(cases[i].want) : got == -1,
		      "case %zu: detected %s, expected %s", i, got >= 0 ? sf_chat_name(got) : "none",
		      cases[i].want ? cases[i].want : "none");
	}
	for (int t = 0; t < sf_chat_count(); t++)
		CHECK(sf_chat_find(sf_chat_name(t)) == t, "%s is not found by name", sf_chat_name(t));
	CHECK(sf_chat_find("ChatML") == -1 && sf_chat_name(-1) == NULL &&
	      sf_chat_name(sf_chat_count()) == NULL, "names outside the table");
}

/* Turn by turn: the first turn is the rendering up to the first answer
 * (the system message merged where the template does), each later one
 * the previous answer's end-of-turn, the user's message and the opening
 * of the answer: what the model has not been given yet. */
static void test_turns(void)
{
	static const struct {
		const char *name, *system, *turn[3];
	} cases[] = {
		{ "chatml", "Be brief.",
		  { "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
		    "<|im_start|>assistant\n",
		    "<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n",
		    "<|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"
		    "<|im_start|>assistant\n" } },
		{ "llama2-sys", "Be brief.",
		  { "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHello [/INST]",
		    "</s>[INST] Who are you [/INST]", "</s>[INST] Another question [/INST]" } },
		{ "llama2-sys-bos", NULL,
		  { "[INST] Hello [/INST]", "</s><s>[INST] Who are you [/INST]",
		    "</s><s>[INST] Another question [/INST]" } },
		/* the space before an answer is the model's own: not fed */
		{ "mistral-v3", NULL,
		  { "[INST] Hello[/INST]", "</s>[INST] Who are you[/INST]",
		    "</s>[INST] Another question[/INST]" } },
		{ "vicuna", "Be brief.",
		  { "Be brief.\n\nUSER: Hello\nASSISTANT:", "</s>\nUSER: Who are you\nASSISTANT:",
		    "</s>\nUSER: Another question\nASSISTANT:" } },
		{ "gemma", "Be brief.",
		  { "<start_of_turn>user\nBe brief.\n\nHello<end_of_turn>\n<start_of_turn>model\n",
		    "<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n"
		    "<start_of_turn>model\n",
		    "<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n"
		    "<start_of_turn>model\n" } },
		{ "llama3", NULL,
		  { "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
		    "<|start_header_id|>assistant<|end_header_id|>\n\n",
		    "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
		    "<|start_header_id|>assistant<|end_header_id|>\n\n",
		    "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question"
		    "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n" } },
		/* an answer's <|return|> is fed back as <|end|>, and the
		 * channels the model wrote are its own */
		{ "gpt-oss", "Be brief.",
		  { "<|start|>system<|message|>Be brief.<|end|><|start|>user<|message|>Hello<|end|>"
		    "<|start|>assistant",
		    "<|end|><|start|>user<|message|>Who are you<|end|><|start|>assistant",
		    "<|end|><|start|>user<|message|>Another question<|end|><|start|>assistant" } },
		{ "deepseek", NULL,
		  { "### Instruction:\nHello\n### Response:\n",
		    "\n<|EOT|>\n### Instruction:\nWho are you\n### Response:\n",
		    "\n<|EOT|>\n### Instruction:\nAnother question\n### Response:\n" } },
	};
	static const char *user[3] = { "Hello", "Who are you", "Another question" };
	static const char *answer[2] = { "Hi there", "   I am an assistant   " };

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct sf_chat c;
		struct sf_err e = { 0 };
		int t = sf_chat_find(cases[i].name);
		CHECK(t >= 0 && !sf_chat_init(&c, t, cases[i].system, &e), "%s: init", cases[i].name);
		for (int k = 0; k < 3 && t >= 0; k++) {
			char *s = NULL;
			size_t n = 0;
			CHECK(!sf_chat_user(&c, user[k], &s, &n, &e) && s && n == strlen(s) &&
			      !strcmp(s, cases[i].turn[k]), "%s: turn %d is\n%s\nnot\n%s",
			      cases[i].name, k + 1, s ? s : e.msg, cases[i].turn[k]);
			free(s);
			if (k < 2)
				CHECK(!sf_chat_answer(&c, answer[k], &e), "%s: answer: %s", cases[i].name,
				      e.msg);
		}
		sf_chat_free(&c);
	}

	/* every template goes through a conversation, and a chat freed
	 * twice or never started is fine */
	for (int t = 0; t < sf_chat_count(); t++) {
		struct sf_chat c;
		struct sf_err e = { 0 };
		char *s = NULL;
		size_t n;
		CHECK(!sf_chat_init(&c, t, "sys", &e) && !sf_chat_user(&c, "a", &s, &n, &e) &&
		      n > 0, "%s: first turn: %s", sf_chat_name(t), e.msg);
		free(s);
		s = NULL;
		CHECK(!sf_chat_answer(&c, "b", &e) && !sf_chat_user(&c, "c", &s, &n, &e) && n > 0,
		      "%s: second turn: %s", sf_chat_name(t), e.msg);
		free(s);
		sf_chat_free(&c);
		sf_chat_free(&c);
	}
	CHECK(sf_chat_end_of_turn(sf_chat_find("chatml")) &&
	      !strcmp(sf_chat_end_of_turn(sf_chat_find("chatml")), "<|im_end|>") &&
	      sf_chat_end_of_turn(sf_chat_find("falcon3")) == NULL, "end-of-turn markers");
}

/* gpt-oss's channels: a scripted answer, token by token (markers 1 to 4),
 * each text where it belongs. */
static void test_channels(void)
{
	enum { A = SF_CHAT_PART_ANSWER, R = SF_CHAT_PART_REASONING, N = SF_CHAT_PART_NONE };
	static const int32_t mark[SF_CHAT_NMARKS] = { 1, 2, 3, 4 };
	static const struct {
		int32_t id;
		const char *text;
		int want;
	} seq[] = {
		{ 9, "Before", A },	/* no channel yet: the answer */
		{ 2, "", N }, { 9, "analysis", N }, { 3, "", N },
		{ 9, "Think", R }, { 9, " more", R }, { 4, "", N },
		{ 1, "", N }, { 9, "assistant", N },
		{ 2, "", N }, { 9, "commentary to=functions.f", N }, { 3, "", N }, { 9, "{}", R },
		{ 4, "", N }, { 1, "", N }, { 9, "assistant", N },
		{ 2, "", N }, { 9, "final", N }, { 9, "ize", N }, { 3, "", N }, { 9, "x", R },
		{ 4, "", N }, { 1, "", N }, { 9, "assistant", N },
		{ 2, "", N }, { 9, "fi", N }, { 9, "nal", N }, { 3, "", N },
		{ 9, "Hi", A }, { 9, " there", A },
	};
	struct sf_chat_channels c;

	sf_chat_channels_init(&c, mark);
	for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
		int got = sf_chat_channels_push(&c, seq[i].id, seq[i].text, strlen(seq[i].text));
		CHECK(got == seq[i].want, "token %zu ('%s'): part %d, expected %d", i, seq[i].text,
		      got, seq[i].want);
	}
	CHECK(!strcmp(sf_chat_marks[SF_CHAT_MARK_CHANNEL], "<|channel|>"), "markers");
}

int main(void)
{
	test_render();
	test_detect();
	test_turns();
	test_channels();
	return unit_exit();
}
