"""The installed stack is the lock's, and the lock satisfies setup.cfg's ranges.

The Makefile installs every package of requirements/lock-cpu.txt at its exact version and records the lock's
name in the venv's stamp (``.venv/.envace-installed``); the comparison runs only in such a venv and skips
elsewhere (``make test-latest``'s .venv-latest, .venv-verl, an environment of your own).

``python tests/test_lock.py --diff LOCK`` prints the installed versions that differ from LOCK and the packages
installed that it does not list (``make test-latest`` runs it), and exits 0.
"""

import configparser
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).parent.parent
LOCK = ROOT / "requirements" / "lock-cpu.txt"
# The extras the Makefile installs (its EXTRAS): the lock is compiled from these and install_requires.
EXTRAS = ("test", "benchmarks", "trl", "docs")
STAMP = Path(sys.prefix) / ".envace-installed"


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, str]:
    """name -> version of every ``name==version`` line of a pip-compile output that applies here."""
    pins = {}
    for raw in path.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip().rstrip("\\").strip()
        if not line or line.startswith(("#", "-")):
            continue  # a comment, an annotation, an option
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        (spec,) = requirement.specifier  # pip-compile writes one exact pin per package
        assert spec.operator == "==", raw
        pins[normalise(requirement.name)] = spec.version
    return pins


def installed_versions() -> dict[str, str]:
    return {normalise(dist.metadata["Name"]): dist.version for dist in metadata.distributions()}


def lock_differences(path: Path) -> list[str]:
    """One line for each package of the lock that is missing here or installed at another version.

    Versions compare as PEP 440 versions, local labels included: ``2.13.0+cpu`` is not ``2.13.0``."""
    installed = installed_versions()
    differences = []
    for name, locked in sorted(read_lock(path).items()):
        have = installed.get(name)
        if have is None:
            differences.append(f"{name}: locked {locked}, not installed")
        elif Version(have) != Version(locked):
            differences.append(f"{name}: locked {locked}, installed {have}")
    return differences


def unlocked_requirements(roots: list[Requirement], pins: dict[str, str]) -> list[str]:
    """The requirements, from ``roots`` down through the installed packages' metadata (extras followed), that
    name a package the lock does not list: the Makefile installs the lock with --no-deps, so nothing else would
    install them."""
    missing, seen = [], set()
    todo = [(requirement, "setup.cfg") for requirement in roots]
    while todo:
        requirement, parent = todo.pop()
        name = normalise(requirement.name)
        if (name, frozenset(requirement.extras)) in seen:
            continue
        seen.add((name, frozenset(requirement.extras)))
        if name not in pins:
            missing.append(f"{requirement} (required by {parent})")
            continue
        for line in metadata.distribution(name).requires or []:
            child = Requirement(line)
            extras = [""] + sorted(requirement.extras)
            if child.marker is None or any(child.marker.evaluate({"extra": extra}) for extra in extras):
                todo.append((child, name))
    return sorted(missing)


def stamped_lock() -> Path | None:
    """The lock the Makefile installed into this venv, from its stamp; None where no lock is recorded."""
    if not STAMP.is_file() or not STAMP.read_text().strip():
        return None
    return ROOT / STAMP.read_text().strip()


def require_the_lock_installed():
    lock = stamped_lock()
    if lock is None:
        pytest.skip(f"not the Makefile's venv ({sys.prefix} records no lock): the installed stack is not the lock's")
    assert lock == LOCK, f"this venv was installed from {lock}, not {LOCK}"


def test_every_locked_package_is_installed_at_its_locked_version():
    require_the_lock_installed()
    differences = lock_differences(LOCK)
    assert not differences, f"the venv differs from {LOCK.name} (`make setup` installs it): {differences}"


def test_the_lock_lists_every_requirement_of_what_it_installs():
    require_the_lock_installed()
    missing = unlocked_requirements(setup_cfg_requirements(), read_lock(LOCK))
    assert not missing, f"{LOCK.name} lacks requirements (`make lock`): {missing}"


def test_a_version_other_than_the_locked_one_is_reported(tmp_path):
    # The comparison itself can fail: a copy of the lock with one version changed, and torch without its +cpu.
    installed = installed_versions()
    pytest_version = installed["pytest"]
    text = "\n".join(
        [
            "# a comment",
            f"pytest=={pytest_version}.post99",
            "    # via envace-gym (setup.cfg)",
            f"Pluggy=={installed['pluggy']}",  # another spelling of the name, same version: no difference
            "not-a-package-we-install==1.0",
            'skipped-elsewhere==1.0 ; sys_platform == "no-such-platform"',
        ]
    )
    if "torch" in installed:
        text += f"\ntorch=={Version(installed['torch']).public}"
    lock = tmp_path / "lock.txt"
    lock.write_text(text + "\n")
    differences = lock_differences(lock)
    expected = [
        "not-a-package-we-install: locked 1.0, not installed",
        f"pytest: locked {pytest_version}.post99, installed {pytest_version}",
    ]
    if "torch" in installed and Version(installed["torch"]).local:
        expected.append(f"torch: locked {Version(installed['torch']).public}, installed {installed['torch']}")
    assert differences == expected


def setup_cfg_requirements() -> list[Requirement]:
    """install_requires and the Makefile's extras, as setup.cfg lists them."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    sections = [config["options"]["install_requires"]]
    sections += [config["options.extras_require"][extra] for extra in EXTRAS]
    lines = [line.strip() for section in sections for line in section.splitlines()]
    return [Requirement(line) for line in lines if line and not line.startswith("#")]


def test_a_requirement_missing_from_the_lock_is_reported():
    # pytest requires pluggy (and iniconfig...): a lock of pytest alone lacks them.
    pytest_only = {"pytest": installed_versions()["pytest"]}
    missing = unlocked_requirements([Requirement("pytest")], pytest_only)
    assert any(line.startswith("pluggy") and line.endswith("(required by pytest)") for line in missing), missing
    assert not [line for line in missing if "required by setup.cfg" in line]


def test_the_lock_satisfies_setup_cfg_and_bounds_each_major_version():
    pins = read_lock(LOCK)
    assert pins["torch"] == "2.13.0+cpu"
    assert not [name for name in pins if name.startswith(("nvidia-", "cuda", "triton"))], "CUDA packages locked"
    outside, unbounded = [], []
    for requirement in setup_cfg_requirements():
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        locked = pins.get(normalise(requirement.name))
        if locked is None or not requirement.specifier.contains(locked, prereleases=True):
            outside.append(f"{requirement} (locked: {locked})")
        if not any(spec.operator in ("<", "==", "~=") for spec in requirement.specifier):
            unbounded.append(str(requirement))
    assert not outside, f"{LOCK.name} is out of date with setup.cfg (`make lock`): {outside}"
    assert not unbounded, f"setup.cfg ranges without an upper bound: {unbounded}"


if __name__ == "__main__":
    if sys.argv[1:2] != ["--diff"] or len(sys.argv) != 3:
        sys.exit("usage: python tests/test_lock.py --diff LOCK")
    lock = Path(sys.argv[2])
    lines = lock_differences(lock)
    unlocked = sorted(set(installed_versions()) - set(read_lock(lock)))
    print(f"{len(lines)} locked packages differ from {lock}" + (":" if lines else ""))
    for line in lines:
        print("  " + line)
    print(f"installed, not in the lock: {', '.join(f'{n}=={installed_versions()[n]}' for n in unlocked)}")
