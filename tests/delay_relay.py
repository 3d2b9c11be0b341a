"""A delaying relay for SSH's ProxyCommand: a slow link on loopback, for tests and benchmarks.

    python tests/delay_relay.py DELAY_S HOST PORT

connects to HOST:PORT (the loopback sshd) and relays bytes both ways between it and its own
stdin/stdout, holding every chunk for DELAY_S seconds before passing it on, in order. Each
direction is a reader that stamps what it reads with the moment it is due and a writer that
waits for that moment, so the link keeps its bandwidth: a chunk read while an earlier one is
held is delayed DELAY_S from its own arrival, not queued behind the other's delay. The round
trip through the relay grows by 2 * DELAY_S.

Used as `ProxyCommand python3 tests/delay_relay.py 0.03 127.0.0.1 PORT` in an ssh_config;
it exits when either side closes.
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys

CHUNK = 65536


class _Pipe:
    """One direction: chunks stamped with the time they are due, released in order."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self._held: collections.deque[tuple[float, bytes]] = collections.deque()
        self._arrived = asyncio.Event()

    def put(self, data: bytes) -> None:
        due = asyncio.get_running_loop().time() + self.delay_s
        self._held.append((due, data))
        self._arrived.set()

    async def get(self) -> bytes:
        """The next chunk once it is due; b"" (end of input) comes in order too."""
        while not self._held:
            self._arrived.clear()
            await self._arrived.wait()
        due, data = self._held.popleft()
        wait = due - asyncio.get_running_loop().time()
        if wait > 0:
            await asyncio.sleep(wait)
        return data


async def _read_into(reader: asyncio.StreamReader, pipe: _Pipe) -> None:
    while True:
        data = await reader.read(CHUNK)
        pipe.put(data)
        if not data:
            return


async def _write_from(pipe: _Pipe, writer: asyncio.WriteTransport | asyncio.StreamWriter) -> None:
    while data := await pipe.get():
        writer.write(data)
        if isinstance(writer, asyncio.StreamWriter):
            await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()


async def relay(delay_s: float, host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server_reader, server_writer = await asyncio.open_connection(host, port)
    stdin = asyncio.StreamReader(limit=2**20)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(stdin), os.fdopen(0, "rb", buffering=0)
    )
    stdout, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(1, "wb", buffering=0))
    upstream, downstream = _Pipe(delay_s), _Pipe(delay_s)
    tasks = [
        asyncio.create_task(_read_into(stdin, upstream)),
        asyncio.create_task(_write_from(upstream, server_writer)),
        asyncio.create_task(_read_into(server_reader, downstream)),
        asyncio.create_task(_write_from(downstream, stdout)),
    ]
    # Either side closing ends the link: once the server's data is all out, or our client
    # went away (its writes to us ended and the server has nothing more to say).
    await asyncio.wait([tasks[1], tasks[3]], return_when=asyncio.FIRST_COMPLETED)
    if not tasks[3].done():
        await asyncio.wait([tasks[3]], timeout=5.0)
    for task in tasks:
        task.cancel()
    server_writer.close()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: delay_relay.py DELAY_S HOST PORT", file=sys.stderr)
        return 2
    try:
        asyncio.run(relay(float(argv[0]), argv[1], int(argv[2])))
    except (ConnectionError, BrokenPipeError, OSError) as exc:
        print(f"delay_relay: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
