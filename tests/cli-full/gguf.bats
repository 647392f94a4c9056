#!/usr/bin/env bats
# llama.cpp's gguf-py as the oracle of the GGUF reader, the ggml
# dequantizers and the config from GGUF metadata: llama.cpp set up as the
# benchmarks do it (tests/bench/llamacpp.bash: node-llama-cpp through npm,
# its llama.cpp source, Debian's python3 with numpy), then the unit tests
# that make check skips without it, which here must run.

load ../cli/helpers

setup_file() {
	local got
	got=$(bash -c 'source "$1/tests/bench/llamacpp.bash" && llamacpp_setup "$2" >&2 &&
		printf "%s\n%s\n" "$LLAMACPP_GGUF_PY" "$LLAMACPP_PYTHON"' _ \
		"$SF_ROOT" "${LLAMACPP_DIR:-/var/tmp/sf-llamacpp}")
	SF_GGUF_PY=$(sed -n 1p <<<"$got")
	PYTHON=$(sed -n 2p <<<"$got")
	SF_UNIT=$(dirname "$SF_FIXTURES")/tests
	export SF_GGUF_PY PYTHON SF_UNIT
}

@test "every handled tensor type dequantizes as gguf-py's does, bit for bit" {
	[ -n "$SF_GGUF_PY" ]
	run "$SF_UNIT/test_ggml"
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "mix4-5m converted by hf2gguf.py: config.json's config, the safetensors' bytes" {
	need_shared
	[ -n "$SF_GGUF_PY" ]
	run "$SF_UNIT/test_gguf_config"
	echo "$output"
	[ "$status" -eq 0 ]
}
