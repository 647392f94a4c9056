#!/usr/bin/env bash
# sf-coact on a synthetic trace of Llama-2-7B's FFN width: 11,008 entries,
# 65,536 tokens, density 0.3, one layer, -t 2 (target: at most 60 s), its
# peak memory (the pairs alone are 242 MB), and the pair kernels compared.
# The trace streams from mktrace through a pipe, as from sf-profile.
# Usage: SF_BIN=... SF_BENCH=... tests/bench/coact.sh  (ENTRIES, TOKENS)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SF_BIN:-$root/bin}
benchbin=${SF_BENCH:-$root/build/opt/bench}
entries=${ENTRIES:-11008}
tokens=${TOKENS:-65536}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$benchbin/mktrace" --entries "$entries" --tokens "$tokens" --density 0.3 -o "$work/syn.sft"
echo "trace: $(stat -c %s "$work/syn.sft") bytes, $entries entries x $tokens tokens"
for t in 2 1; do
	/usr/bin/time -f "%e s, %M KiB peak" "$bin/sf-coact" -t "$t" "$work/syn.sft" -o "$work/syn.sfc" \
		2>"$work/err" || { cat "$work/err"; exit 1; }
	echo "sf-coact -t $t: $(tail -n 1 "$work/err")  [$(grep -o 'pair kernel .*' "$work/err")]"
done
echo "piped from mktrace, -t 2:"
/usr/bin/time -f "%e s, %M KiB peak" sh -c "'$benchbin/mktrace' --entries $entries --tokens $tokens | '$bin/sf-coact' -q -t 2 -o '$work/pipe.sfc'"
cmp "$work/syn.sfc" "$work/pipe.sfc" >/dev/null 2>&1 || echo "(headers differ by the input name only)"
sf_ref_tokens=$((tokens / 16))
"$benchbin/mktrace" --entries "$entries" --tokens "$sf_ref_tokens" -o "$work/small.sft"
for k in ref popcnt avx512; do
	case $k in ref) env=SF_REF=1 ;; *) env=SF_REF=0 ;; esac
	[ "$k" = popcnt ] && continue	# chosen automatically only without AVX-512
	s=$( { /usr/bin/time -f %e env $env "$bin/sf-coact" -q -t 2 "$work/small.sft" -o "$work/k.sfc"; } 2>&1 )
	echo "kernel $k, $sf_ref_tokens tokens: $s s"
done
