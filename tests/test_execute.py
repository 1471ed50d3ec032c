"""tools/execute.py: `make notebooks` executes chapters through nbclient with kernel channels that
poll in one-second slices, so a lost ZeroMQ wake-up costs a second instead of a whole cell
timeout."""

import asyncio
import time
from queue import Empty

import nbformat
import pytest

from tools import execute


class _Socket:
    """A socket whose message is queued from the start, but whose first wake-up is lost: the first
    poll that waits reports nothing; any later poll (or a zero-timeout one) sees the message."""

    def __init__(self, has_message=True):
        self.polls, self.has_message = [], has_message

    async def poll(self, timeout_ms):
        self.polls.append(timeout_ms)
        if timeout_ms > 0:
            await asyncio.sleep(timeout_ms / 1000)
        return int(self.has_message and len(self.polls) > 1)


def _channel(socket):
    channel = execute.SlicedChannel.__new__(execute.SlicedChannel)  # no real socket
    channel.socket = socket

    async def recv():
        return {"msg_type": "execute_reply"}

    channel._recv = recv
    return channel


def test_a_lost_wake_up_costs_one_slice_not_the_timeout(monkeypatch):
    monkeypatch.setattr(execute, "SLICE_S", 0.05)
    socket = _Socket()
    start = time.monotonic()
    msg = asyncio.run(_channel(socket).get_msg(timeout=120))
    assert msg == {"msg_type": "execute_reply"}
    assert time.monotonic() - start < 5
    assert socket.polls[0] == 50  # one slice, not 120 000 ms


def test_timeouts_still_end_in_empty(monkeypatch):
    monkeypatch.setattr(execute, "SLICE_S", 0.05)
    socket = _Socket(has_message=False)
    start = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(_channel(socket).get_msg(timeout=0.2))
    assert 0.2 <= time.monotonic() - start < 5
    assert all(0 <= p <= 50 for p in socket.polls) and len(socket.polls) >= 4
    with pytest.raises(Empty):
        asyncio.run(_channel(_Socket(has_message=False)).get_msg(timeout=0))


def test_execute_runs_a_notebook_through_the_sliced_channels(tmp_path, monkeypatch):
    used = []
    get_msg = execute.SlicedChannel.get_msg

    async def counting(self, timeout=None):
        used.append(timeout)
        return await get_msg(self, timeout)

    monkeypatch.setattr(execute.SlicedChannel, "get_msg", counting)
    path = tmp_path / "nb.ipynb"
    cells = ["import os\nprint(os.getcwd())", "1 + 1"]
    nbformat.write(
        nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in cells]), path
    )
    assert execute.main(["--kernel", "python3", "--timeout", "60", str(path)]) == 0
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0].outputs[0]["text"].strip() == str(tmp_path)  # runs in the notebook's folder
    assert nb.cells[1].outputs[0]["data"]["text/plain"] == "2"
    assert used, "nbclient did not use tools.execute's channels"


def test_a_failing_cell_fails_the_command(tmp_path, capsys):
    path = tmp_path / "bad.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")]), path)
    assert execute.main(["--kernel", "python3", str(path)]) == 1
    assert "ZeroDivisionError" in capsys.readouterr().err
