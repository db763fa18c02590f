"""bench.frame_ops counts the ATen operations of a frame's small pieces (its figures are the
bench's: README, Benchmark)."""
from bench.frame_ops import count


def test_the_pieces_are_counted():
    ops = count(6)
    assert set(ops) == {"frame_rows", "commit"} and min(ops.values()) > 0
