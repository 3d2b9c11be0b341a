"""Lease holders killed at random, for tests/unit/test_leases.py: `python lease_holders.py
DIR N SEED` forks N holders one after another (a fresh, single-threaded process forks
safely and cheaply), each taking 1 to 3 slots of a 3-slot table in DIR and then waiting;
each is killed with SIGKILL at a random moment (before, while or after it takes them),
reaped, and then every slot must be free at once. Prints a JSON report: kills, how many
holders held their slots when killed, and how many kills left a slot taken (stale)."""

from __future__ import annotations

import json
import os
import random
import select
import signal
import sys
from pathlib import Path

from aner_worker.leases import Holder, Lease, LeaseTable

SIZE = 3


def holder(table: LeaseTable, slots: int, ready: int) -> None:
    """The child: take the slots, say so, wait to be killed."""
    got = table.take(slots, Holder(os.getpid(), kind="test", slots=slots))
    os.write(ready, b"1" if isinstance(got, Lease) else b"0")
    while True:
        signal.pause()


def main() -> int:
    path, count, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    table = LeaseTable(SIZE, path)
    rng = random.Random(seed)
    me = Holder(os.getpid(), kind="checker", slots=SIZE)
    held = stale = 0
    for _ in range(count):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            try:
                holder(table, rng.randint(1, SIZE), write_end)
            finally:
                os._exit(0)
        os.close(write_end)
        # Kill at once, after a random fraction of a millisecond, or once it holds them.
        how = rng.random()
        if how < 0.5:
            select.select([read_end], [], [], 60)
            held += os.read(read_end, 1) == b"1"
        elif how < 0.8:
            select.select([read_end], [], [], rng.random() / 1000)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_end)
        got = table.take(SIZE, me)
        if isinstance(got, Lease):
            got.release()
        else:
            stale += 1
    print(json.dumps({"kills": count, "held_when_killed": held, "stale": stale}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
