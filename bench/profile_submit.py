"""Where one API submit spends its time: cProfile and the SQL of POST /api/v1/requests/, in-process;
then, after one scheduling pass, the SQL and CPU of cancels (of pending requests) and releases (of
scheduled ones).

    python -m bench.profile_submit [--database-url postgres://postgres@127.0.0.1:5432/gpu_portal_d_profile]
                                   [--redis-url redis://127.0.0.1:6379/4] [--submits 300] [--top 25]
                                   [--profile submit|cancel|release]

Recreates its own PostgreSQL database (dropped at the end), seeds the demo cluster and a user
with an API token, warms up, then sends submits through DRF's test client with the token, as
production settings would serve them (DEBUG=0, Redis for Celery, the channel layer and the
throttle cache). Prints the queries of one submit (CaptureQueriesContext), the mean time per
submit, and the cProfile functions (CPU time) with the most cumulative time over the calls `--profile` names.
"""

import cProfile
import datetime as dt
import io
import os
import pstats
import sys
import time

from bench.load import _purge_broker, submit_body
from bench.scratch_db import arguments, drop_database, recreate_database


def main() -> int:
    parser = arguments(__doc__, "gpu_portal_d_profile")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/4")
    parser.add_argument("--submits", type=int, default=300)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--save", help="also write the cProfile stats to this file (for pstats or snakeviz)")
    parser.add_argument(
        "--profile", choices=("submit", "cancel", "release"), default="submit", help="the call profiled"
    )
    args = parser.parse_args()
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DEBUG": "0",
            "SECRET_KEY": "bench-profile-" + os.urandom(16).hex(),
            "ALLOWED_HOSTS": "testserver",
            "SECURE_SSL_REDIRECT": "0",
            "DATABASE_URL": args.database_url,
            "REDIS_URL": args.redis_url,
            "API_THROTTLE_RATE": "100000/s",
            "LOG_LEVEL": "WARNING",
        }
    )
    recreate_database(args.database_url)
    try:
        _profile(args)
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(args.database_url)
        _purge_broker(args.redis_url)
    return 0


def _profile(args) -> None:
    import random

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone
    from rest_framework.test import APIClient

    from demo.seed import seed_demo
    from scheduler_app.choices import RequestState
    from scheduler_app.models import GpuRequest
    from scheduler_app.passes.run import run_scheduling_pass
    from teams.models import Membership, Team
    from teams.services import create_api_token

    call_command("migrate", verbosity=0)
    seed_demo()
    team = Team.objects.create(name="Profile", slug="profile")
    user = get_user_model().objects.create_user("profile")
    Membership.objects.create(team=team, user=user)
    secret = create_api_token(user, name="profile", expires_at=timezone.now() + dt.timedelta(days=1))[1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    rng = random.Random(1)

    def submit(n: int) -> None:
        response = client.post("/api/v1/requests/", submit_body(rng, "profile", n), format="json")
        assert response.status_code == 201, response.content

    for n in range(20):  # warm-up: imports, ContentType cache, connections
        submit(n)
    with CaptureQueriesContext(connection) as queries:
        submit(20)
    _print_queries("submit", queries)

    began, began_cpu = time.perf_counter(), time.process_time()
    for n in range(21, 21 + args.submits):
        submit(n)
    each_ms = (time.perf_counter() - began) / args.submits * 1000
    cpu_ms = (time.process_time() - began_cpu) / args.submits * 1000
    print(
        f"\n{args.submits} submits: {each_ms:.1f} ms each without the profiler, "
        f"{cpu_ms:.1f} ms of it this process's CPU (the rest: PostgreSQL, Redis, waiting)"
    )
    # One pass places what fits: releases then act on scheduled requests (a pending one is refused),
    # cancels on pending ones, as most of bench.load's do.
    run_scheduling_pass()
    profiler = cProfile.Profile(time.process_time)  # follows the calls --profile names
    mine = GpuRequest.objects.filter(user=user).order_by("id")
    pending = list(mine.filter(state=RequestState.PENDING).values_list("id", flat=True))
    scheduled = list(mine.filter(state=RequestState.SCHEDULED).values_list("id", flat=True))
    for action, chosen in (("cancel", pending), ("release", scheduled)):
        with CaptureQueriesContext(connection) as queries:
            response = client.post(f"/api/v1/requests/{chosen[0]}/{action}/")
        assert response.status_code == 200, response.content
        _print_queries(action, queries)
        profiled = args.profile == action
        began_cpu = time.process_time()
        for pk in chosen[1:]:
            if profiled:
                profiler.enable()
            client.post(f"/api/v1/requests/{pk}/{action}/")
            if profiled:
                profiler.disable()
        cpu_ms = (time.process_time() - began_cpu) / max(1, len(chosen) - 1) * 1000
        under = " (under the profiler)" if profiled else ""
        print(f"\n{len(chosen) - 1} {action}s: {cpu_ms:.1f} ms of this process's CPU each{under}")

    if args.profile == "submit":
        profiler.enable()
        for n in range(21 + args.submits, 21 + 2 * args.submits):
            submit(n)
        profiler.disable()
    if args.save:
        profiler.dump_stats(args.save)
    for order in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(args.top)
        print(out.getvalue())


def _print_queries(action: str, queries) -> None:
    print(f"{len(queries)} queries in one {action}:")
    for query in queries.captured_queries:
        print(f"  {query['time']}s  {query['sql'][:160]}")


if __name__ == "__main__":
    sys.exit(main())
