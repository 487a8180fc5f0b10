import os
import sys

import pytest

# Nothing may reach a model hub at test time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


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
