"""dlbridge.Stream, dlbridge.Event, dlbridge.synchronize and the stream
argument rule (as_stream_handle). The CUDA tests run against the fake driver
in CI (make pytest-fakecuda) and against the real one on the GPU machine."""

import gc
import struct
import threading

import pytest

import dlbridge
from dlbridge import _stream
from dlbridge._stream import as_stream_handle

N = 1024
SEVEN = 7


class CudaStreamMethod:
    def __init__(self, h):
        self.h = h

    def __cuda_stream__(self):
        return (0, self.h)


class CudaStreamProperty:  # early cuda.core made it a property
    @property
    def __cuda_stream__(self):
        return (0, 0x55)


class TorchLikeStream:  # torch.cuda.Stream: the handle is .cuda_stream
    cuda_stream = 0x7F00

    class device:
        index = 1


class ExternalStream:  # cupy.cuda.ExternalStream: the handle is .ptr
    ptr = 0x7F10
    device_id = 0


@pytest.mark.parametrize("arg, want", [
    (None, 0),
    (0, 0),
    (1, 1),
    (0x7FFF_0000_1234, 0x7FFF_0000_1234),
    (2**64 - 1, 2**64 - 1),
    (CudaStreamMethod(0x1234), 0x1234),
    (CudaStreamProperty(), 0x55),
    (TorchLikeStream(), 0x7F00),
    (ExternalStream(), 0x7F10),
])
def test_as_stream_handle_accepts(arg, want):
    assert as_stream_handle(arg) == want


def test_as_stream_handle_numpy_integer():
    numpy = pytest.importorskip("numpy")
    assert as_stream_handle(numpy.uint64(9)) == 9


@pytest.mark.parametrize("arg, exc, match", [
    (True, TypeError, r"stream must be None, an int CUstream handle.*; got True \(bool\)"),
    (1.0, TypeError, r"got 1\.0 \(float\)"),
    ("1", TypeError, r"got '1' \(str\)"),
    (object(), TypeError, "torch/cupy stream"),
    (-1, ValueError, r"stream=-1 out of range for uint64 \(0\.\.18446744073709551615\)"),
    (2**64, ValueError, r"stream=18446744073709551616 out of range for uint64"),
    (CudaStreamMethod(-5), ValueError, r"__cuda_stream__\(\)\[1\]=-5 out of range for uint64"),
    (CudaStreamMethod(False), TypeError, r"__cuda_stream__\(\)\[1\]=False \(bool\) is not an integer"),
    (CudaStreamMethod(2.0), TypeError, r"=2\.0 \(float\) is not an integer"),
])
def test_as_stream_handle_refuses(arg, exc, match):
    with pytest.raises(exc, match=match):
        as_stream_handle(arg)


def test_as_stream_handle_protocol_shape():
    class Bad:
        def __cuda_stream__(self):
            return 5

    class Version1:
        def __cuda_stream__(self):
            return (1, 5)

    with pytest.raises(TypeError, match=r"must return \(version, handle\), got 5"):
        as_stream_handle(Bad())
    with pytest.raises(ValueError, match="protocol version 1"):
        as_stream_handle(Version1())


def test_stream_device_hints():
    assert _stream._stream_device(TorchLikeStream(), -1) == 1
    assert _stream._stream_device(ExternalStream(), -1) == 0
    assert _stream._stream_device(5, -1) == -1
    assert _stream._stream_device(None, 3) == 3


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"device": -1}, ValueError, "device -1 is out of range"),
    ({"device": "cpu"}, ValueError, "streams live on CUDA devices"),
    ({"device": "cuda:x"}, ValueError, "'x' is not a device number"),
    ({"device": True}, TypeError, "not a bool"),
    ({"priority": True}, TypeError, r"priority=True \(bool\) is not an integer"),
    ({"priority": 2**31}, ValueError, r"priority=2147483648 out of range for int32 \(-2147483648\.\.2147483647\)"),
    ({"priority": 1.5}, TypeError, r"priority=1\.5 \(float\) is not an integer"),
])
def test_stream_argument_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        dlbridge.Stream(**kwargs)


def test_event_before_record_needs_no_device():
    e = dlbridge.Event()
    assert e.query() and e.device is None and not e.enable_timing
    e.synchronize()
    e.wait()  # nothing recorded: nothing to wait for, as in PyTorch
    with pytest.raises(ValueError, match="enable_timing=True"):
        e.elapsed_time(dlbridge.Event())
    t = dlbridge.Event(enable_timing=True)
    with pytest.raises(ValueError, match="both events recorded"):
        t.elapsed_time(dlbridge.Event(enable_timing=True))
    with pytest.raises(TypeError, match="needs a dlbridge.Event"):
        t.elapsed_time(3)
    e._close()
    with pytest.raises(ValueError, match="event is closed"):
        e.query()


