"""A sender's group peers and admin peers as views (Organisation.group_peers_view,
admin_peers_view): the same ids as the lists, stamped by the postman exactly as those
lists would be."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import networkx as nx
import pytest

from megaactors import Organisation, RouteError, Send
from megaactors.core.ledger import Ledger
from megaactors.core.messages import ADMIN, INTRA, Packet
from megaactors.core.peer_view import Without
from megaactors.runtime.postman import Postman

MAKERS: list[Callable[[], Organisation]] = [
    lambda: Organisation.two_tier(300, 7),
    lambda: Organisation.two_tier(200, 9, boss=True),
    lambda: Organisation.hierarchy(40, 3),  # middle agents are in two groups
    lambda: Organisation.flat(12),
    lambda: Organisation.from_networkx(nx.path_graph(9)),
]
IDS = ["two-tier", "boss", "hierarchy", "flat", "graph"]


@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_the_view_lists_the_group_peers_and_is_one_for_members_of_one_group(make: Callable[[], Organisation]) -> None:
    org = make()
    views = 0
    for a in range(org.n):
        view = org.group_peers_view(a)
        assert list(view) == org.group_peers(a) and len(view) == len(org.group_peers(a))
        one_group = org.graph is None and org.member_group[a] >= 0 and org.admin_group[a] in (-1, org.member_group[a])
        assert (type(view) is Without) == one_group
        views += one_group
    if org.kind in ("two-tier", "flat") and org.boss is None:  # everyone is in one group
        assert views == org.n
    for a in range(org.n):
        view = org.admin_peers_view(a)
        assert list(view) == org.admin_peers(a) and len(view) == len(org.admin_peers(a))
        assert (type(view) is Without) == (org.graph is None and org.admin_group[a] >= 0)


def stamp_both(org: Organisation, sender: int, view: Sequence[int], channel: str = INTRA) -> tuple[Postman, Postman]:
    """Stamp ``view`` and its list from two postmen in the same state; return them."""
    postmen = (Postman(org, Ledger(org.n), 100), Postman(org, Ledger(org.n), 100))  # ids cross 128 and 256
    sent: list[list[Packet]] = []
    for postman, recipients in zip(postmen, (view, list(view)), strict=True):
        sent.append(postman.stamp(sender, Send(recipients, channel, "chat", [1, "hi"]), 0.5))
    (by_view, by_list), (lv, ll) = sent, (postmen[0].ledger, postmen[1].ledger)
    assert [list(p.recipients) for p in by_view] == [list(p.recipients) for p in by_list]
    assert [p.first_id for p in by_view] == [p.first_id for p in by_list]
    assert (lv.messages, lv.bytes, lv.bytes_by_channel) == (ll.messages, ll.bytes, ll.bytes_by_channel)
    assert postmen[0].broadcast == postmen[1].broadcast
    return postmen


@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_a_view_is_stamped_as_its_list(make: Callable[[], Organisation]) -> None:
    org = make()
    grouped = 0
    for a in range(org.n):
        view = org.group_peers_view(a)
        if not view:
            continue
        by_view, _ = stamp_both(org, a, view)
        assert by_view.broadcast == (org.graph is None)  # a graph's edges are never a whole group
        if type(view) is Without:  # the group and the sender's place in it, from the view alone
            assert by_view.group == org.member_group[a] and org.groups[by_view.group][by_view.position] == a
            grouped += 1
    assert grouped == sum(type(v) is Without and len(v) > 0 for v in map(org.group_peers_view, range(org.n)))
    admins = 0
    for a in range(org.n):
        view = org.admin_peers_view(a)
        if view:
            by_view, _ = stamp_both(org, a, view, ADMIN)
            assert by_view.broadcast == (org.graph is None) and by_view.group == -1
            admins += type(view) is Without
    assert admins == (len(org.groups) if org.graph is None and len(org.groups) > 1 else 0)


def test_a_view_made_before_a_recruit_joined_is_the_group_as_it_was() -> None:
    org = Organisation.two_tier(60, 6)
    sender, admin = org.groups[2][3], org.groups[4][0]
    view, admins = org.group_peers_view(sender), org.admin_peers_view(admin)
    org.recruit(org.groups[2][0])  # the admin recruits: its group grows at its end
    by_view, _ = stamp_both(org, sender, view)
    assert not by_view.broadcast and by_view.group == -1  # no longer the whole group
    assert list(org.group_peers_view(sender)) == org.group_peers(sender) == [*view, org.n - 1]
    org.recruit(sender)  # a member recruits: it administers a new group, one more admin
    assert list(org.admin_peers_view(admin)) == org.admin_peers(admin) == [*admins, sender]
    by_view, _ = stamp_both(org, admin, admins, ADMIN)  # every admin but the new one
    assert not by_view.broadcast


def test_a_view_off_its_channel_or_of_another_group_is_checked_as_a_list() -> None:
    org = Organisation.two_tier(60, 6)
    member, stranger = org.groups[1][2], org.groups[3][2]
    with pytest.raises(RouteError):
        Postman(org, Ledger(org.n)).stamp(member, Send(org.group_peers_view(stranger), INTRA, "chat", 0), 0.0)
    with pytest.raises(RouteError):
        Postman(org, Ledger(org.n)).stamp(member, Send(org.group_peers_view(member), ADMIN, "chat", 0), 0.0)
    admin, other = org.groups[1][0], org.groups[2][0]  # an admin's own group on the admin channel
    with pytest.raises(RouteError):
        Postman(org, Ledger(org.n)).stamp(admin, Send(org.group_peers_view(admin), ADMIN, "chat", 0), 0.0)
    with pytest.raises(RouteError):  # another admin's peers: the sender among them
        Postman(org, Ledger(org.n)).stamp(admin, Send(org.admin_peers_view(other), ADMIN, "chat", 0), 0.0)
    with pytest.raises(RouteError):  # admin peers on the intra-group channel
        Postman(org, Ledger(org.n)).stamp(admin, Send(org.admin_peers_view(admin), INTRA, "chat", 0), 0.0)
