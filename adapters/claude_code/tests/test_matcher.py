"""The destructive-command matcher on a table of real-looking commands, look-alikes included."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsnap_claude_code.matcher import RULES, Matcher

# (command, rule expected or None for harmless); run in a directory holding existing.txt, dir/existing.txt
TABLE: list[tuple[str, str | None]] = [
    ("rm -rf src", "rm"),
    ("rm -rf ./build/ dist", "rm"),
    ("rm notes.txt", "rm"),
    ("sudo rm -r /var/tmp/cache", "rm"),
    ("/bin/rm -fr node_modules", "rm"),
    ("cd x && rm -rf y", "rm"),
    ("cd src; rm -r __pycache__", "rm"),
    ("make || rm -rf out", "rm"),
    ("ls\nrm -rf tmp", "rm"),
    ("bash -c 'rm -rf /tmp/work; ls'", "rm"),
    ('sh -ec "cd build && rm -rf *"', "rm"),
    ("eval 'rm -rf cache'", "rm"),
    ("echo $(rm -rf cache)", "rm"),
    ('echo "`rm -rf cache`"', "rm"),
    ("ls *.log | xargs rm", "rm"),
    ("find . -name '*.pyc' -print0 | xargs -0 rm -f", "rm"),
    ("FOO=1 env BAR=2 timeout 10 rm -rf data", "rm"),
    ("find . -name '*.o' -delete", "find-delete"),
    ("find build -type f -exec rm {} \\;", "rm"),
    ("git reset --hard HEAD~1", "git-reset-hard"),
    ("git -C repo reset --hard", "git-reset-hard"),
    ("git clean -fd", "git-clean"),
    ("git clean -fdx", "git-clean"),
    ("git checkout -- src/app.py", "git-checkout-discard"),
    ("git checkout .", "git-checkout-discard"),
    ("git restore src/", "git-restore"),
    ("git stash drop", "git-stash-drop"),
    ('psql -d app -c "DROP TABLE users;"', "sql-drop"),
    ("echo 'drop table users;' | sqlite3 app.db", "sql-drop"),
    ("mysql app -e 'TRUNCATE TABLE sessions'", "sql-drop"),
    ("mv new.txt existing.txt", "overwrite"),
    ("mv -f other.txt dir/", None),  # dir/other.txt does not exist
    ("mv existing.txt dir/", "overwrite"),  # dir/existing.txt exists
    ("cp template.txt existing.txt", "overwrite"),
    ("echo hi > existing.txt", "redirect-overwrite"),
    ("sed -i 's/a/b/' existing.txt", "in-place-edit"),
    ("perl -pi -e 's/a/b/' existing.txt", "in-place-edit"),
    ("truncate -s 0 existing.txt", "truncate"),
    ("dd if=/dev/zero of=disk.img bs=1M count=1", "dd"),
    ("rsync -a --delete src/ backup/", "rsync-delete"),
    ("python3 -c 'import shutil; shutil.rmtree(\"build\")'", "script-delete"),
    ("shred -u secrets.txt", "shred"),
    # harmless look-alikes
    ('echo "rm -rf"', None),
    ("echo 'rm -rf /'", None),
    ("grep -r rm .", None),
    ("grep -rn 'rm -rf' docs/", None),
    ("ls -la", None),
    ("cat rm.txt", None),
    ("git status && git diff", None),
    ("git log --oneline -5", None),
    ("git checkout -b feature", None),
    ("git restore --staged src/app.py", None),
    ("git clean -n", None),
    ("mv new.txt renamed.txt", None),
    ("mv -n new.txt existing.txt", None),
    ("cp a.txt b.txt", None),
    ("echo hi >> existing.txt", None),
    ("echo hi > /dev/null 2>&1", None),
    ("echo hi > fresh.txt", None),
    ('grep -i "drop table" migrations/*.sql', None),
    ('echo "DROP TABLE users"', None),
    ("find . -name '*.py'", None),
    ("sed 's/a/b/' existing.txt", None),
    ("npm run format", None),
    ("rm --help", None),
    ("ls # rm -rf /", None),
    ("python -m pytest -k rmtree", None),
]


@pytest.fixture
def matcher(tmp_path: Path) -> Matcher:
    (tmp_path / "existing.txt").write_text("keep me\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "existing.txt").write_text("keep me too\n")
    return Matcher(cwd=str(tmp_path))


def test_the_table_is_big_and_covers_both_sides() -> None:
    assert len(TABLE) >= 30
    assert sum(1 for _, r in TABLE if r is None) >= 15 and sum(1 for _, r in TABLE if r) >= 15
    assert {r for _, r in TABLE if r} <= set(RULES)


@pytest.mark.parametrize(("command", "rule"), TABLE, ids=[c[:40] for c, _ in TABLE])
def test_destructive_table(matcher: Matcher, command: str, rule: str | None) -> None:
    rules = {f.rule for f in matcher.findings(command)}
    if rule is None:
        assert rules == set(), f"{command!r} is harmless but matched {rules}"
    else:
        assert rule in rules, f"{command!r} should match {rule}, got {rules}"


def test_without_a_cwd_overwrite_targets_count_as_existing() -> None:
    assert Matcher()("mv a.txt b.txt")
    assert not Matcher()("mv -n a.txt b.txt")


def test_patterns_are_configurable(matcher: Matcher, tmp_path: Path) -> None:
    custom = Matcher(extra_patterns=[r"\bmake\s+clean\b"], ignore_patterns=[r"^rm -rf \./\.cache$"], disabled_rules=["git-clean"], cwd=str(tmp_path))
    assert [f.rule for f in custom.findings("cd app && make clean")] == ["pattern"]
    assert custom.findings("rm -rf ./.cache") == []
    assert custom.findings("git clean -fdx") == []
    assert custom("rm -rf src")
    with pytest.raises(ValueError, match="unknown destructive rule"):
        Matcher(disabled_rules=["nope"])


def test_unparseable_commands_fall_back_to_text_search() -> None:
    assert [f.rule for f in Matcher().findings("rm -rf 'unterminated")] == ["unparsed"]
    assert Matcher().findings("echo 'unterminated") == []
