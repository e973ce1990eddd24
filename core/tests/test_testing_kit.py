"""The shared test helpers adapters use (agentsnap_core.testing.kv, .readme) do what they say."""

from __future__ import annotations

import array
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError
from agentsnap_core.format import content
from agentsnap_core.testing.kv import corrupted_copy, perturb_float32
from agentsnap_core.testing.readme import code_blocks, run_python


def _page(values: list[float]) -> bytes:
    return array.array("f", values).tobytes()


def test_corrupted_copy_perturbs_one_page_of_every_nested_list_and_keeps_the_rest(tmp_path: Path) -> None:
    repo = Repo.init(tmp_path)
    pages = [content.put_bytes(repo.objects, _page([float(i)] * 8)) for i in range(3)]
    seqs = [{"pages": [{"content": p, "tokens": 4} for p in pages], "refs": list(pages)} for _ in range(2)]
    cache = {"format": "test-kv", "sequences": seqs, "refs": list(pages)}
    snap = repo.snapshot("kv", layers={"cache": cache, "state": {"step": 3}}, trace=[{"role": "user", "content": "hi"}],
                         capture_world=False)
    bad = corrupted_copy(repo, snap.id, page=1)
    assert repo.head()[1] == snap.id  # HEAD did not move
    got = repo.read_layer(bad, "cache")
    for seq in got["sequences"]:
        assert [p["content"] for p in seq["pages"]][::2] == [pages[0], pages[2]]
        changed = content.get_bytes(repo.objects, seq["pages"][1]["content"])
        assert array.array("f", changed).tolist() == [1.25] * 8
        assert seq["refs"] == [p["content"] for p in seq["pages"]]
    assert set(got["refs"]) == {r for s in got["sequences"] for r in s["refs"]}
    assert repo.read_layer(bad, "state") == {"step": 3}
    assert repo.read_layer(bad, "trace") == [{"role": "user", "content": "hi"}]
    assert repo.verify()["ok"]
    with pytest.raises((ValueError, AgentSnapError)):
        corrupted_copy(repo, snap.id, page=0, layer="state")


def test_perturb_keeps_a_trailing_partial_value() -> None:
    raw = _page([1.0, 2.0]) + b"\x01"
    assert perturb_float32(raw)[-1:] == b"\x01" and perturb_float32(raw) != raw


def test_code_blocks_and_run_python(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("intro\n```python\nprint('one')\n```\n```bash\nls\n```\n```python\nraise SystemExit(3)\n```\n")
    first, second = code_blocks(readme)
    assert code_blocks(readme, "bash") == ["ls\n"]
    assert run_python(first, tmp_path).stdout == "one\n"
    with pytest.raises(AssertionError, match="exited 3"):
        run_python(second, tmp_path)
