"""A ``replay="pure"`` restore runs again only what has no effect outside the kernel.

Met as a user: a model loads its run configuration with ``yaml.unsafe_load_all`` (the form of
``yaml.unsafe_load`` for a file of several documents). The classifier had ``unsafe_load`` as not pure but
not its ``*_all`` forms, so the cell was *pure*, and ``checkout(..., replay="pure")`` ran what the YAML
held a second time: the command a ``!!python/object/apply`` tag names appended to a log outside the tree
again. And ``np.loadtxt("http://...")`` (pure before) downloads the URL into the working directory: the replay
fetched it again over the file the world layer had just restored, so the tree was no longer the snapshot.
"""

from __future__ import annotations

import http.server
import threading

from agentsnap_openinterpreter import attach, session_of
from conftest import scripted


def test_a_yaml_loader_that_runs_what_it_reads_is_not_run_again_by_a_pure_replay(work, repo, interpreters, tmp_path):
    log = tmp_path / "ran.log"  # outside the working tree: a restore cannot rewind it
    (work / "runs.yaml").write_text(f'--- !!python/object/apply:os.system ["echo ran >> {log}"]\n--- 2\n')
    script = {"load the runs": "```python\nimport yaml\nruns = list(yaml.unsafe_load_all(open('runs.yaml')))\n```",
              "compute": "```python\nanswer = 6 * 7\n```"}
    interp = attach(interpreters(scripted(script)), repo)
    interp.chat("load the runs", display=False)
    interp.chat("compute", display=False)
    assert log.read_text().splitlines() == ["ran"]
    assert [c["kind"] for c in session_of(interp).cells] == ["irreversible", "pure"]
    interp.snapshot("loaded")

    again = attach(interpreters(scripted(script)), repo)
    report = again.checkout("loaded", replay="pure")

    assert log.read_text().splitlines() == ["ran"]  # twice before: the replay ran the YAML's command again
    assert [c["status"] for c in report.cells] == ["skipped", "replayed"]
    assert report.restored_names == ["answer"] and "runs" in report.missing_names


def test_a_numpy_read_of_a_url_is_not_fetched_again_over_the_restored_file(work, repo, interpreters, tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    (served / "d.txt").write_text("1 2 3\n")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(served), **kw)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/d.txt"
        script = {"fetch": f"```python\nimport numpy as np\ndata = np.loadtxt('{url}')\n```"}
        interp = attach(interpreters(scripted(script)), repo)
        interp.chat("fetch", display=False)
        downloaded = work / f"127.0.0.1:{server.server_port}" / "d.txt"
        assert downloaded.read_text() == "1 2 3\n"  # numpy left its copy in the tree
        assert session_of(interp).cells[0]["kind"] == "irreversible"
        interp.snapshot("fetched")
        (served / "d.txt").write_text("4 5 6\n")  # the server's file changes after the snapshot

        again = attach(interpreters(scripted(script)), repo)
        report = again.checkout("fetched", replay="pure")
    finally:
        server.shutdown()
        server.server_close()

    assert downloaded.read_text() == "1 2 3\n"  # the snapshot's file, not fetched again over it
    assert [c["status"] for c in report.cells] == ["skipped"]


def test_the_printed_report_says_when_a_replayed_cell_printed_something_else(work, repo, interpreters):
    """``replay="pure"`` re-runs a pure cell whose output depends on chance or time; ``to_dict()`` had
    ``output_matches: False`` but ``print(report)`` - what the README shows users - said only "replayed"."""
    script = {"roll": "```python\nimport random\nroll = random.random()\nprint(roll)\n```"}
    interp = attach(interpreters(scripted(script)), repo)
    interp.chat("roll", display=False)
    interp.snapshot("rolled")
    report = attach(interpreters(scripted(script)), repo).checkout("rolled", replay="pure")
    assert report.cells[0]["status"] == "replayed" and report.cells[0]["output_matches"] is False
    assert "its output differs from the recorded one" in str(report), str(report)
