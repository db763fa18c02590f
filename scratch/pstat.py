import pstats, sys
s = pstats.Stats(sys.argv[1])
s.sort_stats("cumulative")
s.print_callees("generate")
s.sort_stats("tottime").print_stats(30)
