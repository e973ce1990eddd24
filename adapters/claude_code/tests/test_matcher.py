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
    # issue 20: the common cases the first matcher missed
    ("echo new | tee existing.txt", "tee"),
    ("sudo tee existing.txt < /dev/null", "tee"),
    ("git rm -rf src", "git-rm"),
    ("git rm existing.txt", "git-rm"),
    ("curl -o existing.txt https://example.com/x", "download-overwrite"),
    ("curl -O https://example.com/existing.txt", "download-overwrite"),
    ("wget -O existing.txt https://example.com/x", "download-overwrite"),
    ("tar -xzf release.tgz", "extract"),
    ("tar xf release.tar -C src", "extract"),
    ("unzip -o bundle.zip", "extract"),
    ("unzip bundle.zip -d src", "extract"),
    ("patch -p1 < fix.diff", "patch"),
    ("git apply fix.diff", "patch"),
    ("black .", "formatter"),
    ("ruff format src", "formatter"),
    ("ruff check --fix .", "formatter"),
    ("npx prettier --write src", "formatter"),
    ("gofmt -w ./...", "formatter"),
    ("cargo fmt", "formatter"),
    ("clang-format -i src/main.c", "formatter"),
    ("python -c \"open('existing.txt','w').write('x')\"", "script-delete"),
    ("python3 -c 'from pathlib import Path; Path(\"a\").write_text(\"\")'", "script-delete"),
    ("python3 - <<'EOF'\nimport shutil\nshutil.rmtree('build')\nEOF", "script-delete"),
    ("python3 <<EOF\nimport os\nos.remove('existing.txt')\nEOF", "script-delete"),
    ("bash <<'SH'\ncd src\nrm -rf build\nSH", "rm"),
    ("mv src /tmp/x", "move-out"),
    ("mv build ../elsewhere", "move-out"),
    ("mv src $TRASH", "move-out"),
    ("ln -sf other.txt existing.txt", "overwrite"),
    ("git branch -D feature", "git-branch-delete"),
    ("$CLEANUP --all", "unparsed"),
    ("echo 'unterminated", "unparsed"),
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
    # read-only relatives of the new rules stay harmless
    ("tee -a existing.txt < notes", None),
    ("echo hi | tee fresh.txt", None),
    ("git rm --cached existing.txt", None),
    ("git rm -n src", None),
    ("curl -s https://example.com | jq .", None),
    ("curl -o fresh.txt https://example.com/x", None),
    ("wget -qO- https://example.com", None),
    ("tar -tzf release.tgz", None),
    ("tar -czf out.tgz src", None),
    ("unzip -l bundle.zip", None),
    ("git apply --check fix.diff", None),
    ("patch --dry-run -p1 < fix.diff", None),
    ("black --check .", None),
    ("ruff check .", None),
    ("ruff format --diff src", None),
    ("npx prettier --check src", None),
    ("gofmt -l .", None),
    ("cargo fmt --check", None),
    ("cargo build", None),
    ("python -c \"print(open('existing.txt').read())\"", None),
    ("cat > notes.md <<'EOF'\nrm -rf is dangerous\nEOF", None),
    ("python3 - <<'EOF'\nprint('hello')\nEOF", None),
    ("mv src/a.py src/b.py", None),
    ("mv build ./dist", None),
    ("git branch -d merged", None),
    ("git stash", None),
    # commands and forms the matcher missed (each matched nothing on the code before them)
    ("git checkout --theirs existing.txt", "git-checkout-discard"),
    ("git checkout HEAD~1 existing.txt", "git-checkout-discard"),
    ("git checkout existing.txt", "git-checkout-discard"),
    ("git tag -d v1.0", "git-branch-delete"),
    ("git gc --prune=now", "git-prune"),
    ("git reflog expire --expire=now --all", "git-prune"),
    ("git submodule deinit -f --all", "git-clean"),
    ("awk -i inplace '{print $1}' existing.txt", "in-place-edit"),
    ("yq -i '.version = 2' chart.yaml", "in-place-edit"),
    ("sort -u -o existing.txt existing.txt", "overwrite"),
    ("jq .a existing.txt | sponge existing.txt", "tee"),
    ("rename 's/\\.txt$/.md/' *.txt", "overwrite"),
    ("install -m 644 build/app existing.txt", "overwrite"),
    ("node -e \"require('fs').rmSync('src', {recursive: true})\"", "script-delete"),
    ("php -r \"unlink('existing.txt');\"", "script-delete"),
    # one-liners that rewrite data or files without open(..., "w") (each matched nothing before)
    ("python -c \"from pathlib import Path; Path('existing.txt').open('w').write('x')\"", "script-delete"),
    ("python -c \"import pandas as pd; df = pd.read_csv('data.csv'); df.dropna().to_csv('data.csv')\"", "script-delete"),
    ("python -c \"import numpy as np; np.save('weights.npy', np.zeros(3))\"", "script-delete"),
    ("python -c \"from pathlib import Path; Path('src').rename('old')\"", "script-delete"),
    ("python -c \"import shutil; shutil.copy('template.txt', 'existing.txt')\"", "script-delete"),
    ("python -c \"import sqlite3; c = sqlite3.connect('app.db'); c.execute('DELETE FROM users'); c.commit()\"", "script-delete"),
    ("python -c \"open('existing.txt', 'r+').write('x')\"", "script-delete"),
    ("python3 - <<'EOF'\nimport matplotlib.pyplot as plt\nplt.plot([1])\nplt.savefig('existing.png')\nEOF", "script-delete"),
    ("python -c \"import pandas as pd; print(pd.read_csv('data.csv').describe())\"", None),
    ("python -c \"import sqlite3; print(sqlite3.connect('app.db').execute('SELECT * FROM users').fetchall())\"", None),
    ("python -c \"s = 'a-b'; print(s.replace('-', '+'))\"", None),
    ("python -c \"from pathlib import Path; print(Path('existing.txt').open().read())\"", None),
    # editors run from a script, converters and compressors that rewrite or replace files (each matched nothing before)
    ("vim -es -c '%s/a/b/g|wq' existing.txt", "in-place-edit"),
    ("ex -s -c '%s/a/b/|x' existing.txt", "in-place-edit"),
    ("ed -s existing.txt", "in-place-edit"),
    ("dos2unix existing.txt", "in-place-edit"),
    ("mogrify -resize 50% existing.txt", "in-place-edit"),
    ("git mv -f template.txt existing.txt", "overwrite"),
    ("iconv -f latin1 -t utf-8 existing.txt -o existing.txt", "overwrite"),
    ("openssl enc -d -in secret.enc -out existing.txt", "overwrite"),
    ("gpg -o existing.txt -d notes.gpg", "overwrite"),
    ("pandoc notes.md -o existing.txt", "overwrite"),
    ("ffmpeg -y -i in.mp4 existing.txt", "overwrite"),
    ("convert in.png existing.txt", "overwrite"),
    ("gzip existing.txt", "overwrite"),
    ("gunzip -f logs.gz", "overwrite"),
    ("zstd --rm existing.txt", "overwrite"),
    ("vim --version", None),
    ("dos2unix -n existing.txt fresh.txt", None),
    ("iconv -f latin1 existing.txt", None),
    ("openssl enc -in existing.txt -out fresh.bin", None),
    ("ffmpeg -i in.mp4 existing.txt", None),
    ("gzip -k existing.txt", None),
    ("gzip -c existing.txt", None),
    ("zstd existing.txt", None),
    ("git mv existing.txt moved.txt", None),
    ("busybox rm -rf src", "rm"),
    ("rm$IFS-rf src", "unparsed"),
    ("setsid rm -rf src", "rm"),
    ("flock /tmp/lock rm -rf src", "rm"),
    ("su -c 'rm -rf src'", "rm"),
    ("npx rimraf src", "rm"),
    ("git checkout main", None),
    ("git checkout -b topic origin/topic", None),
    ("git gc", None),
    ("sort existing.txt", None),
    ("install -d build/bin", None),
    ("echo x | sponge fresh.txt", None),
    ("rename -n 's/a/b/' *.txt", None),
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
    # cannot be understood: snapshot rather than skip (issue 20)
    assert [f.rule for f in Matcher().findings("echo 'unterminated")] == ["unparsed"]
