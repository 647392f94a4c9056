# Study 3 (tests/bench/study-e2e.sh): latency per token and bytes per token
# of every configuration; the key under the panels, so that it hides no bar.
# tests/bench/plot/plot.sh e2e DIR
set terminal pngcairo noenhanced size 1100,460 font ",10"
set output dir."/e2e.png"
load lib."/setup.gp"
set multiplot layout 1,2 title "End to end at +10% perplexity, from flash with O_DIRECT".": ".setup
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set yrange [0:*]
set xtics rotate by -30
set key off
set bmargin 7	# room for the key under the panels
set title "latency per token (median p50)"
set ylabel "ms per token"
plot dir."/e2e.dat" using 2:xtic(1) notitle lc rgb "#4477aa"
set title "bytes per token"
set ylabel "MB per token"
# a configuration without flash reads (dense-ram) says so instead of leaving no bar
plot dir."/e2e.dat" using 3:xtic(1) title "moved", '' using 4 title "needed", \
	'' using 0:(0):($3 == 0 && $4 == 0 ? "no flash reads" : "") with labels rotate by 90 left \
	offset 0, 0.5 font ",8" notitle
# the key: an empty plot across the bottom strip, in the bars' colours
set origin 0, 0
set size 1, 0.05
unset title; unset xlabel; unset ylabel; unset tics; unset border; unset grid
set margins 0, 0, 0, 0
set key center center horizontal
set xrange [0:1]; set yrange [0:1]
plot NaN title "moved" with boxes lt 1, NaN title "needed" with boxes lt 2
unset multiplot
