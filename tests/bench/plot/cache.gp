# Study 4 (tests/bench/study-cache.sh): latency, bytes moved and hit rate
# against the cache ratio per policy; one key under the panels, so that no
# line is hidden. tests/bench/plot/plot.sh cache DIR
set terminal pngcairo noenhanced size 1200,440 font ",10"
set output dir."/cache.png"
load lib."/setup.gp"
labels = system("cat ".dir."/labels.txt")
set multiplot layout 1,3 title "Cache ratio sweep (Neuralink Fig. 13), from flash with O_DIRECT".": ".setup
set grid
set xlabel "cache ratio (of the flash top-tier bytes)"
set style data linespoints
set key off
set bmargin 6	# room for the key under the panels
set title "latency per token (median p50)"
set ylabel "ms per token"
plot for [i=1:words(labels)] dir."/cache.dat" index (i-1) using 1:2 lw 2
set title "bytes moved per token"
set ylabel "MB per token"
plot for [i=1:words(labels)] dir."/cache.dat" index (i-1) using 1:3 lw 2
set title "cache hit rate"
set ylabel "hits / lookups"
plot for [i=1:words(labels)] dir."/cache.dat" index (i-1) using 1:4 lw 2
# the key: an empty plot across the bottom strip
set origin 0, 0
set size 1, 0.06
unset title; unset xlabel; unset ylabel; unset tics; unset border; unset grid
set margins 0, 0, 0, 0
set key center center horizontal
set xrange [0:1]; set yrange [0:1]
plot for [i=1:words(labels)] NaN title word(labels, i) with linespoints lt i lw 2
unset multiplot
