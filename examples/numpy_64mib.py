#!/usr/bin/env python3
"""Store a 64 MiB numpy array in kvd and load it back, without copies.

    scripts/softroce run sh -c 'BUILD/apps/kvd --bind $SOFTROCE_ADDR & sleep 5;
        PYTHONPATH=BUILD/python python3 examples/numpy_64mib.py $SOFTROCE_ADDR:7471'

(an ASan build also needs LD_PRELOAD of libasan, see docs/python.md.)

1. set(): the server RDMA READs the array's own memory (no bytes object).
2. get(): a read-only memoryview of the buffer the value was RDMA'd into;
   numpy.frombuffer wraps it without a copy.
3. get_into(): RDMA straight into a preallocated array.
"""

import sys
import time

import numpy as np

import rkv

server = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7471"
n = (64 << 20) // 4
weights = np.random.default_rng(0).standard_normal(n, dtype=np.float32)  # 64 MiB

with rkv.Client(server) as client:
    t = time.perf_counter()
    client.set(b"model/weights", weights)
    print(f"set  {weights.nbytes >> 20} MiB in {time.perf_counter() - t:.3f} s")

    t = time.perf_counter()
    view = client.get(b"model/weights")
    loaded = np.frombuffer(view, dtype=np.float32)  # read-only, shares the landing buffer
    print(f"get  {loaded.nbytes >> 20} MiB in {time.perf_counter() - t:.3f} s, "
          f"bytes copied by the client: {client.counters()['bytes_copied']}")
    assert np.array_equal(loaded, weights)

    out = np.empty_like(weights)
    t = time.perf_counter()
    client.get_into(b"model/weights", out)
    print(f"get_into {out.nbytes >> 20} MiB in {time.perf_counter() - t:.3f} s")
    assert np.array_equal(out, weights)

    del loaded
    view.release()  # the landing buffer is freed here
print("ok: the array round-tripped byte-exactly")
