# Study 1 (tests/bench/study-quality.sh): perplexity increase against the
# realised budget, mean over the genres and per genre. gnuplot -e "dir='...'"
set terminal pngcairo noenhanced size 1100,700 font ",10"
set output dir."/quality.png"
methods = system("cat ".dir."/methods.txt")
genres = system("cat ".dir."/genres.txt")
set multiplot layout 2,3 title "Perplexity increase against budget (SpAx Fig. 5)"
set yrange [-5:60]

set xrange [0:1.02]
set xlabel "budget (bytes needed / dense bytes)"
set ylabel "perplexity increase (%)"
set grid
set key top right
set style data linespoints
set title "mean over genres"
plot for [i=1:words(methods)] dir."/quality.dat" index (i-1) using 1:2 \
	title word(methods, i) lw 2, 10 title "+10%" dt 2 lc "gray", 20 title "+20%" dt 3 lc "gray"
set key off
do for [j=1:words(genres)] {
	set title word(genres, j)
	plot for [i=1:words(methods)] dir."/genres.dat" index ((j-1)*words(methods) + i - 1) \
		using 1:2 lw 2, 10 dt 2 lc "gray", 20 dt 3 lc "gray"
}
unset multiplot
