# Study 3 (tests/bench/study-e2e.sh): latency per token and bytes per token
# of every configuration. gnuplot -e "dir='...'"
set terminal pngcairo noenhanced size 1100,420 font ",10"
set output dir."/e2e.png"
set multiplot layout 1,2 title "End to end at +10% perplexity, from flash with O_DIRECT"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set yrange [0:*]
set xtics rotate by -30
set key top right
set title "latency per token (median p50)"
set ylabel "ms per token"
plot dir."/e2e.dat" using 2:xtic(1) notitle lc rgb "#4477aa"
set title "bytes per token"
set ylabel "MB per token"
plot dir."/e2e.dat" using 3:xtic(1) title "moved", '' using 4 title "needed"
unset multiplot
