// OpenAI's official Node client against sf-serve (tests/cli/sf-serve-openai.bats):
// a completion, a chat, a stream with usage, an error, an abort mid-stream.
// Usage: node openai.mjs OPENAI_MODULE_DIR BASE_URL; prints one line a check
// and exits 1 at the first that fails.
const [dir, baseURL] = process.argv.slice(2);
const { default: OpenAI } = await import(`${dir}/node_modules/openai/index.mjs`);
const client = new OpenAI({ baseURL, apiKey: "s3cret", maxRetries: 0 });

function check(cond, what) {
	if (!cond) {
		console.log(`FAIL ${what}`);
		process.exit(1);
	}
	console.log(`ok ${what}`);
}

const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === "mix4-1m", "models.list");

const c = await client.completions.create({ model: "mix4-1m", prompt: "In the beginning",
	max_tokens: 16, temperature: 0 });
check(c.choices[0].finish_reason === "length" && c.usage.completion_tokens === 16,
	"completions.create");
console.log(`text ${JSON.stringify(c.choices[0].text)}`);

const chat = await client.chat.completions.create({ model: "mix4-1m",
	messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello" }],
	max_tokens: 8, temperature: 0 });
check(chat.choices[0].message.role === "assistant" &&
	typeof chat.choices[0].message.content === "string", "chat.completions.create");

const stream = await client.chat.completions.create({ model: "mix4-1m",
	messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello" }],
	max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true } });
let text = "", usage = null, finish = null;
for await (const chunk of stream) {
	if (chunk.usage)
		usage = chunk.usage;
	for (const ch of chunk.choices) {
		text += ch.delta.content ?? "";
		finish = ch.finish_reason ?? finish;
	}
}
check(text === chat.choices[0].message.content && usage && usage.completion_tokens === 8 &&
	finish === "length", "a stream with usage gives the same text");

try {
	await client.completions.create({ model: "mix4-1m", prompt: "x", temperature: "hot" });
	check(false, "a bad request is an error");
} catch (e) {
	check(e instanceof OpenAI.BadRequestError && e.status === 400 &&
		e.error?.type === "invalid_request_error", "a bad request is a BadRequestError");
}
try {
	await new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 }).models.list();
	check(false, "a wrong key is an error");
} catch (e) {
	check(e instanceof OpenAI.AuthenticationError && e.status === 401,
		"a wrong key is an AuthenticationError");
}

const long = await client.completions.create({ model: "mix4-1m", prompt: "In the beginning",
	max_tokens: 1000, ignore_eos: true, stream: true });
let pieces = 0;
for await (const chunk of long) {
	if (++pieces === 3) {
		long.controller.abort();
		break;
	}
}
check(pieces === 3, "an abort mid-stream");
