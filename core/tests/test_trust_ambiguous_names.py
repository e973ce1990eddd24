"""A name that is both a branch and a tag (or a remote-tracking branch) at different snapshots is never taken for
one of them in silence.

On the code before this change, with tag ``v1`` on the release and a branch ``v1`` made later (a teammate's fix
line), ``agentsnap restore v1`` restored the branch's tip: the user asked for the tagged state and got another, with
nothing said (git takes the tag, and warns). ``show``, ``diff``, ``log`` did the same. Now every verb that reads a
snapshot name refuses it, names both with where they are, and the full name (``refs/tags/v1``) picks one. A branch
and a tag at one snapshot are no ambiguity; ``switch`` takes a branch by nature.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap_core import AmbiguousId, Repo
from trust_kit import cli, new_work, snapshots


@pytest.fixture
def work(tmp_path: Path) -> tuple[Path, str, str]:
    """Snapshots one (tagged v1) and two; a branch v1 at two; HEAD on main at two."""
    root = new_work(tmp_path, {})
    one, two = snapshots(root, ["one", "two"])
    assert cli(root, "tag", "v1", one[:12])[0] == 0
    assert cli(root, "branch", "v1", two[:12])[0] == 0
    return root, one, two


@pytest.mark.parametrize("verb", [["restore", "v1"], ["show", "v1"], ["diff", "v1"], ["log", "v1"],
                                  ["restore", "v1~1"], ["branch", "other", "v1"]])
def test_a_name_that_is_a_branch_and_a_tag_apart_is_refused_naming_both(work, verb: list[str]) -> None:
    root, one, two = work
    code, out, err = cli(root, *verb)
    assert code == 2 and "Traceback" not in err, out + err
    assert f"'v1' names both branch v1 (at {two[:12]}) and tag v1 (at {one[:12]})" in err, err
    assert "refs/heads/v1 or refs/tags/v1" in err
    assert (root / "a.txt").read_text() == "two\n"  # (nothing restored)
    assert "other" not in cli(root, "branch")[1]


def test_the_full_name_picks_the_one_meant(work) -> None:
    root, one, two = work
    code, out, err = cli(root, "restore", "refs/tags/v1")
    assert code == 0, err
    assert (root / "a.txt").read_text() == "one\n"
    assert cli(root, "restore", "refs/heads/v1")[0] == 0 and (root / "a.txt").read_text() == "two\n"
    assert cli(root, "switch", "v1")[0] == 0 and cli(root, "status")[1].startswith("On branch v1")


def test_a_branch_and_a_tag_at_one_snapshot_are_no_ambiguity(work) -> None:
    root, one, two = work
    assert cli(root, "tag", "-d", "v1")[0] == 0 and cli(root, "tag", "v1", two[:12])[0] == 0
    code, out, err = cli(root, "show", "v1")
    assert code == 0 and out.startswith(f"snapshot {two}"), out + err


def test_the_python_api_raises_the_ambiguity_and_a_local_branch_named_as_a_remote_ones(work, tmp_path: Path) -> None:
    root, one, two = work
    with Repo.open(root) as repo, pytest.raises(AmbiguousId, match="names both branch v1"):
        repo.resolve("v1")
    assert cli(root, "push", (tmp_path / "team").as_uri(), "main")[0] == 0  # (refs/remotes/... needs a named remote)
    assert cli(root, "remote", "add", "origin", (tmp_path / "team").as_uri())[0] == 0 and cli(root, "fetch")[0] == 0
    assert cli(root, "branch", "origin/main", one[:12])[0] == 0
    code, _, err = cli(root, "restore", "origin/main")
    assert code == 2 and f"branch origin/main (at {one[:12]}) and remote-tracking branch origin/main (at {two[:12]})" in err, err


def test_the_names_log_shows_resolve_as_in_git(work) -> None:
    """``agentsnap log --all`` labels a Python API session's snapshot ``agents/<agent>/<session>``; on the code
    before this change that label was an unknown snapshot to show, diff, restore and merge. As in git a name is
    also looked up under ``refs/`` (``tags/v1``, ``heads/v1``, ``agents/bot/default``)."""
    root, one, two = work
    from agentsnap_core import Client, Snapshottable

    class Agent(Snapshottable):
        def __init__(self) -> None:
            self.step = 1

    with Client(root) as client:
        saved = client.save(Agent(), agent_id="bot")
    code, out, _ = cli(root, "log", "--all")
    assert f"{saved[:12]} (agents/bot/default)" in out, out
    for name, want in (("agents/bot/default", saved), ("tags/v1", one), ("heads/v1", two)):
        code, out, err = cli(root, "show", name)
        assert code == 0 and out.startswith(f"snapshot {want}"), (name, out + err)
