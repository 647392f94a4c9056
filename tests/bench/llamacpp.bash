# llama.cpp beside sparseflash in the benchmarks, through the npm package
# node-llama-cpp: its prebuilt libllama (CPU backends as shared objects) and
# llama.cpp's source as a git bundle, whose gguf-py converts the models.
# No network but npm; nothing fetched from a model hub. Sourced, not run:
#   llamacpp_setup DIR                 install into DIR (a cache outside the
#                                      repository), build tests/bench/llamacpp/llamacpp.c
#   llamacpp_gguf MODEL_DIR OUT.gguf [auto|f32|f16|bf16]   Hugging Face Llama to GGUF
#   llamacpp_quantize IN.gguf OUT.gguf TYPE                Q4_0, Q8_0, Q4_K_M, ...
#   llamacpp_decode GGUF THREADS NTOK IDS_FILE             one JSON line
#   llamacpp_ppl GGUF THREADS TEXT_FILE [MAX_TOKENS [WINDOW]]  one JSON line
#   llamacpp_tokenize GGUF TEXT                            the ids as a JSON array
# Switches, read by every call: LLAMACPP_REPACK=0 loads without the CPU extra
# buffer types (llama.cpp's --no-repack: Q4_0/Q4_K/IQ4_NL/Q8_0 weights stay
# in the mapped file instead of being copied into interleaved layouts),
# LLAMACPP_WARMUP=0 (no warm-up pass), LLAMACPP_PURE=1 (quantize every
# tensor to TYPE), LLAMACPP_VERBOSE=1 (llama.cpp's log on stderr). Read by
# llamacpp_setup: LLAMACPP_CPU=haswell (a libggml-cpu-*.so variant:
# haswell is AVX2 alone) loads that CPU backend only, not the best this
# CPU runs, through LD_LIBRARY_PATH (exported) to a folder of the
# libraries with that one variant.
set -euo pipefail
LLAMACPP_NPM_VERSION=3.21.1
llamacpp_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

llamacpp_setup() {	# DIR
	local dir arch pkg src lib py
	mkdir -p "$1"
	dir=$(cd "$1" && pwd)
	pkg=$dir/node_modules/node-llama-cpp
	if ! grep -q "\"version\": \"$LLAMACPP_NPM_VERSION\"" "$pkg/package.json" 2>/dev/null; then
		# the prebuilt binaries come as optional dependencies; the
		# postinstall script would only download or build what is missing
		(cd "$dir" && npm install --save-exact --ignore-scripts --no-audit --no-fund \
			"node-llama-cpp@$LLAMACPP_NPM_VERSION" >&2)
	fi
	case $(uname -m) in
	x86_64) arch=x64 ;;
	aarch64) arch=arm64 ;;
	*) echo "llamacpp_setup: no node-llama-cpp prebuilt for $(uname -m)" >&2; return 1 ;;
	esac
	lib=$dir/node_modules/@node-llama-cpp/linux-$arch/bins/linux-$arch
	src=$dir/llama.cpp
	if ! [ -d "$src/gguf-py" ]; then	# llama.cpp's source, the release the binaries were built from
		rm -rf "$src.tmp"
		git -c advice.detachedHead=false clone -q "$pkg/llama/gitRelease.bundle" "$src.tmp"
		mv "$src.tmp" "$src"
	fi
	# a python3 with numpy (Debian's, not one a version manager put first)
	for py in ${PYTHON:-} /usr/bin/python3 python3; do
		PYTHONPATH=$src/gguf-py "$py" -c 'import gguf' 2>/dev/null && break
		py=
	done
	if [ -z "$py" ]; then
		echo "llamacpp_setup: no python3 imports gguf-py: it needs numpy and yaml" \
			"(apt-get install python3-numpy python3-yaml)" >&2
		return 1
	fi
	mkdir -p "$dir/bin"
	if ! [ "$dir/bin/llamacpp" -nt "$llamacpp_here/llamacpp/llamacpp.c" ]; then
		cc -std=c11 -O2 -Wall -Wextra -o "$dir/bin/llamacpp" "$llamacpp_here/llamacpp/llamacpp.c" \
			-I"$src/include" -I"$src/ggml/include" "$lib"/libllama.v*.so "$lib"/libggml.v*.so \
			"$lib/libggml-base.so" -Wl,-rpath,"$lib" -lm
	fi
	if [ -n "${LLAMACPP_CPU:-}" ]; then
		local only=$dir/cpu-$LLAMACPP_CPU f
		if ! [ -f "$lib/libggml-cpu-$LLAMACPP_CPU.so" ]; then
			echo "llamacpp_setup: LLAMACPP_CPU=$LLAMACPP_CPU: no $lib/libggml-cpu-$LLAMACPP_CPU.so" >&2
			return 1
		fi
		rm -rf "$only" && mkdir -p "$only"
		for f in "$lib"/*.so; do
			case ${f##*/} in libggml-cpu-*) ;; *) ln -s "$f" "$only/" ;; esac
		done
		ln -s "$lib/libggml-cpu-$LLAMACPP_CPU.so" "$only/"
		export LD_LIBRARY_PATH=$only
		lib=$only
	fi
	LLAMACPP_DIR=$dir
	LLAMACPP_BIN=$dir/bin/llamacpp
	LLAMACPP_PYTHON=$py
	LLAMACPP_GGUF_PY=$src/gguf-py	# PYTHONPATH for 'import gguf'
	echo "llama.cpp: node-llama-cpp $LLAMACPP_NPM_VERSION, llama.cpp release" \
		"$(jq -r .tag "$pkg/llama/llama.cpp.info.json"), $lib" >&2
}

llamacpp_check() {
	if [ -z "${LLAMACPP_BIN:-}" ]; then
		echo "llamacpp: call llamacpp_setup DIR first" >&2
		return 1
	fi
}

# The options every call of the program takes, from the switches.
llamacpp_opts() {
	[ "${LLAMACPP_REPACK:-1}" = 0 ] && printf '%s\n' --no-repack
	[ "${LLAMACPP_WARMUP:-1}" = 0 ] && printf '%s\n' --no-warmup
	[ "${LLAMACPP_PURE:-0}" = 1 ] && printf '%s\n' --pure
	[ "${LLAMACPP_VERBOSE:-0}" = 1 ] && printf '%s\n' -v
	return 0
}

llamacpp_run() {
	local opts
	llamacpp_check
	mapfile -t opts < <(llamacpp_opts)
	"$LLAMACPP_BIN" ${opts[@]+"${opts[@]}"} "$@"
}

llamacpp_gguf() {	# MODEL_DIR OUT.gguf [OUTTYPE]: written whole or not at all
	llamacpp_check
	PYTHONPATH=$LLAMACPP_GGUF_PY "$LLAMACPP_PYTHON" "$llamacpp_here/llamacpp/hf2gguf.py" \
		"$1" "$2.tmp" --outtype "${3:-auto}" || { rm -f "$2.tmp"; return 1; }
	mv "$2.tmp" "$2"
}

llamacpp_quantize() {	# IN.gguf OUT.gguf TYPE
	llamacpp_run quantize "$1" "$2.tmp" "$3" || { rm -f "$2.tmp"; return 1; }
	mv "$2.tmp" "$2"
}

llamacpp_decode() { llamacpp_run decode "$@"; }	# GGUF THREADS NTOK IDS_FILE
llamacpp_ppl() { llamacpp_run ppl "$@"; }	# GGUF THREADS TEXT_FILE [MAX_TOKENS [WINDOW]]
llamacpp_tokenize() { llamacpp_run tokenize "$@"; }	# GGUF TEXT
