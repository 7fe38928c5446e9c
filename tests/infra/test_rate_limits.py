"""The counters for while Redis is away (infra.rate_limits.LocalCounters): the same fixed windows as
the shared ones, counted under a lock, bounded in memory."""

import threading

from infra.rate_limits import LocalCounters


def test_a_window_counts_from_the_first_hit_and_the_next_starts_afresh():
    counters = LocalCounters()

    first = counters.hit("login:account:a", 60, now=1000.0)
    second = counters.hit("login:account:a", 60, now=1059.0)
    next_window = counters.hit("login:account:a", 60, now=1061.0)

    assert (first.hits, second.hits, next_window.hits) == (1, 2, 1)
    assert second.ends_in_s == 1.0 and next_window.ends_in_s == 59.0
    assert not first.shared


def test_a_hit_taken_back_no_longer_counts():
    counters = LocalCounters()
    counters.hit("k", 60, now=10.0)
    window = counters.hit("k", 60, now=11.0)

    counters.take_back(window)

    assert counters.hit("k", 60, now=12.0).hits == 2


def test_threads_lose_no_hit():
    counters = LocalCounters()
    start = threading.Barrier(8)

    def hammer():
        start.wait()
        for _ in range(500):
            counters.hit("k", 60, now=5.0)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert counters.hit("k", 60, now=5.0).hits == 8 * 500 + 1


def test_a_flood_of_identities_stays_within_the_bound_and_keeps_the_account_under_attack():
    counters = LocalCounters(max_keys=100)

    for attempt in range(1000):
        counters.hit("login:account:target", 900, now=1.0)
        counters.hit(f"login:address:10.0.{attempt // 256}.{attempt % 256}", 900, now=1.0)

    assert len(counters._windows) <= 100
    assert counters.hit("login:account:target", 900, now=2.0).hits == 1001
    assert counters.hit("login:address:10.0.3.231", 900, now=2.0).hits == 2  # the newest are kept
    assert counters.hit("login:address:10.0.0.1", 900, now=2.0).hits == 1  # the oldest went
