# Study 2 (tests/bench/study-placement.sh): read length distribution offline,
# requests per token and latency from flash, per placement. One key, under
# the panels, so that no bar is hidden. tests/bench/plot/plot.sh placement DIR
set terminal pngcairo noenhanced size 1200,480 font ",10"
set output dir."/placement.png"
load lib."/setup.gp"
set multiplot layout 1,3 title "Placement: identity (LLMFlash), frequency (Neuralink-S), coact (Neuralink): ".setup
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set yrange [0:*]
set xtics rotate by -30
set bmargin 8	# room for the key under the panels
set key off
set title "read lengths on the test splits (sf-place --eval)"
set xlabel "entries per run"
set ylabel "share of runs"
plot dir."/histogram.dat" using 2:xtic(1), '' using 3, '' using 4
set title "requests per token from flash"
set xlabel "budget / collapse gap"
set ylabel "requests per token"
plot dir."/flash.dat" using 2:xtic(1), '' using 3, '' using 4
set title "latency per token (median p50)"
set ylabel "ms per token"
plot dir."/flash.dat" using 5:xtic(1), '' using 6, '' using 7
# the key: an empty plot across the bottom strip, in the bars' colours
set origin 0, 0
set size 1, 0.05
unset title; unset xlabel; unset ylabel; unset tics; unset border; unset grid
set margins 0, 0, 0, 0
set key center center horizontal
set xrange [0:1]; set yrange [0:1]
plot NaN title "identity" with boxes lt 1, NaN title "frequency" with boxes lt 2, \
	NaN title "coact" with boxes lt 3
unset multiplot
