"""The interpreter's settings as plain data (secrets redacted), and code cells read back from messages."""

from __future__ import annotations

import copy
import os
from typing import Any

from agentsnap_core.layers.redact import REDACTED, may_hold_secret, redact

__all__ = ["SETTINGS", "capture_settings", "restore_settings", "cells_from_messages", "plain_messages"]

#: OpenInterpreter attributes (interpreter/core/core.py, OpenInterpreter.__init__, 0.4.3)
INTERPRETER_SETTINGS = (
    "offline", "auto_run", "verbose", "debug", "max_output", "safe_mode", "shrink_images", "loop", "loop_message",
    "loop_breakers", "disable_telemetry", "in_terminal_interface", "conversation_history", "conversation_filename",
    "os", "speak_messages", "sync_computer", "system_message", "custom_instructions", "user_message_template",
    "always_apply_user_message_template", "code_output_template", "empty_code_output_template",
    "code_output_sender", "multi_line", "contribute_conversation", "plain_text_display", "highlight_active_line",
    "last_messages_count",
)
#: Computer attributes (interpreter/core/computer/computer.py, Computer.__init__)
COMPUTER_SETTINGS = ("offline", "verbose", "debug", "emit_images", "save_skills", "import_computer_api", "import_skills", "max_output")
#: Llm attributes (interpreter/core/llm/llm.py, Llm.__init__); ``api_key`` is never stored
LLM_SETTINGS = (
    "model", "temperature", "supports_vision", "supports_functions", "execution_instructions", "context_window",
    "max_tokens", "api_base", "api_version", "max_budget",
)
SECRET_FIELDS = ("llm.api_key",)
SETTINGS = {"interpreter": INTERPRETER_SETTINGS, "computer": COMPUTER_SETTINGS, "llm": LLM_SETTINGS}
_PLAIN = (str, int, float, bool, type(None))


def _owner(interpreter: Any, group: str) -> Any:
    return interpreter if group == "interpreter" else getattr(interpreter, group)


def _is_plain(value: Any) -> bool:
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    return isinstance(value, dict) and all(isinstance(k, str) and _is_plain(v) for k, v in value.items())


def capture_settings(interpreter: Any) -> tuple[dict[str, dict[str, Any]], list[str], list[str]]:
    """``(settings, redacted field names, skipped field names)`` of a live interpreter."""
    out: dict[str, dict[str, Any]] = {}
    redacted: list[str] = []
    skipped: list[str] = []
    for group, names in SETTINGS.items():
        owner = _owner(interpreter, group)
        values: dict[str, Any] = {}
        for name in names:
            if not hasattr(owner, name):
                continue
            value = getattr(owner, name)
            if isinstance(value, tuple):
                value = list(value)
            if not _is_plain(value):
                skipped.append(f"{group}.{name}")
                continue
            found = redact({name: value}) if may_hold_secret({name: value}) else None  # core's one rule for every adapter
            if found is not None and found.paths:
                value = found.value[name]
                redacted.append(f"{group}.{name} ({', '.join(dict.fromkeys(found.paths.values()))})")
            values[name] = value
        out[group] = values
    for field in SECRET_FIELDS:
        group, name = field.split(".")
        if getattr(_owner(interpreter, group), name, None):
            redacted.append(field)
    return out, redacted, skipped


#: safe_mode from least to most careful (interpreter/core/core.py: "off", "ask", "auto")
_SAFE_MODES = {"off": 0, "ask": 1, "auto": 2}


