"""Calls a Go function of a user's own c-shared library (examples/userlib)
on tensors from NumPy or PyTorch, without copies either way.

    DLBRIDGE_LIB=build/libuserlib.so PYTHONPATH=pybridge/python python3 examples/userlib/use_userlib.py
"""

import ctypes

import dlbridge

lib = dlbridge.library()  # libuserlib.so: dlbridge's ABI plus userlib_normalize_rows
lib.userlib_normalize_rows.argtypes = [ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]
lib.userlib_normalize_rows.restype = ctypes.c_int32


def normalize_rows(x):
    """Scale the rows of x (2-d float32, any zero-copy source) to unit length
    in place, in Go; return the old row norms as a dlbridge.Tensor."""
    t = dlbridge.asarray(x)
    out = ctypes.c_uint64()
    dlbridge.check(lib.userlib_normalize_rows(t.handle, ctypes.byref(out)))
    return dlbridge.from_handle(out.value)


def main():
    if not hasattr(lib, "userlib_normalize_rows"):
        raise SystemExit("DLBRIDGE_LIB does not point at libuserlib.so")
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        a = np.array([[3, 4], [6, 8], [0, 0]], dtype=np.float32)
        norms = normalize_rows(a)
        print("numpy in : ptr %#x, rows now %s" % (a.ctypes.data, a.round(3).tolist()))
        print("norms    : %s (made in Go, ptr %#x)" % (np.asarray(norms).tolist(), norms.data_ptr()))
        assert np.allclose(a, [[0.6, 0.8], [0.6, 0.8], [0, 0]])
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        x = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
        norms = normalize_rows(x)
        print("torch in : ptr %#x, rows now %s" % (x.data_ptr(), x.tolist()))
        print("norms    : %s" % torch.from_dlpack(norms).tolist())
    # Errors come back as Python exceptions with Go's message.
    try:
        normalize_rows(dlbridge.zeros((2, 2), dtype="float64"))
    except TypeError as e:
        print("error    :", e)
    t = dlbridge.arange(4, dtype="float32")[None, :]
    print("dlbridge : norms %s, rows now %s" % (normalize_rows(t).tolist(), [round(v, 3) for v in t[0].tolist()]))


if __name__ == "__main__":
    main()
