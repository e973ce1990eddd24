"""The cell classifier: conservative (in doubt irreversible), configurable."""

from __future__ import annotations

import pytest
from agentsnap_core.errors import InvalidInput
from agentsnap_openinterpreter import CommandClassifier

classify = CommandClassifier()


@pytest.mark.parametrize(
    "code",
    [
        "answer = 6 * 7\nprint(answer)",
        "import math, json\nxs = [math.sqrt(i) for i in range(5)]",
        "import numpy as np\na = np.arange(3).sum()",
        "with open('data.csv') as f:\n    rows = f.read().splitlines()",
        "import os\nos.chdir('/tmp')\nos.environ['MODE'] = 'x'",
        "def area(r):\n    return 3.14 * r * r",
    ],
)
def test_python_that_only_computes_is_pure(code):
    assert classify("python", code).kind == "pure"


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("open('notes.txt', 'w').write('x')", "opens a file for writing"),
        ("with open(path, mode) as f:\n    pass", "opens a file for writing"),
        ("import os\nos.remove('a')", "calls remove()"),
        ("import shutil\nshutil.rmtree('build')", "imports shutil"),
        ("import requests\nrequests.post('https://example.com')", "imports requests"),
        ("from pathlib import Path\nPath('x').write_text('y')", "calls write_text()"),
        ("df.to_csv('out.csv')", "calls to_csv()"),
        ("exec(source)", "calls exec()"),
        ("!rm -rf /", "not plain Python (magics, shell escapes or a syntax error)"),
        ("handlers[0]()", "calls a computed function"),
    ],
)
def test_python_with_side_effects_is_irreversible(code, reason):
    v = classify("python", code)
    assert (v.kind, v.reason) == ("irreversible", reason)


def test_a_name_bound_by_an_irreversible_cell_taints_later_cells():
    first = classify("python", "import smtplib\nserver = smtplib.SMTP('mail')")
    assert first.kind == "irreversible" and "server" in first.binds
    assert classify("python", "server.noop()", tainted=first.binds).kind == "irreversible"
    assert classify("python", "server.noop()").kind == "pure"


@pytest.mark.parametrize("code", ["ls -la", "cat a.txt | grep x | wc -l", "cd src && pwd", "git status", "echo hi 2>&1",
                                  "find . -name '*.py'", "sed -n 1,5p file", "export A=1; echo $A"])
def test_read_only_shell_is_pure(code):
    assert classify("shell", code).kind == "pure"


@pytest.mark.parametrize("code", ["rm -rf build", "echo x >> log", "mkdir out", "curl https://x", "git push",
                                  "find . -delete", "sed -i s/a/b/ f", "echo $(rm x)", "pip install y", "ls; touch f",
                                  "python script.py"])
def test_shell_with_side_effects_is_irreversible(code):
    assert classify("shell", code).kind == "irreversible"


def test_unknown_languages_are_irreversible_unless_configured():
    assert classify("javascript", "console.log(1)").kind == "irreversible"
    assert CommandClassifier(pure_languages=frozenset({"javascript"}))("javascript", "console.log(1)").kind == "pure"


def test_an_override_wins_and_is_checked():
    mine = CommandClassifier(override=lambda lang, code: "pure" if code.startswith("make -n") else None)
    assert mine("shell", "make -n all").kind == "pure"
    assert mine("shell", "make all").kind == "irreversible"
    with pytest.raises(InvalidInput, match="pure, idempotent or irreversible"):
        CommandClassifier(override=lambda lang, code: "safe")("shell", "ls")


def test_python_binds_are_reported():
    v = classify("python", "import numpy as np\nx, y = 1, 2\ndef f(): pass\nclass C: pass\nfor i in range(2): pass")
    assert v.binds == ("np", "x", "y", "f", "C", "i")
