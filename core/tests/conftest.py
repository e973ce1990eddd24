from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sysconfig
from pathlib import Path

import pytest
from agentsnap_core import Repo


def tree_fingerprint(root: Path, ignore: tuple[str, ...] = (".agentsnap",)) -> dict[str, tuple]:
    """Everything restore must bring back: kind, permission bits, content digest or link target."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames if not (rel_dir == "." and d in ignore))
        for name in dirnames + sorted(filenames):
            if rel_dir == "." and name in ignore:
                continue
            full = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", stat.S_IMODE(st.st_mode))
            else:
                with open(full, "rb") as f:
                    out[rel] = ("f", stat.S_IMODE(st.st_mode), hashlib.sha256(f.read()).hexdigest())
    return out


def store_size(repo: Repo) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(repo.store_dir / "objects"):
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    return total


@pytest.fixture(autouse=True)
def _vault_key_outside_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Secrets-vault keys (repository/vault.py) go under a temp XDG_DATA_HOME, never the user's home."""
    if "XDG_DATA_HOME" not in os.environ or not os.environ["XDG_DATA_HOME"].startswith(str(tmp_path_factory.getbasetemp())):
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.getbasetemp() / "xdg-data"))
    monkeypatch.delenv("AGENTSNAP_VAULT_KEY_FILE", raising=False)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    r = Repo.init(tmp_path / "work")
    yield r
    r.close()


@pytest.fixture(scope="session")
def site_packages_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of a real package tree: this venv's site-packages plus the standard library (thousands of files)."""
    dst = tmp_path_factory.mktemp("sp") / "tree"
    # *.pem: key/cert files are default-ignored by world capture (secrets), e.g. botocore/certifi CA bundles
    skip = shutil.ignore_patterns("__pycache__", "*.so", "test", "tests", "idlelib", "site-packages", "*.pem")
    shutil.copytree(sysconfig.get_paths()["purelib"], dst / "site-packages", symlinks=True, ignore=skip)
    shutil.copytree(sysconfig.get_paths()["stdlib"], dst / "stdlib", symlinks=True, ignore=skip)
    return dst


@pytest.fixture
def real_tree(site_packages_copy: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "work"
    shutil.copytree(site_packages_copy, dst, symlinks=True)
    return dst


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ray: needs Ray (run by 'nox -s fanout_ray', skipped elsewhere)")
