# Study 2 (tests/bench/study-placement.sh): read length distribution offline,
# requests per token and latency from flash, per placement. gnuplot -e "dir='...'"
set terminal pngcairo noenhanced size 1200,420 font ",10"
set output dir."/placement.png"
set multiplot layout 1,3 title "Placement: identity (LLMFlash), frequency (Neuralink-S), coact (Neuralink)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set yrange [0:*]
set key top left
set xtics rotate by -30
set title "read lengths on the test splits (sf-place --eval)"
set xlabel "entries per run"
set ylabel "share of runs"
plot dir."/histogram.dat" using 2:xtic(1) title "identity", '' using 3 title "frequency", '' using 4 title "coact"
set title "requests per token from flash"
set xlabel "budget / collapse gap"
set ylabel "requests per token"
plot dir."/flash.dat" using 2:xtic(1) title "identity", '' using 3 title "frequency", '' using 4 title "coact"
set title "latency per token (median p50)"
set ylabel "ms per token"
plot dir."/flash.dat" using 5:xtic(1) title "identity", '' using 6 title "frequency", '' using 7 title "coact"
unset multiplot
