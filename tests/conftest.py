import os
import sys

import pytest

# Nothing may reach a model hub at test time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Under pytest-xdist (`make test` runs one worker per core) each worker, and each process a test starts, uses one
# torch thread: workers with a thread per core each would oversubscribe the cores several times over.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"


@pytest.fixture
def isolated_registries(monkeypatch):
    """Registries, sys.path and sys.modules as they were once the test ends (the names it registers go)."""
    from envace_gym import backends, suites

    for registry in (backends._BACKENDS, suites._SUITES):
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
        monkeypatch.setattr(registry, "_group_read", registry._group_read)
        monkeypatch.setattr(registry, "_from_group", set(registry._from_group))
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    suites._load_registered.cache_clear()
    yield monkeypatch
    suites._load_registered.cache_clear()
    for name in set(sys.modules) - before:
        if name.startswith(("usermod_", "envace_fake_plugin", "library_tools")):  # the tests' user modules
            del sys.modules[name]


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped without one (reason: no CUDA device)")


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` are skipped where CUDA is not available, so CI never needs a GPU."""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu:
        return
    import torch  # only when a GPU test was collected: the rest of the suite does not pay for it here

    if torch.cuda.is_available():
        return
    # A skipif put first: pytest evaluates skipif marks before skip marks, in order, and the first that holds
    # gives the reason, so "no CUDA device" wins over a test's own skipif (e.g. vllm not installed).
    skip = pytest.mark.skipif(True, reason="no CUDA device")
    for item in gpu:
        item.add_marker(skip, append=False)
