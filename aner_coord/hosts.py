"""Which workers share a host, in the words `status`, `plan` and the scaling report use.

Every worker reports its host identity at the handshake, and local threads report this
host's (docs/contracts.md, section 18). Records with equal identities run on one host
and share its CPUs, whatever their names or transports; a worker that reported none (an
older one, or a host without a machine ID or boot id) is on a host nobody can name, and is
never counted as sharing one.
"""

from __future__ import annotations

from collections.abc import Mapping


def host_groups(hosts: Mapping[str, str | None]) -> list[tuple[str, ...]]:
    """The identities of `hosts` (identity -> host) grouped by known host, in the order
    each host first appears; workers of an unknown host are left out."""
    groups: dict[str, list[str]] = {}
    for identity, host in hosts.items():
        if host is not None:
            groups.setdefault(host, []).append(identity)
    return [tuple(members) for members in groups.values()]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def hosts_text(
    hosts: Mapping[str, str | None], noun: str = "record", here: str | None = None
) -> str:
    """`3 records on 1 host`; `3 records on 2 hosts: p1 + p2 share one`. With `here` (the
    identity of the host that speaks) its group is named: `2 records on 1 host, this one`,
    `3 records on 2 hosts: p1 + p2 share this one`. Workers of an unknown host are counted
    apart: `3 records: 2 on 1 known host, 1 on a host not reported: p1 + p2 share one`."""
    groups = host_groups(hosts)
    known = sum(len(g) for g in groups)
    unknown = len(hosts) - known
    if not groups:
        return f"{_count(len(hosts), noun)} on hosts not reported"
    if unknown:
        text = (
            f"{_count(len(hosts), noun)}: {known} on {_count(len(groups), 'known host')}, "
            f"{unknown} on a host not reported"
        )
    else:
        text = f"{_count(len(hosts), noun)} on {_count(len(groups), 'host')}"
    marks = []
    for group in groups:
        on_here = here is not None and hosts[group[0]] == here
        if len(groups) == 1 and not unknown:
            if on_here:
                text += ", this one"
        elif len(group) > 1:
            marks.append(" + ".join(group) + (" share this one" if on_here else " share one"))
        elif on_here:
            marks.append(f"{group[0]} is on this one")
    return text + (": " + "; ".join(marks) if marks else "")


def on_one_host(hosts: Mapping[str, str | None], host: str | None) -> bool:
    """Whether every worker of `hosts` reported `host` (a known one)."""
    return host is not None and bool(hosts) and all(h == host for h in hosts.values())
