# Study 6 (tests/bench/study-scale.sh): seconds per layer of every offline
# stage per model (log scale). gnuplot -e "dir='...'"
set terminal pngcairo noenhanced size 900,450 font ",10"
set output dir."/scale.png"
models = system("cat ".dir."/models.txt")
set title "Offline stages: seconds per layer against model size"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set logscale y
set grid ytics
set ylabel "seconds per layer"
set xtics rotate by -30
set key top left
plot for [i=1:words(models)] dir."/scale.dat" using (column(i+1)):xtic(1) title word(models, i)
