# Study 6 (tests/bench/study-scale.sh): seconds per layer of every offline
# stage per model (log scale). A bar that is absent says why in the plot:
# "not run" (the study does not run that stage on that model), "< 10 ms"
# (under the resolution of GNU time); an estimated bar is labelled so. tests/bench/plot/plot.sh scale DIR
set terminal pngcairo noenhanced size 1000,540 font ",10"
set output dir."/scale.png"
load lib."/setup.gp"
models = system("cat ".dir."/models.txt")
n = words(models)
set title "Offline stages: seconds per layer against model size, on ".machine
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set logscale y
set grid ytics
set ylabel "seconds per layer"
set xtics rotate by -30
set key outside right top vertical
# the axis: from a decade under the smallest bar, where the labels of
# absent bars stand
stats dir."/scale.dat" using 2 nooutput
lo = STATS_min; hi = STATS_max
do for [i=2:n] {
	stats dir."/scale.dat" using i+1 nooutput
	lo = (STATS_min < lo) ? STATS_min : lo; hi = (STATS_max > hi) ? STATS_max : hi
}
lo = (lo > 0) ? 10**(floor(log10(lo)) - 1) : 1e-4
set yrange [lo:hi * 30]	# room for the label of the tallest bar
x(i) = $0 + (i - (n + 1) / 2.0) / (n + 1.0)	# bar i of a row (clustered, gap 1)
flag(i) = strcol(n + 1 + i)
why(i) = (flag(i) eq "-") ? "not run" : (column(i + 1) == 0) ? "< 10 ms" : (flag(i) eq "e") ? "estimated" : ""
at(i) = (flag(i) eq "-" || column(i + 1) == 0) ? lo * 1.3 : column(i + 1) * 1.3
set label 1 "not run: the study does not run that stage there (calibration needs real weights, not the random 7B-shape model)\n< 10 ms: under the timer's resolution (GNU time, 10 ms)\nestimated: from mix4-5m's time per weight (trellis at the 7B shape, unless TRELLIS_7B=1)" at screen 0.02, 0.1 left font ",9"
set bmargin 10
plot for [i=1:n] dir."/scale.dat" using i + 1:xtic(1) title word(models, i) lt i, \
	for [i=1:n] '' using (x(i)):(at(i)):(why(i)) with labels rotate by 90 left offset 0.6, 0 font ",8" notitle
