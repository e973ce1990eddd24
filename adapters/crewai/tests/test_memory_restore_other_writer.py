"""A writer restores (or snapshots) while another writer of the same memory branch is open: the other one follows.

The README: "Any number of writers ... may share a branch: every operation takes a file lock and first catches up with
the branch head and the journal". A restore of the branch head itself (``storage.restore(storage.head)``: drop the
writes since the last snapshot) empties the journal without moving the head; once the journal has grown past where
the other writer had read to, that writer used to read on from its old offset in the new journal: it kept the
discarded records, missed the new ones, and its next write cut the journal back to its offset, deleting the first
writer's write (or it failed with a msgpack ``TypeError`` on every later call).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_crewai import AgentsnapStorage
from crewai.memory.types import MemoryRecord

T0 = datetime(2026, 1, 1)


def _rec(rid: str, content: str) -> MemoryRecord:
    return MemoryRecord(id=rid, content=content, embedding=[float(len(rid)), 1.0, 0.0], created_at=T0, last_accessed=T0)


# content sizes: with the first the old code went wrong without any error (b kept "discarded", missed "kept", and its
# next write cut both a's and its own write off the journal: a fresh reader saw only "base"); with the others it read
# the misaligned journal as garbage (TypeError). The cause, and the fix, are the same
@pytest.mark.parametrize(("discarded", "kept"), [
    ("Paris is the capital " + "y" * 23, "The meeting moved to Tuesday. " * 3),
    ("short", "The meeting moved to Tuesday. " * 30),
    ("x" * 40, "y" * 2000),
], ids=["silent", "garbage-short", "garbage-long"])
def test_restore_of_the_head_is_seen_by_the_other_writer(tmp_path: Path, discarded: str, kept: str) -> None:
    repo_path = tmp_path / "repo"
    Repo.init(repo_path).close()
    a, b = AgentsnapStorage(repo_path), AgentsnapStorage(repo_path)
    a.save([_rec("base", "base fact")])
    a.snapshot("base")
    b.save([_rec("discarded", discarded)])  # not snapshotted: both see it
    assert sorted(a.rows()) == sorted(b.rows()) == ["base", "discarded"]

    a.restore(a.head)  # drop the writes since the last snapshot
    a.save([_rec("kept", kept)])  # the journal grows past where b had read to

    assert sorted(b.rows()) == ["base", "kept"]  # b follows the restore and sees a's write
    b.save([_rec("from-b", "b's fact")])
    assert sorted(a.rows()) == sorted(b.rows()) == ["base", "from-b", "kept"]
    fresh = AgentsnapStorage(repo_path)
    assert sorted(fresh.rows()) == ["base", "from-b", "kept"]  # nothing of a's was cut off the journal
    snap = b.snapshot("both")
    assert sorted(Repo.open(repo_path).read_layer(snap.id, "state")["records"]) == ["base", "from-b", "kept"]
    for s in (a, b, fresh):
        s.close()


def test_snapshot_then_restore_back_is_seen_by_the_other_writer(tmp_path: Path) -> None:
    """The same through a head that moved and came back: a snapshots, restores the previous snapshot, writes."""
    repo_path = tmp_path / "repo"
    Repo.init(repo_path).close()
    a, b = AgentsnapStorage(repo_path), AgentsnapStorage(repo_path)
    a.save([_rec("base", "base fact")])
    first = a.snapshot("base")
    b.save([_rec("later", "a fact snapshotted and then rolled back " * 2)])  # b's view: head `first` + its write
    a.snapshot("with later")
    a.restore(first.id)  # back to `first`, which is where b still thinks the head is
    a.save([_rec("kept", "written after the rollback " * 20)])

    assert sorted(b.rows()) == ["base", "kept"]
    assert b.get_record("later") is None
    assert sorted(r.id for r, _ in b.search([5.0, 1.0, 0.0], limit=5)) == ["base", "kept"]
    a.close()
    b.close()
