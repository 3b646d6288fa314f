"""The seed's autobatching rules (DESIGN.md section 4)."""

import numpy as np

from helpers import StubPolicy
from offpolicy.runners.inference import InferenceServer


def make_server(autobatch: int, active: int):
    policy = StubPolicy()
    server = InferenceServer(policy, autobatch)
    for _ in range(active):
        server.worker_active()
    return server, policy


def obs():
    return np.zeros(2, dtype=np.float32)


def test_seventh_waits_eighth_releases_all():
    server, policy = make_server(autobatch=8, active=16)
    requests = [server.submit(obs(), False) for _ in range(7)]
    assert not any(r.done for r in requests)
    assert server.pending == 7
    requests.append(server.submit(obs(), False))
    assert all(r.done for r in requests)
    assert [b[0] for b in policy.log["batches"]] == [8]
    assert server.pending == 0


def test_three_active_workers_release_at_three():
    server, policy = make_server(autobatch=8, active=3)
    first = [server.submit(obs(), False) for _ in range(2)]
    assert not any(r.done for r in first)
    third = server.submit(obs(), False)
    assert third.done and all(r.done for r in first)
    assert [b[0] for b in policy.log["batches"]] == [3]


def test_lowering_active_count_releases_partial_batch():
    server, policy = make_server(autobatch=8, active=5)
    requests = [server.submit(obs(), False) for _ in range(3)]
    server.worker_idle()
    assert not any(r.done for r in requests)
    server.worker_idle()
    assert all(r.done for r in requests)
    assert [b[0] for b in policy.log["batches"]] == [3]


def test_batch_is_deterministic_only_if_every_request_is():
    server, policy = make_server(autobatch=2, active=2)
    server.submit(obs(), True)
    server.submit(obs(), False)
    server.submit(obs(), True)
    server.submit(obs(), True)
    assert [b[1] for b in policy.log["batches"]] == [False, True]


def test_update_flushes_pending_with_old_parameters_first():
    server, policy = make_server(autobatch=4, active=4)
    requests = [server.submit(obs(), False) for _ in range(2)]
    new_state = {"version": policy.version + 7}
    server.update_policy(new_state)
    assert all(r.done for r in requests)
    assert requests[0].wait()[1]["version"] == 0.0
    assert float(policy.version) == 7.0
    later = [server.submit(obs(), False) for _ in range(4)]
    assert later[0].wait()[1]["version"] == 7.0


def test_each_request_gets_the_action_for_its_own_observation():
    """The stub echoes each observation's id: a batch answered out of order would hand one request
    another's action."""
    server, policy = make_server(autobatch=3, active=3)
    requests = [server.submit(np.array([id_, 0], dtype=np.float32), False) for id_ in (7, 3, 5, 11, 2, 9)]
    assert [b[0] for b in policy.log["batches"]] == [3, 3]
    for request, id_ in zip(requests, (7, 3, 5, 11, 2, 9)):
        action, context = request.wait(timeout=1)
        assert action == id_ and context == {"version": 0.0}
