"""A store deleted (``rm -rf .agentsnap``, ``git clean -fdx`` without the exclude) or replaced under an open handle.

A library user keeps one ``Client`` / ``Repo`` open for an agent's whole run; the store can go from under it. What it
writes then must fail with one clear error, never vanish into deleted files or land half in another store.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from agentsnap_core import Client, Repo
from agentsnap_core.errors import StoreGone


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    (root / "a.txt").write_text("one\n")
    return root


def test_a_snapshot_into_a_store_deleted_under_an_open_repo_is_store_gone(tmp_path: Path) -> None:
    """Before: ``repo.snapshot()`` after ``rm -rf .agentsnap`` raised a raw ``FileNotFoundError: ... .agentsnap/writers``
    (``Client.save`` the same); now ``StoreGone`` naming the store, and closing the repo makes no directory again."""
    root = _tree(tmp_path)
    repo = Repo.init(root)
    repo.snapshot("one")
    shutil.rmtree(root / ".agentsnap")
    (root / "a.txt").write_text("two\n")
    with pytest.raises(StoreGone, match="deleted or replaced while it was open"):
        repo.snapshot("two")
    repo.close()
    assert not (root / ".agentsnap").exists()

    client = Client(root)
    client.save(_Agent(), agent_id="a", message="kept")
    shutil.rmtree(root / ".agentsnap")
    with pytest.raises(StoreGone):
        client.save(_Agent(), agent_id="a", message="lost")


def test_a_store_replaced_at_the_same_path_gets_nothing_from_the_old_handle(tmp_path: Path) -> None:
    """Before: an old ``Repo`` whose store was deleted and made again at the same path (another process ran
    ``agentsnap init``) wrote its snapshot's objects into the NEW store's directory and its ref into the deleted
    index: "made" in the old handle, nowhere in ``agentsnap log``, and files in the new store that no snapshot names.
    Now the old handle refuses (``StoreGone``) and the new store is untouched."""
    root = _tree(tmp_path)
    old = Repo.init(root)
    old.snapshot("one")
    shutil.rmtree(root / ".agentsnap")
    new = Repo.init(root)
    first = new.snapshot("new store's first")
    before = sorted(new.objects.iter_oids())
    (root / "a.txt").write_text("from the old handle\n")
    with pytest.raises(StoreGone):
        old.snapshot("into the deleted index")
    assert sorted(new.objects.iter_oids()) == before
    assert [s.id for s in new.log()] == [first.id]
    old.close()
    new.close()


def test_branch_and_tag_through_a_handle_whose_store_is_gone_are_refused(tmp_path: Path) -> None:
    """Before: ``repo.create_branch("x")`` / ``repo.tag("v1")`` through a handle whose store had been replaced
    returned as done: the ref went into the deleted index, and the new store had no such branch."""
    root = _tree(tmp_path)
    old = Repo.init(root)
    one = old.snapshot("one")
    shutil.rmtree(root / ".agentsnap")
    new = Repo.init(root)
    with pytest.raises(StoreGone):
        old.create_branch("x", one.id)
    with pytest.raises(StoreGone):
        old.tag("v1", one.id)
    assert new.refs.list_refs() == {}
    old.close()
    new.close()


def test_closing_a_repo_with_a_pending_batch_does_not_make_a_deleted_store_again(tmp_path: Path) -> None:
    """Before: objects a batch held in memory (no barrier yet) were written at ``close()`` even when the store had
    been deleted meanwhile: ``close`` made ``.agentsnap/objects/pack/`` again, a store of one pack and no index
    that the next ``agentsnap`` command took for a damaged store."""
    root = _tree(tmp_path)
    repo = Repo.init(root)
    repo.snapshot("one")
    batch = repo.objects.batch()
    batch.__enter__()
    repo.objects.put(1, os.urandom(64))
    shutil.rmtree(root / ".agentsnap")
    repo.close()
    assert not (root / ".agentsnap").exists()


class _Agent:
    def state_dict(self) -> dict[str, int]:
        return {"turn": 1}

    def load_state_dict(self, state: dict[str, int]) -> None:
        pass


def test_the_store_check_holds_no_descriptor_of_the_index(tmp_path: Path) -> None:
    """The check above must never hold a descriptor of ``index.sqlite``: closing any descriptor of a file drops every
    POSIX lock the process holds on it, SQLite's included. It did (for a few commits, never released): a process
    that closed one ``Repo`` while another of its ``Repo`` handles was writing lost that handle's locks, and
    ``examples/fanout_merge_demo.py`` ended with "sqlite3.DatabaseError: database disk image is malformed"
    (``test_merge_demo.py``). Now the index is remembered by identity only: no descriptor of it is added, and its
    replacement is still seen."""
    from agentsnap_core.stores.base import HeldPaths

    root = _tree(tmp_path)
    Repo.init(root).close()
    index = root / ".agentsnap" / "index.sqlite"

    def descriptors_of(path: Path) -> int:
        out = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                out += os.readlink(f"/proc/self/fd/{fd}") == str(path)
            except OSError:
                pass
        return out

    before = descriptors_of(index)
    held = HeldPaths(root / ".agentsnap", index)
    assert descriptors_of(index) == before
    assert not held.gone()
    index.rename(index.with_name("moved.sqlite"))
    index.write_bytes(b"")
    assert held.gone()
    held.close()
