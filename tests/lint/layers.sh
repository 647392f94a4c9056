#!/bin/sh
# The architecture's rules, checked on the source (make lint, run by make
# check): each part of lib/common includes only the parts below it, the
# library never includes the command-line support, and nothing in lib/
# prints, exits or reads the environment (sparseflash(7), ARCHITECTURE).
# Prints one line per violation and ends with the plain
# "lint: N passed, N failed" line.
cd "$(dirname "$0")/../.." || exit 2

# part: the parts it may include (itself included)
allowed() {
	case $1 in
	base) echo "base" ;;
	formats) echo "base formats" ;;
	engine) echo "base formats engine" ;;
	offline) echo "base formats engine offline" ;;
	online) echo "base formats engine online" ;;
	*) echo "" ;;
	esac
}

fail=0 pass=0
for part in base formats engine offline online; do
	ok=$(allowed $part)
	for f in lib/common/$part/*.[ch]; do
		bad=0
		for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
			dir=${inc%%/*}
			[ "$dir" = "$inc" ] && { echo "$f: #include \"$inc\": name the part (\"$part/$inc\")"; bad=1; continue; }
			case " $ok " in
			*" $dir "*) ;;
			*) echo "$f: #include \"$inc\": $part may include only: $ok"; bad=1 ;;
			esac
		done
		# comments and string literals removed, then calls that print,
		# exit or read the environment; writing to a caller's FILE * is fine
		calls=$(perl -0777 -pe 's{/\*.*?\*/}{}gs; s{//[^\n]*}{}g; s{"(?:[^"\\\n]|\\.)*"}{""}g; s{\x27(?:[^\x27\\\n]|\\.)*\x27}{\x27\x27}g' "$f" |
			grep -nE '(^|[^a-z_])(printf|vprintf|puts|perror|putchar|exit|_Exit|abort|getenv|secure_getenv|setenv|system)[[:space:]]*\(|(^|[^a-z_])stderr([^a-z_]|$)' || true)
		if [ -n "$calls" ]; then
			echo "$calls" | sed "s|^|$f:|; s|\$|  (the library never prints, exits or reads the environment)|"
			bad=1
		fi
		if [ $bad -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
	done
done
echo "lint: $pass passed, $fail failed"
[ $fail -eq 0 ]
