"""Issue 23 item 14: with ``sync_computer=True`` (OS mode) Python cells are not all irreversible.

Open Interpreter 0.4.3 runs two extra Python snippets around every Python cell when ``sync_computer`` is on
(interpreter/core/respond.py) and imports its computer API into the kernel (``import_computer_api``, as the
``os`` profile sets them): those are the framework's plumbing, not the model's cells.
"""

from __future__ import annotations

import pytest
from agentsnap_core.layers.effects_ledger import Ledger
from agentsnap_openinterpreter import CommandClassifier, attach, session_of
from conftest import scripted


def test_sync_computer_plumbing_is_not_recorded_and_a_pure_cell_stays_pure(work, repo, interpreters):
    interp = attach(interpreters(scripted({"compute": "```python\nx = 6 * 7\nprint(x)\n```"})), repo)
    interp.sync_computer = True  # what `interpreter --os` sets (profiles/defaults/os.py)
    interp.computer.import_computer_api = True
    interp.chat("compute", display=False)

    cells = session_of(interp).cells
    assert [(c["code"].strip(), c["kind"]) for c in cells] == [("x = 6 * 7\nprint(x)", "pure")]
    assert Ledger.for_repo(repo).sync().keys == {}  # nothing was guarded as an irreversible effect
    assert any(m.get("content", "").strip() == "42" for m in interp.messages if m["role"] == "computer")

    interp.snapshot("s")
    report = interp.checkout("s", replay="pure")
    assert report.restored_names == ["x"]


def test_plumbing_is_recognised_by_its_exact_shape_only(work, repo, interpreters):
    from agentsnap_openinterpreter._session import is_plumbing

    interp = interpreters(scripted({}))
    interp.sync_computer = True
    assert is_plumbing(interp, "python", "import json\ncomputer.load_dict(json.loads('''{\"a\": 1}'''))")
    assert not is_plumbing(interp, "python", "import json\ncomputer.load_dict(json.loads('''{}'''))\nimport os")
    assert not is_plumbing(interp, "python", "import os\ncomputer.load_dict(json.loads('''{}'''))")
    interp.sync_computer = False
    assert not is_plumbing(interp, "python", "import json\ncomputer.load_dict(json.loads('''{}'''))")


@pytest.mark.parametrize(("code", "kind"), [
    ("text = computer.clipboard.view()", "pure"),
    ("shot = computer.display.view()\nfound = computer.display.find_text('OK')", "pure"),
    ("hits = computer.files.search('report')", "pure"),
    ("computer.mouse.click('OK')", "irreversible"),
    ("computer.keyboard.write('hello')", "irreversible"),
    ("computer.mail.send('bob@example.com', 'hi', 'body')", "irreversible"),
    ("computer.calendar.create_event('standup')", "irreversible"),
    ("computer = make()\ncomputer.display.view()", "irreversible"),
])
def test_os_mode_computer_api_reads_are_pure_and_actions_are_not(code, kind):
    assert CommandClassifier()("python", code).kind == kind
