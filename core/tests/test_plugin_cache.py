"""The cached entry-point list (plugins/epcache.py): a CLI command skips importlib.metadata, and never misses a
plugin installed or removed since the list was written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

PROBE = textwrap.dedent(
    """
    import json, sys
    from agentsnap_core import plugins
    names = sorted(p["name"] for p in plugins.list_plugins())
    dists = {p["name"]: p["dist"] for p in plugins.list_plugins()}
    print(json.dumps({"names": names, "dists": dists, "scanned": "importlib.metadata" in sys.modules}))
    """
)


def _install(site: Path, name: str, *, age_s: float = 60.0) -> None:
    """A distribution with one agentsnap entry point, as an installer leaves it (dist-info + module)."""
    (site / f"{name}_mod.py").write_text(
        "import pluggy\nhookimpl = pluggy.HookimplMarker('agentsnap')\n"
        "class _P:\n    @hookimpl\n    def agentsnap_handles(self, obj):\n        return None\nplugin = _P()\n"
    )
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[agentsnap]\n{name} = {name}_mod:plugin\n")
    _age(site, age_s)


def _age(site: Path, age_s: float) -> None:
    """Installs happened a while ago (a folder changed within the last 2 s is never vouched for)."""
    past = time.time() - age_s
    os.utime(site, (past, past))


@pytest.fixture
def site(tmp_path: Path) -> Path:
    d = tmp_path / "site"
    d.mkdir()
    return d


def _run(site: Path, cache: Path) -> dict:
    # No bytecode written by the probes: a first import after an install creates a __pycache__ folder in a sys.path
    # folder (``site`` here; a fresh venv's site-packages in CI), which moves that folder's mtime and rightly costs
    # the next process one rescan. That is the install-time effect these tests keep out: they check the cache's own
    # rules (pip compiles at install, so a real site-packages has its __pycache__ already).
    env = {k: v for k, v in os.environ.items() if k != "AGENTSNAP_PLUGINS"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
        env={**env, "PYTHONPATH": os.pathsep.join([str(site), *[p for p in sys.path[1:] if p]]), "XDG_CACHE_HOME": str(cache)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_second_process_finds_the_plugins_without_scanning_the_installed_distributions(site: Path, tmp_path: Path) -> None:
    _install(site, "snapplug")
    first = _run(site, tmp_path / "cache")
    assert "snapplug" in first["names"] and first["scanned"]
    assert first["dists"]["snapplug"] == "snapplug 1.0"
    second = _run(site, tmp_path / "cache")
    assert second["names"] == first["names"] and second["dists"] == first["dists"]
    assert not second["scanned"]  # importlib.metadata never imported: the cached list was current


def test_a_plugin_installed_or_removed_after_the_list_was_written_is_seen(site: Path, tmp_path: Path) -> None:
    _install(site, "firstplug")
    _run(site, tmp_path / "cache")
    assert not _run(site, tmp_path / "cache")["scanned"]  # the list is cached now

    _install(site, "laterplug")  # a new dist-info folder: the site folder's mtime moved
    got = _run(site, tmp_path / "cache")
    assert got["scanned"] and {"firstplug", "laterplug"} <= set(got["names"])

    for p in sorted(site.glob("firstplug*"), reverse=True):
        if p.is_dir():
            for f in p.iterdir():
                f.unlink()
            p.rmdir()
        else:
            p.unlink()
    _age(site, 30)
    got = _run(site, tmp_path / "cache")
    assert "firstplug" not in got["names"] and "laterplug" in got["names"]


def test_a_folder_changed_just_now_is_not_vouched_for(site: Path, tmp_path: Path) -> None:
    """Racy mtimes: an install in the same clock tick as the list could go unseen, so no list is written then."""
    _install(site, "racyplug", age_s=0)
    os.utime(site)  # changed now
    _run(site, tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("entry-points-*.json"))
    assert _run(site, tmp_path / "cache")["scanned"]


@pytest.mark.parametrize("damage", ["garbage", "other-version", "unwritable"])
def test_a_damaged_or_unwritable_cache_falls_back_to_the_scan(site: Path, tmp_path: Path, damage: str) -> None:
    _install(site, "plainplug")
    cache = tmp_path / "cache"
    _run(site, cache)
    (path,) = (cache / "agentsnap" / "plugins").glob("entry-points-*.json")
    if damage == "garbage":
        path.write_bytes(b"\x00not json")
    elif damage == "other-version":
        doc = json.loads(path.read_text())
        doc["version"] = 99
        doc["entry_points"] = [["ghost", "nowhere:thing", None]]
        path.write_text(json.dumps(doc))
    else:  # a file where the cache folder goes: nothing can be written there (even by root)
        path.unlink()
        (cache / "agentsnap" / "plugins").rmdir()
        (cache / "agentsnap" / "plugins").write_text("in the way")
    got = _run(site, cache)
    if damage == "unwritable":
        assert _run(site, cache)["scanned"]  # still no list, still every plugin
    assert got["scanned"] and "plainplug" in got["names"] and "ghost" not in got["names"]


def test_the_switch_turns_the_cache_off(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(site, "offplug")
    monkeypatch.setenv("AGENTSNAP_PLUGIN_CACHE", "off")
    got = _run(site, tmp_path / "cache")
    assert got["scanned"] and "offplug" in got["names"]
    assert not (tmp_path / "cache" / "agentsnap").exists()
    assert _run(site, tmp_path / "cache")["scanned"]


def test_the_allow_list_applies_to_the_cached_list(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(site, "keepplug")
    _run(site, tmp_path / "cache")
    monkeypatch.setenv("AGENTSNAP_PLUGINS", "none")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *[p for p in sys.path[1:] if p]]), "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["names"] == ["agentsnap_core.plugins.defaults"] and not got["scanned"]
