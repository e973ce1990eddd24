"""The offline model splits fences the way Open Interpreter's text parser needs."""

from __future__ import annotations

from agentsnap_openinterpreter.offline import tokens


def test_fence_and_language_line_are_separate_tokens():
    assert tokens("Hi.\n```python\nx = 1\n```") == ["Hi.\n", "```", "python\n", "x = 1\n", "```"]
    assert tokens("no code") == ["no code"]