def test_without_cuda():
    if dlbridge.cuda_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(RuntimeError, match="no CUDA driver"):
        dlbridge.Stream()
    with pytest.raises(RuntimeError, match="no CUDA driver"):
        dlbridge.synchronize()
    with pytest.raises(RuntimeError, match="no CUDA driver"):
        dlbridge.Event().record()


# ---- with a CUDA driver (fake in CI, real on the GPU machine) ----

gpu = pytest.mark.gpu


@gpu
def test_stream_basics():
    s = dlbridge.Stream()
    raw = s.cuda_stream
    assert raw not in (0, 1, 2) and s.handle == raw
    assert s.__cuda_stream__() == (0, raw) and as_stream_handle(s) == raw
    assert s.device == "cuda:0" and s.device_id == 0
    assert isinstance(s.priority, int)
    assert s.query()
    s.synchronize()
    assert s == s and s != dlbridge.Stream() and hash(s) == hash(s)
    assert "cuda:0" in repr(s)
    assert dlbridge.Stream("cuda:0").device == "cuda:0"


@gpu
def test_stream_priority():
    s = dlbridge.Stream(priority=-1)
    # The driver clamps to the device's range [greatest, 0], so -1 stays -1
    # or becomes the most urgent priority there is; never above 0.
    assert s.priority <= 0


@gpu
def test_stream_closed_exactly_once(stats):
    before = _stream._live_counts()
    s = dlbridge.Stream()
    e = dlbridge.Event()
    e.record(s)
    assert _stream._live_counts() == (before[0] + 1, before[1] + 1)
    h = s._h
    s._close()
    s._close()  # the Python object forgets its handle: a no-op
    with pytest.raises(ValueError, match="stream is closed"):
        s.synchronize()
    # Go refuses a second close of the same handle (ValueError, code 3).
    with pytest.raises(ValueError, match="not live"):
        dlbridge._lib._core.dlb_stream_close(h)
    del e
    gc.collect()
    assert _stream._live_counts() == before


@gpu
def test_stream_dropped_with_queued_work(driver):
    """A Stream collected while work is queued on it: nothing is cut short
    (cuStreamDestroy lets queued work finish)."""
    p = driver.alloc(4 * N)
    try:
        s = dlbridge.Stream()
        driver.memset32(p, SEVEN, N, s.cuda_stream)
        e = s.record_event()
        del s
        gc.collect()
        e.synchronize()
        assert driver.read(p, 4 * N, 1) == struct.pack("<I", SEVEN) * N
    finally:
        driver.free(p)


@gpu
def test_streams_from_many_threads():
    before = _stream._live_counts()
    errors = []

    def work():
        try:
            for _ in range(20):
                s = dlbridge.Stream()
                ev = s.record_event()
                other = dlbridge.Stream()
                other.wait_stream(s)
                other.wait_event(ev)
                other.synchronize()
                s._close()
                other._close()
        except Exception as ex:  # reported below
            errors.append(ex)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    gc.collect()
    assert _stream._live_counts() == before


def _write_then_read(driver, order):
    """Queue a write of SEVEN on stream a, order stream b after it with
    order(a, b), then read on b: what b sees."""
    p = driver.alloc(4 * N)
    try:
        driver.memset32(p, 0, N, 1)  # legacy stream: done at once
        dlbridge.synchronize()
        a, b = dlbridge.Stream(), dlbridge.Stream()
        driver.memset32(p, SEVEN, N, a.cuda_stream)
        order(a, b)
        got = driver.read(p, 4 * N, b.cuda_stream)
        a.synchronize()
        return got
    finally:
        driver.free(p)


WANT = struct.pack("<I", SEVEN) * N


def _record_wait(a, b):
    e = dlbridge.Event()
    e.record(a)
    assert e.device == "cuda:0"
    b.wait_event(e)


def _record_event_wait(a, b):
    a.record_event().wait(b)


@gpu
@pytest.mark.parametrize("order", [
    lambda a, b: b.wait_stream(a),
    lambda a, b: b.wait_stream(a.cuda_stream),  # a bare handle, taken on b's device
    _record_wait,
    _record_event_wait,
], ids=["wait_stream", "wait_stream_int", "event_record_wait", "record_event"])
def test_ordering(driver, order):
    assert _write_then_read(driver, order) == WANT


