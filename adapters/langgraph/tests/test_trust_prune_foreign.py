"""``prune(keep_latest)`` of a thread that came from elsewhere keeps it read as from elsewhere.

Reported (tried as a user, langgraph 1.2.22 / langgraph-checkpoint 4.3.2): a teammate's thread cloned into this store
is read with LangGraph's strict msgpack allowlist (``tests/test_trust_foreign_checkpoints.py``: its bytes cannot
have a class built or a function called). ``saver.prune(["t"])`` - keep only the newest checkpoint, as PostgresSaver's
``prune`` - re-roots that checkpoint on a new snapshot written here, and the index only knew the *old* snapshot as
adopted: from then on the checkpoint read as this store's own, with LangGraph's default serializer, and a crafted
checkpoint's ``('os', 'system', cmd)`` ran at the next ``get_state``. Nothing said the protection was gone. The kept
checkpoint's new snapshot is now marked as adopted too when the one it replaces was.
"""

from __future__ import annotations

from pathlib import Path

from agentsnap_langgraph import PFSaver
from test_trust_foreign_checkpoints import CFG, _graph, crafted_clone


def test_prune_keep_latest_of_a_cloned_thread_does_not_make_its_bytes_run(tmp_path: Path) -> None:
    mine, marker = crafted_clone(tmp_path)
    with PFSaver(mine) as saver:
        graph = _graph(saver, None)
        assert graph.get_state(CFG).values["mode"] == f"touch {marker}"  # adopted: read as data
        assert len(list(saver.list(CFG))) > 1
        saver.prune(["t"])  # keep_latest: the newest checkpoint on a new snapshot
        assert len(list(saver.list(CFG))) == 1
        assert graph.get_state(CFG).values["mode"] == f"touch {marker}"
    assert not marker.exists(), "after prune the kept checkpoint's bytes ran os.system"
    with PFSaver(mine) as saver:  # (a fresh open: what the index keeps)
        assert _graph(saver, None).get_state(CFG).values["mode"] == f"touch {marker}"
    assert not marker.exists()
