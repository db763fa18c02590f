"""`python3 -m bench` (__main__.py): ours against the stock runtime on a CUDA GPU (run.py), the
numbers it reports (report.py), the stock runtime driven frame by frame (stock.py), kernels per
stage (kernels.py), teacher-forced fidelity in bf16 and int8 (fidelity.py), DiffuPlex against
our AR path (diffuplex.py), Step-Audio2's token2wav against the stock minicpmo-utils
(token2wav.py over stock_token2wav.py), and two trees of the repository alternated on one GPU
(alternate.py)."""