def _widens(group: str, name: str, live: Any, value: Any) -> str | None:
    """Why setting ``group.name`` from ``live`` to the stored ``value`` would widen what the interpreter does without
    asking, where it sends the user's API key or data, or what it may spend; None when it does not."""
    if (group, name) == ("interpreter", "auto_run") and value and not live:
        return "it would run the model's code without asking"
    if (group, name) == ("interpreter", "safe_mode") and _SAFE_MODES.get(str(value), 0) < _SAFE_MODES.get(str(live), 0):
        return f"safe_mode {value!r} checks less than {live!r}"
    if (group, name) == ("llm", "api_base") and value != live:
        return "your API key would go to the snapshot's endpoint"
    if (group, name) == ("interpreter", "disable_telemetry") and live and not value:
        return "it would send usage telemetry (interpreter.anonymous_telemetry), which is off now"
    if (group, name) == ("interpreter", "offline") and live and not value:
        return "it would go online (telemetry, contributed conversations), and it is offline now"
    if (group, name) == ("computer", "offline") and live and not value:  # computer/display/display.py, 0.4.3
        return ("computer.display would send screenshots of your screen to the computer API (computer.api_base), "
                "and it works offline now")
    if (group, name) == ("interpreter", "conversation_filename") and isinstance(value, str) and value != live and (
            os.path.isabs(value) or "/" in value or "\\" in value or value in (".", "..")):
        # core.py (0.4.3) writes the conversation to os.path.join(conversation_history_path, conversation_filename)
        # after every chat; the names it makes itself never hold a path separator
        return (f"the next chat would write the conversation over {value!r}, outside Open Interpreter's conversations "
                "folder")
    if (group, name) == ("interpreter", "contribute_conversation") and value and not live:
        return "it would offer your conversations to Open Interpreter's dataset"
    if (group, name) == ("llm", "max_budget") and live is not None and (
            not isinstance(value, (int, float)) or value > live):
        return f"the model could spend {'without limit' if value is None else value} where you allow {live}"
    return None


def restore_settings(interpreter: Any, settings: dict[str, dict[str, Any]], trust: bool = False
                     ) -> tuple[list[str], list[str], list[str]]:
    """Set the stored settings on ``interpreter``; return ``(restored names, kept names, why each guarded one was
    kept)``.

    A value that was redacted at capture is not written: the interpreter keeps its own. Setting
    ``llm.model`` to the value it already has keeps ``llm._is_loaded`` (the framework's setter would
    reset it and reload the model on the next chat). Unless ``trust``, a restore never widens what the interpreter
    does without asking nor where it sends the API key (``auto_run`` on, a less careful ``safe_mode``, another
    ``llm.api_base``), what leaves the machine (telemetry back on, going online - the interpreter or its computer -,
    contributed conversations) or what
    the model may spend (a larger or no ``llm.max_budget``): a snapshot can come from anyone (a clone, a pull), and
    those would run its author's code, hand over the key or the user's data; the interpreter keeps its own values,
    and the third list says why.
    """
    restored: list[str] = []
    kept: list[str] = []
    guarded: list[str] = []
    for group, values in settings.items():
        if group not in SETTINGS:
            continue
        owner = _owner(interpreter, group)
        for name, value in values.items():
            if name not in SETTINGS[group]:
                continue
            if REDACTED in repr(value):
                kept.append(f"{group}.{name}")
                continue
            if group == "llm" and name == "model" and getattr(owner, "model", None) == value:
                restored.append("llm.model")
                continue
            why = None if trust else _widens(group, name, getattr(owner, name, None), value)
            if why is not None:
                kept.append(f"{group}.{name}")
                guarded.append(f"{group}.{name} kept as it was ({why}; restore with trust_settings=True if you trust "
                               "the snapshot)")
                continue
            setattr(owner, name, copy.deepcopy(value))
            restored.append(f"{group}.{name}")
    kept += [f for f in SECRET_FIELDS]
    return restored, kept, guarded


def plain_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A deep copy of LMC messages (they are plain dicts of strings in 0.4.3)."""
    return copy.deepcopy([dict(m) for m in messages])


def cells_from_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Code cells read from LMC messages: each ``type == "code"`` message and the console output after it.

    Used when the interpreter ran code before :func:`attach` installed the recorder.
    """
    cells: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if m.get("type") != "code" or m.get("role") != "assistant":
            continue
        output: list[dict[str, Any]] = []
        for later in messages[i + 1 :]:
            if later.get("role") != "computer":
                break
            if later.get("type") == "console" and later.get("format") == "output":
                output.append({"type": "console", "format": "output", "content": later.get("content", "")})
        if i + 1 < len(messages) and messages[i + 1].get("role") == "computer":
            cells.append({"language": str(m.get("format", "")).lower(), "code": str(m.get("content", "")),
                          "output": output, "step": i + 1, "origin": "messages"})
    return cells
