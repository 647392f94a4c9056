# Study 1 (tests/bench/study-quality.sh): perplexity increase against the
# realised budget, mean over the genres and per genre. The y axis is linear
# near 0 and logarithmic far from it (asinh), so that the +10% and +20%
# region stays readable and TEAL's increases of several hundred percent at
# low budgets stay on the plot. tests/bench/plot/plot.sh quality DIR
set terminal pngcairo noenhanced size 1100,700 font ",10"
set output dir."/quality.png"
load lib."/setup.gp"
methods = system("cat ".dir."/methods.txt")
genres = system("cat ".dir."/genres.txt")
set multiplot layout 2,3 title "Perplexity increase against budget (SpAx Fig. 5): ".setup
s = 5.0	# the increase (%) where the axis turns from linear to logarithmic
set nonlinear y via asinh(y / s) inverse s * sinh(y)
set yrange [-2:*]
set offsets graph 0, graph 0, graph 0.05, graph 0
set ytics ("0" 0, "+10%%" 10, "+20%%" 20, "+50%%" 50, "+100%%" 100, "+200%%" 200, "+500%%" 500, \
	"+1000%%" 1000, "+2000%%" 2000, "+5000%%" 5000, "+10000%%" 10000)
set xrange [0:1.02]
set xlabel "budget (bytes needed / dense bytes)"
set ylabel "perplexity increase (asinh scale)"
set grid
set key top right
set style data linespoints
set style line 10 dt (10, 6) lw 1.5 lc rgb "#444444"
set style line 20 dt (3, 4) lw 2 lc rgb "#444444"
set title "mean over genres"
plot for [i=1:words(methods)] dir."/quality.dat" index (i-1) using 1:2 \
	title word(methods, i) lw 2, 10 title "+10%" ls 10, 20 title "+20%" ls 20
set key off
do for [j=1:words(genres)] {
	set title word(genres, j)
	plot for [i=1:words(methods)] dir."/genres.dat" index ((j-1)*words(methods) + i - 1) \
		using 1:2 lw 2, 10 ls 10, 20 ls 20
}
unset multiplot
