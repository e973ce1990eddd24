"""The effects ledger's key file, made by whichever process signs first: two at once never read it half-written.

Seen in CI (test_effects.py::test_concurrent_processes_never_duplicate_an_effect): one process created the key
file empty (O_EXCL) and was still writing it when another found it there, read "" and failed with "the effects key
... is shorter than 16 bytes". The key file now appears whole (written beside it, then linked into place, as the
vault's key is), so a reader finds no file or the whole key.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from agentsnap_core.layers import effects_ledger


@pytest.mark.parametrize("round_", range(5))
def test_creators_at_once_all_get_the_one_whole_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    round_: int) -> None:
    monkeypatch.delenv(effects_ledger.KEY_ENV, raising=False)
    monkeypatch.setenv(effects_ledger.KEY_FILE_ENV, str(tmp_path / "cfg" / "effects.key"))
    start = threading.Barrier(8)
    keys: list[bytes | None] = []
    errors: list[BaseException] = []

    def create() -> None:
        start.wait()
        try:
            keys.append(effects_ledger.load_key(create=True))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(keys) == 8 and len(set(keys)) == 1 and keys[0] and len(keys[0]) >= 16
    assert sorted(p.name for p in (tmp_path / "cfg").iterdir()) == ["effects.key"]  # no temp file left
    assert (tmp_path / "cfg" / "effects.key").stat().st_mode & 0o777 == 0o600
