# rate_plot.gp: one PNG per (transport, mode) for pollux-bench-rate --plot DIR.
# Top: latency from the scheduled send time, p50 (dashed) and p99 (solid), vs offered rate.
# Bottom: CPU% (of one core) vs offered rate: poller threads (solid) and application threads
# (dashed), each the sum over the publisher and the subscriber process. One colour per strategy.
#
# Variables (gnuplot -e): prefix  data files are prefix-STRATEGY.dat (columns: rate p50_us
#                                 p99_us pollers_cpu_pct app_cpu_pct p99_9_us)
#                         strategies  space-separated strategy names
#                         outfile     the PNG to write
#                         ttl         the title
if (!exists("prefix") || !exists("strategies") || !exists("outfile")) {
  print "rate_plot.gp: set prefix, strategies and outfile with -e"
  exit status 2
}
if (!exists("ttl")) ttl = prefix
n = words(strategies)
file(i) = prefix . "-" . word(strategies, i) . ".dat"

set terminal pngcairo size 1000,1000 font ",10"
set output outfile
set multiplot layout 2,1 title ttl font ",12"
set grid
set logscale x
set autoscale xfix
set offsets graph 0.05, graph 0.05, 0, 0
set format x "%.0s%c"
set xlabel "offered rate (messages/s)"
set key outside right top

set logscale y
set format y "%g"
set ylabel "latency from scheduled send (us)"
plot for [i=1:n] file(i) using 1:2 with linespoints lc i dt 2 pt 6 title word(strategies, i) . " p50", \
     for [i=1:n] file(i) using 1:3 with linespoints lc i dt 1 pt 7 title word(strategies, i) . " p99"

unset logscale y
set yrange [0:*]
set ylabel "CPU (% of one core, pub + sub)"
plot for [i=1:n] file(i) using 1:4 with linespoints lc i dt 1 pt 7 title word(strategies, i) . " pollers", \
     for [i=1:n] file(i) using 1:5 with linespoints lc i dt 2 pt 6 title word(strategies, i) . " app threads"
unset multiplot
