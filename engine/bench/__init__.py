"""`duplexcadence bench`: ours against the stock runtime on a CUDA GPU (run.py), the numbers
it reports (report.py), and the stock runtime driven frame by frame (stock.py)."""
