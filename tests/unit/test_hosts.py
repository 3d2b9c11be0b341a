"""`aner_coord.hosts`: which workers share a host, in the words `status`, `plan` and the scaling
report print (docs/contracts.md, section 18)."""

from __future__ import annotations

import pytest

from aner_coord.hosts import host_groups, hosts_text, on_one_host

A, B, C = "a" * 32, "b" * 32, "c" * 32


def test_records_are_grouped_by_host_in_order_and_unknown_hosts_share_nothing() -> None:
    hosts = {"p1": B, "p2": A, "p3": B, "p4": None, "p5": None}
    assert host_groups(hosts) == [("p1", "p3"), ("p2",)]


@pytest.mark.parametrize(
    ("hosts", "here", "text"),
    [
        ({"p1": A, "p2": A, "p3": A}, None, "3 records on 1 host"),
        ({"p1": A, "p2": A}, A, "2 records on 1 host, this one"),
        ({"p1": A}, None, "1 record on 1 host"),
        ({"p1": A, "p2": B, "p3": C}, None, "3 records on 3 hosts"),
        ({"p1": A, "p2": B, "p3": A}, None, "3 records on 2 hosts: p1 + p3 share one"),
        ({"p1": A, "p2": B, "p3": A}, A, "3 records on 2 hosts: p1 + p3 share this one"),
        ({"p1": A, "p2": B}, B, "2 records on 2 hosts: p2 is on this one"),
        (
            {"p1": A, "p2": A, "p3": None},
            None,
            "3 records: 2 on 1 known host, 1 on a host not reported: p1 + p2 share one",
        ),
        ({"p1": None, "p2": None}, A, "2 records on hosts not reported"),
    ],
)
def test_the_sentence(hosts: dict[str, str | None], here: str | None, text: str) -> None:
    assert hosts_text(hosts, here=here) == text


def test_the_noun_is_the_callers() -> None:
    assert hosts_text({"local-1": A, "local-2": A}, "worker") == "2 workers on 1 host"


def test_on_one_host_needs_every_worker_on_that_known_host() -> None:
    assert on_one_host({"p1": A, "p2": A}, A)
    assert not on_one_host({"p1": A, "p2": B}, A)
    assert not on_one_host({"p1": A, "p2": None}, A)
    assert not on_one_host({"p1": None}, None)  # nobody knows: never taken for this host
    assert not on_one_host({}, A)
