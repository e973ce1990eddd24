"""What loading and decoding cost: plugins.lazy_exports (an adapter package's names import their module on first
use) and encoding.bulk (the collector paused while a large structure is built)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def test_a_name_imports_its_module_on_first_use_and_an_unknown_name_is_an_attribute_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "lazypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from agentsnap_core.plugins import lazy_exports\n__getattr__ = lazy_exports(__name__, {'Heavy': 'heavy'})\n")
    (pkg / "heavy.py").write_text("class Heavy:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import lazypkg  # type: ignore[import-not-found]

    try:
        assert "lazypkg.heavy" not in sys.modules
        from lazypkg import Heavy  # type: ignore[import-not-found]

        assert "lazypkg.heavy" in sys.modules and Heavy.__module__ == "lazypkg.heavy"
        assert lazypkg.__dict__["Heavy"] is Heavy  # found directly from now on
        with pytest.raises(AttributeError, match="no attribute 'Missing'"):
            lazypkg.Missing  # noqa: B018
        with pytest.raises(ImportError):
            from lazypkg import Missing  # type: ignore[import-not-found]  # noqa: F401
    finally:
        for name in ("lazypkg", "lazypkg.heavy"):
            sys.modules.pop(name, None)


def test_bulk_pauses_the_collector_and_gives_it_back_as_it_was() -> None:
    """encoding.bulk (large decodes and captures): paused inside, running again after, even on an error; left off
    when it was off."""
    import gc

    from agentsnap_core.format.encoding import bulk

    assert gc.isenabled()
    with pytest.raises(RuntimeError), bulk():
        assert not gc.isenabled()
        raise RuntimeError("inside")
    assert gc.isenabled()
    gc.disable()
    try:
        with bulk():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
