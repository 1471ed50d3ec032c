"""Execute chapters in place in a fresh kernel, as `jupyter nbconvert --to notebook --execute
--inplace` does, minus its occasional silent wait of one whole cell timeout.

`python -m tools.execute [--timeout S] [--kernel NAME] NB ...` (`make notebooks` runs it).

Why not nbconvert: nbclient (under nbconvert) waits for a cell's execute_reply with one asyncio poll
of the kernel's shell socket that lasts the whole cell timeout. ZeroMQ signals a socket's readiness
edge-triggered, and now and then that wake-up is lost: seen after chapter 02's `pe_widget()` cell,
which sends a burst of widget messages. The reply then sits unread until the poll times out, when
pyzmq's final zero-timeout poll finds it and execution goes on as if nothing happened: a pause of
exactly the cell timeout (120 s in `make notebooks`), with no error. Here every wait on a kernel
socket polls in slices of SLICE_S seconds, so a lost wake-up costs at most one slice.
"""

import argparse
import sys
import time
from pathlib import Path
from queue import Empty

import nbformat
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from traitlets import Type

SLICE_S = 1.0


class SlicedChannel(AsyncZMQSocketChannel):
    """A kernel channel whose get_msg polls in short slices up to its timeout (None: forever)."""

    async def get_msg(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = SLICE_S if deadline is None else min(SLICE_S, deadline - time.monotonic())
            if await self.socket.poll(max(0, int(left * 1000))):
                return await self._recv()
            if deadline is not None and time.monotonic() >= deadline:
                raise Empty


class KernelClient(AsyncKernelClient):
    shell_channel_class = Type(SlicedChannel)
    iopub_channel_class = Type(SlicedChannel)
    control_channel_class = Type(SlicedChannel)


class KernelManager(AsyncKernelManager):
    def client(self, **kwargs):
        # nbclient sets client_class to jupyter_client's own async client after creating the
        # manager, so the factory is chosen here, where the client is made
        self.client_factory = KernelClient
        return super().client(**kwargs)


def execute(path, kernel_name: str = "tfx", timeout: int = 120) -> None:
    """Run every cell of the notebook at `path` in a fresh kernel (its folder as the working
    directory) and write the outputs back; a failing cell raises CellExecutionError."""
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb,
        kernel_name=kernel_name,
        timeout=timeout,
        kernel_manager_class=KernelManager,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    nbformat.write(nb, path)


def main(argv: list) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--kernel", default="tfx")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per cell")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        start = time.monotonic()
        try:
            execute(path, args.kernel, args.timeout)
        except CellExecutionError as e:
            print(f"{path}: a cell failed\n{e}", file=sys.stderr)
            return 1
        print(f"{path}: executed in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
