#!/usr/bin/env bash
# Draw NAME.png of a study from its data, without running the study: the
# study scripts call it last (study-lib.bash) and make plots calls it on the
# data they left (mk/studies.mk). docs/RESULTS.md.
#   tests/bench/plot/plot.sh NAME DIR     (tests/bench/plot/NAME.gp, DIR/NAME.png)
set -euo pipefail
lib=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 2 ] || { echo "usage: plot.sh NAME DIR" >&2; exit 2; }
[ -f "$lib/$1.gp" ] || { echo "plot.sh: no plot named $1 ($lib/$1.gp)" >&2; exit 2; }
[ -d "$2" ] || { echo "plot.sh: $2: no such directory" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot absent: $1 not plotted (apt-get install gnuplot-nox)" >&2; exit 77; }
gnuplot -e "dir='$2'; lib='$lib'" "$lib/$1.gp"
