# Study 5 (tests/bench/study-tasks.sh): top-40% neuron overlap and read
# length, profile genre by test genre; selective loading against gamma.
# tests/bench/plot/plot.sh tasks DIR
set terminal pngcairo noenhanced size 1250,420 font ",10"
set output dir."/tasks.png"
load lib."/setup.gp"
genres = system("cat ".dir."/genres.txt")
n = words(genres)
set multiplot layout 1,3 title "Profiles and tasks (SelectInfer Fig. 2-4, Neuralink Table 8)".": ".setup
set xtics () ; set ytics ()
do for [i=1:n] { set xtics add (word(genres, i) i-1); set ytics add (word(genres, i) i-1) }
set xlabel "test genre"
set ylabel "profile genre"
set palette defined (0 "#ffffff", 1 "#2166ac")
set yrange [n-0.5:-0.5]
set xrange [-0.5:n-0.5]
set title "top-40% FFN neuron overlap"
plot dir."/overlap.dat" matrix with image notitle, \
	'' matrix using 1:2:(sprintf("%.2f", $3)) with labels notitle
set title "mean read length (coact placement of the profile genre)"
plot dir."/readlen.dat" matrix with image notitle, \
	'' matrix using 1:2:(sprintf("%.2f", $3)) with labels notitle
unset xtics; unset ytics; set xtics; set ytics
set autoscale
set xlabel "gamma (share of FFN neurons kept)"
set ylabel "perplexity increase (%), mean over genres"
set title "selective loading (sf-pack --keep)"
set grid
set key top right
kinds = system("cat ".dir."/select-kinds.txt")
if (words(kinds) > 0) {
	plot for [i=1:words(kinds)] dir."/select.dat" index (i-1) using 1:2 with linespoints lw 2 \
		title word(kinds, i)
} else {
	set label 1 "not measured (no --keep support in sf-run)" at graph 0.05, 0.5
	set yrange [0:1]; set xrange [0:1]
	plot 2 notitle
}
unset multiplot