@gpu
def test_unordered_read_is_stale_on_the_fake(fake_driver):
    """The control for test_ordering: without the wait the fake driver's
    reader sees the old bytes (its queues run only when waited for), so
    test_ordering fails if a wait is missing."""
    assert _write_then_read(fake_driver, lambda a, b: None) == b"\0" * (4 * N)


@gpu
def test_wait_stream_issues_one_record_and_wait(fake_driver):
    a, b = dlbridge.Stream(), dlbridge.Stream()
    rec, wait = fake_driver.calls("cuEventRecord"), fake_driver.calls("cuStreamWaitEvent")
    b.wait_stream(a)
    assert fake_driver.calls("cuEventRecord") - rec == 1
    assert fake_driver.calls("cuStreamWaitEvent") - wait == 1
    b.wait_stream(b)  # itself: nothing to do
    assert fake_driver.calls("cuStreamWaitEvent") - wait == 1


@gpu
def test_query_reports_pending_work(fake_driver):
    p = fake_driver.alloc(4 * N)
    try:
        s = dlbridge.Stream()
        fake_driver.memset32(p, SEVEN, N, s.cuda_stream)
        e = s.record_event()
        assert not s.query()  # the fake runs one queued operation per query
        while not s.query():
            pass
        assert e.query()
        assert fake_driver.read(p, 4 * N, 1) == WANT
    finally:
        fake_driver.free(p)


@gpu
def test_event_timing():
    s = dlbridge.Stream()
    start, end = dlbridge.Event(enable_timing=True), dlbridge.Event(enable_timing=True)
    start.record(s)
    end.record(s)
    end.synchronize()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float) and ms >= 0
    assert start.elapsed_time(start) == 0
    plain = s.record_event()
    plain.synchronize()
    with pytest.raises(ValueError, match="enable_timing=True"):
        start.elapsed_time(plain)


@gpu
def test_event_record_on_work_stream():
    e = dlbridge.Event()
    e.record()  # None: dlbridge's work stream of cuda:0
    e.synchronize()
    assert e.query() and e.device == "cuda:0"
    dlbridge.Stream().wait_event(e)


@gpu
def test_synchronize():
    dlbridge.synchronize()
    dlbridge.synchronize(0)
    dlbridge.synchronize("cuda:0")
    n = dlbridge.cuda_device_count()
    with pytest.raises(ValueError, match="there are %d CUDA devices" % n):
        dlbridge.synchronize(n)
    with pytest.raises(ValueError, match="there are %d CUDA devices" % n):
        dlbridge.Stream(n)


@gpu
def test_two_devices():
    if dlbridge.cuda_device_count() < 2:
        pytest.skip("needs two CUDA devices (FAKECUDA_DEVICES=2 with the fake)")
    s0, s1 = dlbridge.Stream(0), dlbridge.Stream(1)
    assert s1.device == "cuda:1"
    s1.wait_stream(s0)  # across devices: the event is s0's, the wait s1's
    e = dlbridge.Event()
    e.record(s0)
    with pytest.raises(ValueError, match="recorded on cuda:0; it cannot be recorded on a stream of cuda:1"):
        e.record(s1)
    e.wait(s1)
    s1.synchronize()


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch %s has no CUDA" % torch.__version__)
    return torch


@gpu
def test_torch_streams_interoperate():
    torch = _torch_cuda()
    ts = torch.cuda.Stream()
    assert as_stream_handle(ts) == ts.cuda_stream
    assert _stream._stream_device(ts, -1) == ts.device.index
    s = dlbridge.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    with torch.cuda.stream(ts):
        torch.cuda._sleep(50_000_000)
        x.fill_(3.0)
    s.wait_stream(ts)  # s now runs after torch's slow fill
    with torch.cuda.stream(torch.cuda.ExternalStream(s.cuda_stream)):
        total = x.sum()
    s.synchronize()
    assert total.item() == 3.0 * (1 << 20)


@gpu
def test_cupy_and_cuda_core_streams():
    cupy = pytest.importorskip("cupy")
    cs = cupy.cuda.Stream(non_blocking=True)
    assert as_stream_handle(cs) == cs.ptr
    s = dlbridge.Stream()
    s.wait_stream(cs)
    s.synchronize()
    try:
        from cuda.core import Device
    except ImportError:
        try:
            from cuda.core.experimental import Device
        except ImportError:
            pytest.skip("cuda.core is not installed")
    dev = Device(0)
    dev.set_current()
    theirs = dev.create_stream(s)  # cuda.core takes our __cuda_stream__
    assert int(theirs.handle) == s.cuda_stream
    assert as_stream_handle(theirs) == s.cuda_stream
