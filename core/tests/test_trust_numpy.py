"""numpy arrays and scalars in an agent's state come back as themselves.

Before: an agent keeping embeddings (``self.vectors = np.ndarray``) or a score (``np.float64``) could not be saved
(``UnsupportedValue``: "values of type numpy.ndarray are not supported"; a numpy scalar was refused as "a subclass of
float"). Now dtype, shape and values come back exactly, writable, and an array two attributes share is shared again.
numpy is never imported by core to look at a value: only a value whose type is numpy's, with numpy loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from agentsnap_core import Client, Snapshottable
from agentsnap_core.errors import AgentSnapError


class Retriever(Snapshottable):
    def __init__(self) -> None:
        self.vectors = np.zeros((0, 4), np.float32)
        self.index: Any = None
        self.best: Any = None


@pytest.fixture
def client(tmp_path: Path) -> Client:
    with Client(tmp_path) as c:
        yield c


@pytest.mark.parametrize("array", [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),
    np.zeros((0, 4), np.int8),
    np.array(["ab", "c"]),
    np.array(["2024-01-01T10:00"], dtype="datetime64[ns]"),
    np.array([1 + 2j], dtype=">c16"),
    np.array(True),
], ids=["float32-2d", "fortran-order", "empty", "unicode", "datetime64", "big-endian-complex", "0-d"])
def test_an_array_comes_back_with_its_dtype_shape_and_values(client: Client, array: Any) -> None:
    agent = Retriever()
    agent.vectors = array
    back = client.restore(client.save(agent, agent_id="rag")).vectors
    assert type(back) is np.ndarray and back.dtype == array.dtype and back.shape == array.shape
    assert np.array_equal(back, array) and back.flags.writeable


def test_a_numpy_scalar_stays_a_numpy_scalar_and_a_shared_array_stays_shared(client: Client) -> None:
    agent = Retriever()
    agent.vectors = np.ones((2, 4), np.float32)
    agent.index = {"all": agent.vectors}
    agent.best = np.float64(0.93)
    back = client.restore(client.save(agent, agent_id="rag"))
    assert type(back.best) is np.float64 and back.best == np.float64(0.93)
    assert back.index["all"] is back.vectors
    back.vectors[0, 0] = 5
    assert back.index["all"][0, 0] == 5


@pytest.mark.parametrize("array", [np.array([1, "x"], dtype=object), np.zeros(2, dtype=[("a", "i4"), ("b", "f8")])],
                         ids=["object", "structured"])
def test_an_array_without_plain_bytes_is_one_clear_error_and_nothing_is_saved(client: Client, array: Any) -> None:
    agent = Retriever()
    agent.vectors = array
    with pytest.raises(AgentSnapError, match=r"Retriever\.vectors: a numpy array of dtype .* has no plain bytes"):
        client.save(agent, agent_id="rag")
    assert client.timeline() == []
