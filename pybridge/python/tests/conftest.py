import gc

import pytest

import dlbridge


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA driver and device")


def pytest_collection_modifyitems(config, items):
    if dlbridge.cuda_available():
        return
    skip = pytest.mark.skip(reason="no CUDA driver or device (dlbridge.cuda_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def stats():
    """A function returning debug_stats() after a full garbage collection."""

    def get():
        gc.collect()
        return dlbridge.debug_stats()

    return get


# ---- the CUDA driver the library uses, through ctypes ----
#
# `make pytest-fakecuda` runs this suite against the fake libcuda of
# testdata/fakecuda (DLBRIDGE_LIBCUDA names it): every test marked gpu then
# runs without a GPU. On the GPU machine the same tests use the real driver.
# Tests that need raw device memory (dlbridge.from_pointer, streams fed by
# other code) get it from the `driver` fixture, as a user's ctypes code would.


class Driver:
    """The CUDA driver dlbridge loaded (DLBRIDGE_LIBCUDA or libcuda.so.1),
    called through ctypes as a user's own code would call it."""

    def __init__(self):
        import ctypes
        import os

        self.path = os.environ.get("DLBRIDGE_LIBCUDA") or "libcuda.so.1"
        # The same path gives the same handle dlbridge's Go code got from
        # dlopen, so both see one driver state.
        self.lib = ctypes.CDLL(self.path)
        self.fake = hasattr(self.lib, "fakecuda_calls")
        self._ctypes = ctypes
        self._ctxs = {}
        self.check(self.lib.cuInit(0), "cuInit")

    def check(self, rc, what):
        if rc != 0:
            raise RuntimeError("CUDA driver: %s failed with code %d" % (what, rc))

    def _current(self, device):
        c = self._ctypes
        ctx = self._ctxs.get(device)
        if ctx is None:
            dev = c.c_int()
            self.check(self.lib.cuDeviceGet(c.byref(dev), device), "cuDeviceGet")
            h = c.c_void_p()
            self.check(self.lib.cuDevicePrimaryCtxRetain(c.byref(h), dev), "cuDevicePrimaryCtxRetain")
            ctx = self._ctxs[device] = h
        self.check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def alloc(self, nbytes, device=0):
        """cuMemAlloc: the address of nbytes of device memory."""
        c = self._ctypes
        self._current(device)
        p = c.c_uint64()
        self.check(self.lib.cuMemAlloc_v2(c.byref(p), c.c_size_t(nbytes)), "cuMemAlloc_v2")
        return p.value

    def free(self, ptr, device=0):
        self._current(device)
        self.check(self.lib.cuMemFree_v2(self._ctypes.c_uint64(ptr)), "cuMemFree_v2")

    def alloc_host(self, nbytes, device=0):
        """cuMemHostAlloc: pinned host memory."""
        c = self._ctypes
        self._current(device)
        p = c.c_void_p()
        self.check(self.lib.cuMemHostAlloc(c.byref(p), c.c_size_t(nbytes), 0), "cuMemHostAlloc")
        return p.value

    def free_host(self, ptr, device=0):
        self._current(device)
        self.check(self.lib.cuMemFreeHost(self._ctypes.c_void_p(ptr)), "cuMemFreeHost")

    def memset32(self, ptr, value, count, stream, device=0):
        """cuMemsetD32Async: count 32-bit words of value at ptr, queued on stream."""
        c = self._ctypes
        self._current(device)
        self.check(self.lib.cuMemsetD32Async(c.c_uint64(ptr), c.c_uint32(value), c.c_size_t(count),
                                             c.c_void_p(stream)), "cuMemsetD32Async")

    def read(self, ptr, nbytes, stream, device=0):
        """nbytes at ptr, copied on stream into fresh pageable host memory
        (cuMemcpyDtoHAsync returns once the copy is done)."""
        c = self._ctypes
        self._current(device)
        buf = (c.c_char * nbytes)()
        self.check(self.lib.cuMemcpyDtoHAsync_v2(buf, c.c_uint64(ptr), c.c_size_t(nbytes), c.c_void_p(stream)),
                   "cuMemcpyDtoHAsync_v2")
        self.check(self.lib.cuStreamSynchronize(c.c_void_p(stream)), "cuStreamSynchronize")
        return bytes(buf)

    def calls(self, fn):
        """How many times the fake driver's entry point fn was called."""
        f = self.lib.fakecuda_calls
        f.restype = self._ctypes.c_long
        return f(fn.encode())

    def pending(self, stream):
        """Operations queued on a stream of the fake driver."""
        return self.lib.fakecuda_pending(self._ctypes.c_void_p(stream))


@pytest.fixture(scope="session")
def driver():
    """The CUDA driver (fake or real) through ctypes; skips without one."""
    if not dlbridge.cuda_available():
        pytest.skip("no CUDA driver or device (dlbridge.cuda_available() is False)")
    return Driver()


@pytest.fixture
def fake_driver(driver):
    """The fake driver of testdata/fakecuda, for tests that use its controls
    (call counts, queues that run only when waited for); skips on a real one."""
    if not driver.fake:
        pytest.skip("needs the fake CUDA driver (make pytest-fakecuda)")
    return driver


@pytest.fixture
def no_auto_gc():
    """No automatic collection until the test ends, after a full one where
    tensors of earlier tests are still alive: reference counts and counters
    compared inside the test then move only through the test's own objects,
    not through earlier garbage collected at a random moment."""
    was = gc.isenabled()
    gc.disable()
    if dlbridge.debug_stats()["live_tensors"]:
        gc.collect()
    try:
        yield
    finally:
        if was:
            gc.enable()
