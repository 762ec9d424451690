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
