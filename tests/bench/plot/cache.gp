# Study 4 (tests/bench/study-cache.sh): latency, bytes moved and hit rate
# against the cache ratio per policy. gnuplot -e "dir='...'"
set terminal pngcairo noenhanced size 1200,400 font ",10"
set output dir."/cache.png"
labels = system("cat ".dir."/labels.txt")
set multiplot layout 1,3 title "Cache ratio sweep (Neuralink Fig. 13), from flash with O_DIRECT"
set grid
set xlabel "cache ratio (of the flash top-tier bytes)"
set style data linespoints
set key top right
set title "latency per token (median p50)"
set ylabel "ms per token"
plot for [i=1:words(labels)] dir."/cache.dat" index (i-1) using 1:2 title word(labels, i) lw 2
set title "bytes moved per token"
set ylabel "MB per token"
plot for [i=1:words(labels)] dir."/cache.dat" index (i-1) using 1:3 notitle lw 2
set title "cache hit rate"
set ylabel "hits / lookups"
plot for [i=1:words(labels)] dir."/cache.dat" index (i-1) using 1:4 notitle lw 2
unset multiplot
