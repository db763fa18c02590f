import numpy as np

from app.audio.ring_buffer import SpscRing


def test_wraps_around_and_keeps_order():
    ring = SpscRing(8)
    out = np.zeros(8, dtype=np.float32)
    stream = np.arange(100, dtype=np.float32)
    written = read = 0
    received = []
    for chunk in (3, 5, 2, 7, 1, 6, 4):  # sizes that cross the end of the buffer
        written += ring.write(stream[written:written + chunk])
        n = ring.read_into(out[:5])
        received.extend(out[:n])
        read += n
    assert read == written
    np.testing.assert_array_equal(received, stream[:read])


def test_full_ring_takes_only_what_fits_and_empty_ring_gives_nothing():
    ring = SpscRing(4)
    assert ring.write(np.ones(6, dtype=np.float32)) == 4
    assert ring.free() == 0 and ring.available() == 4
    out = np.zeros(6, dtype=np.float32)
    assert ring.read_into(out) == 4
    assert ring.read_into(out) == 0
