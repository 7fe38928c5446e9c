"""`gpu-portal`: the SDK from a shell. Exit codes are part of the interface (see EXIT_CODES)."""

import argparse
import asyncio
import getpass
import os
import re
import shlex
import sys

from gpu_portal_sdk import config, errors, output, sessions
from gpu_portal_sdk.checkpoint import CHECKPOINT_DIR_ENV, checkpointed
from gpu_portal_sdk.client import ResourceManager

OK, FAILED, USAGE, AUTH, NOT_FOUND, INVALID, BUSY, UNAVAILABLE, RATE_LIMITED, NOT_OFFERED = range(10)
INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as shells report it
CLOSED_PIPE = 141  # the reader went away (`| head`): 128 + SIGPIPE, as a Unix tool killed by it reports

EXIT_CODES: list[tuple[type[errors.PortalError], int]] = [
    (errors.AuthenticationError, AUTH),
    (errors.PermissionDeniedError, AUTH),
    (errors.NotFoundError, NOT_FOUND),
    (errors.ValidationError, INVALID),
    (errors.ConflictError, INVALID),
    (errors.ResourceBusyError, BUSY),
    (errors.ServiceUnavailableError, UNAVAILABLE),
    (errors.ConnectionFailedError, UNAVAILABLE),
    (errors.RateLimitedError, RATE_LIMITED),
]
STATES = [
    "pending",
    "scheduled",
    "running",
    "migrating",
    "succeeded",
    "failed",
    "cancelled",
    "preempted",
    "released",
]


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code. Everything after `--` is the job's command line.

    Quiet where Unix tools are: a reader that stops reading (`gpu-portal show 13 | head -3`) ends it with
    CLOSED_PIPE, Ctrl-C (following a log, watching) with INTERRUPTED, and neither prints a traceback."""
    try:
        code = _run(argv)
        sys.stdout.flush()  # here, so that a closed pipe is met now rather than at exit
        return code
    except BrokenPipeError:
        # Python flushes stdout once more at exit: point it at /dev/null so that flush finds no pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return CLOSED_PIPE
    except KeyboardInterrupt:
        return INTERRUPTED


def _run(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = []
    if "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    parser = _parser()
    args = parser.parse_args(argv)
    if command and args.command not in ("request", "estimate", "shell"):
        parser.error(f"{args.command} takes no command after --")
    args.argv = command
    if args.command == "logout":
        return _logout()
    if args.command == "checkpointed":
        return _checkpointed(args.dir)
    as_json = getattr(args, "json", False)
    try:
        if args.command == "login":
            return _login(parser, args)
        try:
            portal = _connect(getattr(args, "url", None), getattr(args, "token", None), args)
        except errors.ConfigurationError as error:
            parser.error(f"{error.message} Here, --url and --token also work.")
        return args.run(portal, args, shlex.join(command), as_json)
    except errors.PortalError as error:
        for line in said(error):
            print(f"gpu-portal: {line}", file=sys.stderr)
        return next((code for cls, code in EXIT_CODES if isinstance(error, cls)), FAILED)


# The portal's (and the SDK's) field names, as this CLI's options call them.
OPTIONS = {
    "min_gpu": "--gpu",
    "gpu_milli": "--gpu",
    "num_gpus": "--gpus",
    "task_type": "--task",
    "billing_mode": "--spot/--on-demand",
    "allow_on_demand_fallback": "--no-fallback",
    "gpu_model": "--gpu-model",
    "gpu_memory_mib": "--gpu-memory",
    "max_duration_s": "--max-duration",
    "checkpoint_interval_s": "--checkpoint-interval",
    "pinned": "--pinned",
    "restart_overhead_s": "--restart-overhead",
    "environment": "--env",
    "command": "the command after --",
    "grace_s": "--grace",
    "notice_id": "--notice-id",
}
# Django's and DRF's stock phrases, as a person at a shell would put them.
PHRASES = [
    (re.compile(r"Ensure this value is greater than or equal to (\S+)\."), r"must be at least \1."),
    (re.compile(r"Ensure this value is less than or equal to (\S+)\."), r"must be at most \1."),
    (re.compile(r"A valid integer is required\."), "must be a whole number."),
    (re.compile(r"This field may not be blank\."), "must not be empty."),
]


def said(error: errors.PortalError) -> list[str]:
    """The error once, in the CLI's terms: a line per bad field under its option's name ("--gpu: must be
    more than 0."), else the portal's message (which repeats the first field's: printing both said it
    twice)."""
    fields = error.fields if isinstance(error, errors.ValidationError) else {}
    lines = []
    for field, messages in fields.items():
        text = _plain(" ".join(map(str, messages)))
        lines.append(text if field == "non_field_errors" else f"{OPTIONS.get(field, field)}: {text}")
    return lines or [error.message]


def _plain(text: str) -> str:
    for pattern, replacement in PHRASES:
        text = pattern.sub(replacement, text)
    return text


def _connect(url: str | None, token: str | None, args) -> ResourceManager:
    """The options first, then the environment, then the saved login (ResourceManager's own order)."""
    return ResourceManager(
        url, token, timeout=getattr(args, "http_timeout", 10.0), max_retries=getattr(args, "retries", 3)
    )


def _login(parser, args) -> int:
    """Ask for (or take) the address and a token, check the token against the portal, save both."""
    interactive = sys.stdin.isatty()
    url = getattr(args, "url", None) or os.environ.get(config.URL_ENV)
    if not url and interactive:
        url = input("Portal address (e.g. https://gpu.example.org): ").strip()
    if not url:
        parser.error(f"login: give the portal's address: --url or {config.URL_ENV}")
    token = getattr(args, "token", None)
    if not token:
        if interactive and not args.token_stdin:
            token = getpass.getpass(f"API token (create one at {config.portal_root(url)}/accounts/tokens/): ")
        else:
            token = sys.stdin.readline()
        token = token.strip()
    if not token:
        parser.error("login: give an API token: --token, --token-stdin, or type it when asked")
    teams = _connect(url, token, args).teams()  # a refused token raises here: nothing is saved
    path = config.config_path()
    config.write_config(path, url, token)
    memberships = ", ".join(f"{t.slug} ({t.role})" for t in teams) or "none yet"
    print(f"Logged in to {config.portal_root(url)}; your teams: {memberships}.")
    print(f"Saved to {path} (readable by you only).")
    overridden = [name for name in (config.URL_ENV, config.TOKEN_ENV) if os.environ.get(name)]
    if overridden:
        print(f"Note: {' and '.join(overridden)} set in this shell take precedence over the saved login.")
    return OK


def _logout() -> int:
    path = config.config_path()
    if not config.remove_config(path):
        print(f"Not logged in: there is no {path}.")
        return OK
    print(f"Removed {path}. The token itself stays valid until it expires; revoke it on the portal's")
    print("Tokens page (/accounts/tokens/) if it may have leaked.")
    return OK


def _checkpointed(directory: str | None) -> int:
    """No portal involved: the job's node agent reads the marker's time."""
    try:
        marker = checkpointed(directory)
    except errors.ConfigurationError as error:
        print(f"gpu-portal: {error.message}", file=sys.stderr)
        return USAGE
    print(f"checkpoint marked complete: {marker}")
    return OK


def _show(value, as_json: bool, human) -> int:
    print(output.to_json(value) if as_json else human(value))
    return OK


def _request(portal, args, command, as_json):
    resource = portal.request_allocation(**_spec(args, command), wait=args.wait, timeout_s=args.wait_timeout)
    return _show(resource, as_json, output.summary)


def _estimate(portal, args, command, as_json):
    return _show(portal.estimate(**_spec(args, command)), as_json, output.estimate)


def _list(portal, args, command, as_json):
    items = portal.list(state=args.state, team=args.team, search=args.search)
    return _show(items, as_json, output.resources)


def _prices(portal, args, command, as_json):
    try:
        prices = portal.prices()
    except errors.NotFoundError:
        # An older portal, from before the price catalog: say so rather than "not found".
        print("gpu-portal: this portal does not offer prices (it has no price catalog).", file=sys.stderr)
        return NOT_OFFERED
    return _show(prices, as_json, output.prices)


def _billing(portal, args, command, as_json):
    mode = portal.switch_billing(args.id, args.mode, checkpoint_interval_s=args.checkpoint_interval)
    return _show(mode, as_json, output.billing)


def _reclaim(portal, args, command, as_json):
    node = portal.reclaim_node(args.node, grace_s=args.grace, notice_id=args.notice_id)
    return _show(node, as_json, output.reclaimed)


def _logs(portal, args, command, as_json):
    """The job's output; with --follow, then what it writes until the request ends (kubectl logs -f)."""
    if args.follow:
        for text in portal.follow_logs(args.id, poll_s=args.poll):
            sys.stdout.write(text)
            sys.stdout.flush()
        return OK
    tail = portal.logs(args.id)
    sys.stdout.write(tail.text)
    return OK


def _watch(portal, args, command, as_json):
    """A line per state change (and checkpoint) as it happens, and the utilization of its cards whenever
    new readings came, until the request ends; then its final state."""
    seen = 0  # events already printed
    read_at = None  # the newest reading already shown
    while True:
        resource = portal.get(args.id)
        events = resource.events or ()
        for event in events[seen:]:
            print(output.watched_event(event), flush=True)
        seen = len(events)
        if resource.is_terminal:
            print(f"Request {resource.id} is {resource.state}.")
            return OK
        if resource.allocations:
            usage = portal.get_utilization(args.id)
            newest = max((g.latest.sampled_at for g in usage.gpus if g.latest), default=None)
            if newest is not None and newest != read_at:
                print(output.watched_utilization(usage, newest), flush=True)
                read_at = newest
        portal.retry.sleep(args.poll)


def _quote(portal, args, command, as_json):
    quote = portal.quote(
        args.gpu_model,
        min_gpu=args.gpu,
        num_gpus=args.gpus,
        max_duration_s=args.max_duration,
        checkpoint_interval_s=args.checkpoint_interval,
        restart_overhead_s=args.restart_overhead,
    )
    return _show(quote, as_json, output.quote)


def _statement(portal, args, command, as_json):
    return _show(portal.statement(args.team, month=args.month, user=args.user), as_json, output.statement)


def _shell(portal, args, command, as_json):
    """A terminal in the allocation (a command's exit status is this one's, like `kubectl exec`)."""
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    return asyncio.run(sessions.shell(portal.url, portal.token, args.id, args.argv, tty=tty))


def _port_forward(portal, args, command, as_json):
    """Until Ctrl-C: each connection to the local port reaches the port in the allocation."""
    local, _, remote = args.ports.rpartition(":")
    try:
        local_port, remote_port = int(local or remote), int(remote)
    except ValueError:
        print(f"gpu-portal: {args.ports!r}: write PORT or LOCAL:REMOTE", file=sys.stderr)
        return USAGE
    said = f"Forwarding {args.address}:{local_port} -> port {remote_port} of request {args.id}"
    forward = sessions.port_forward(
        portal.url, portal.token, args.id, local_port, remote_port, host=args.address,
        ready=lambda: print(said, flush=True),
    )  # fmt: skip
    asyncio.run(forward)
    return OK


def _end(method: str):
    """cancel / release: a request that has already ended is no error, as `scancel` treats work that has
    ended: say so ("Request 13 is already cancelled.") and exit 0."""

    def run(portal, args, command, as_json):
        try:
            resource = getattr(portal, method)(args.id)
        except errors.AlreadyEndedError as ended:
            print(ended.message)
            return OK
        return _show(resource, as_json, output.summary)

    return run


def _by_id(method: str, human):
    def run(portal, args, command, as_json):
        return _show(getattr(portal, method)(args.id), as_json, human)

    return run


def _spec(args, command: str) -> dict:
    return {
        "task_type": args.task,
        "min_gpu": args.gpu,
        "prefer_spot": args.spot,
        "allow_on_demand_fallback": args.fallback,
        "name": args.name,
        "team": args.team,
        "num_gpus": args.gpus,
        "pool": args.pool,
        "gpu_model": args.gpu_model,
        "gpu_memory_mib": args.gpu_memory,
        "max_duration_s": args.max_duration,
        "checkpoint_interval_s": args.checkpoint_interval,
        "pinned": args.pinned,
        "priority": args.priority,
        "command": command,
        "environment": dict(args.env) if args.env else None,
    }


def _variable(text: str) -> tuple[str, str]:
    """--env NAME=VALUE; the portal checks the name and the value."""
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: write NAME=VALUE")
    return name, value


def _parser() -> argparse.ArgumentParser:
    # Connection and output options work before or after the command (SUPPRESS: the later one wins).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url", default=argparse.SUPPRESS, help="portal address (env GPU_PORTAL_URL, else the saved login)"
    )
    common.add_argument(
        "--token",
        default=argparse.SUPPRESS,
        help="personal API token (env GPU_PORTAL_TOKEN, else the saved login)",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts"
    )
    common.add_argument(
        "--http-timeout", type=float, default=argparse.SUPPRESS, metavar="S", help="per HTTP call (10 s)"
    )
    common.add_argument(
        "--retries",
        type=int,
        default=argparse.SUPPRESS,
        metavar="N",
        help="after 429/5xx/connection errors (3)",
    )
    parser = argparse.ArgumentParser(
        prog="gpu-portal",
        parents=[common],
        description="Rent fractions of GPUs from the GPU Portal.",
        epilog="exit codes: 0 ok, 1 other failure, 2 usage, 3 auth, 4 not found, 5 invalid, "
        "6 busy/timeout, 7 server or connection, 8 rate limited, 9 not offered by this portal",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name, run, help):
        sub = commands.add_parser(name, parents=[common], help=help, description=help)
        sub.set_defaults(run=run)
        return sub

    request = add("request", _request, "submit a request: gpu-portal request --gpu 0.25 -- python train.py")
    _add_spec(request)
    request.add_argument("--wait", action="store_true", help="wait until it is scheduled or running")
    request.add_argument(
        "--wait-timeout", type=float, metavar="S", help="with --wait: give up (and cancel) after S seconds"
    )
    _add_spec(add("estimate", _estimate, "where a request would run now, or when it would start"))

    listing = add("list", _list, "your teams' requests, newest first")
    listing.add_argument("--state", choices=STATES)
    listing.add_argument("--team", help="team slug")
    listing.add_argument("--search", help="part of the name")

    add("show", _by_id("get", output.detail), "one request with its slices and timeline").add_argument(
        "id", type=int
    )
    add("cancel", _end("cancel"), "withdraw a request").add_argument("id", type=int)
    add("release", _end("release"), "done with the GPU: free it").add_argument("id", type=int)
    add("health", _by_id("check_health", output.health), "is it placed, are its nodes alive").add_argument(
        "id", type=int
    )
    add(
        "utilization", _by_id("get_utilization", output.utilization), "GPU util, memory, power of its cards"
    ).add_argument("id", type=int)
    logs = add("logs", _logs, "the job's output; -f: follow it until the request ends (Ctrl-C stops)")
    logs.add_argument("id", type=int)
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new output until it ends")
    logs.add_argument(
        "--poll", type=float, default=2.0, metavar="S", help="with -f: seconds between reads (2)"
    )
    shell = add(
        "shell",
        _shell,
        "a terminal in a running interactive request; -- COMMAND runs it there and exits with its status",
    )
    shell.add_argument("id", type=int)
    forward = add("port-forward", _port_forward, "reach a server in the allocation: PORT or LOCAL:REMOTE")
    forward.add_argument("id", type=int)
    forward.add_argument("ports", metavar="[LOCAL:]REMOTE")
    forward.add_argument("--address", default="127.0.0.1", help="the local address to listen on (127.0.0.1)")
    watch = add("watch", _watch, "state changes and utilization of a request until it ends (Ctrl-C stops)")
    watch.add_argument("id", type=int)
    watch.add_argument("--poll", type=float, default=5.0, metavar="S", help="seconds between reads (5)")
    add("prices", _prices, "price per GPU hour of each priced pool (USD)")
    quote = add(
        "quote", _quote, "on-demand against spot for a shape: per hour, over a duration, with reclaims"
    )
    quote.add_argument("--gpu-model", required=True, metavar="MODEL")
    quote.add_argument(
        "--gpu", type=float, default=1.0, metavar="SHARE", help="share of a card (1), or cards if >1"
    )
    quote.add_argument("--gpus", type=int, default=1, metavar="N", help="cards (1)")
    quote.add_argument("--max-duration", type=int, metavar="S", help="price the whole run of S seconds")
    quote.add_argument(
        "--checkpoint-interval", type=int, metavar="S", help="spot: seconds between checkpoints"
    )
    quote.add_argument("--restart-overhead", type=int, metavar="S", help="spot: seconds a restart costs")
    switch = add("billing", _billing, "bill a running request as on-demand or spot from now")
    switch.add_argument("id", type=int)
    switch.add_argument("mode", choices=["on-demand", "spot"])
    switch.add_argument(
        "--checkpoint-interval", type=int, metavar="S", help="spot: seconds between checkpoints"
    )
    reclaim = add("reclaim", _reclaim, "operators: reclaim a spot node; its jobs checkpoint and move")
    reclaim.add_argument("node", help="node name")
    reclaim.add_argument("--grace", type=int, metavar="S", help="seconds until the deadline (portal default)")
    reclaim.add_argument("--notice-id", default="", help="the notice's id: the same id twice is a no-op")
    statement = add("statement", _statement, "a team's monthly statement (USD)")
    statement.add_argument("team", help="team slug")
    statement.add_argument("--month", help="YYYY-MM (default: this month)")
    statement.add_argument("--user", help="one member's statement")
    login = add(
        "login",
        None,
        "check a token and save it with the portal's address, so scripts and commands need neither "
        f"(file: ${config.CONFIG_ENV}, else ~/.config/gpu-portal/config.toml, mode 0600)",
    )
    login.add_argument(
        "--token-stdin", action="store_true", help="read the token from standard input (no prompt)"
    )
    add("logout", None, "forget the saved login (removes the config file)")
    add(
        "checkpointed",
        None,
        "in a job: mark the checkpoint just written as complete (touches .checkpointed in "
        f"${CHECKPOINT_DIR_ENV})",
    ).add_argument("dir", nargs="?", help=f"the checkpoint directory (default: ${CHECKPOINT_DIR_ENV})")
    return parser


def _add_spec(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--gpu", type=float, default=0.5, metavar="SHARE", help="share of a card (0.5), or cards if >1"
    )
    sub.add_argument("--gpus", type=int, default=1, metavar="N", help="whole cards (with --gpu 1)")
    sub.add_argument("--task", choices=["training", "inference"], default="training")
    billing = sub.add_mutually_exclusive_group()
    billing.add_argument(
        "--spot", dest="spot", action="store_true", default=True, help="spot pricing (default)"
    )
    billing.add_argument("--on-demand", dest="spot", action="store_false", help="on-demand pricing")
    sub.add_argument(
        "--no-fallback",
        dest="fallback",
        action="store_false",
        help="with --spot: never fall back to on-demand",
    )
    sub.add_argument("--name")
    sub.add_argument("--team", help="team slug (needed when you are in several)")
    sub.add_argument("--pool")
    sub.add_argument("--gpu-model", metavar="MODEL")
    sub.add_argument("--gpu-memory", type=int, metavar="MIB")
    sub.add_argument("--max-duration", type=int, metavar="S")
    sub.add_argument("--checkpoint-interval", type=int, metavar="S", help="(spot default 900)")
    sub.add_argument(
        "--pinned", action="store_true", help="never move it at a checkpoint to make room for other work"
    )
    sub.add_argument("--priority", type=int, default=0)
    sub.add_argument(
        "--env",
        type=_variable,
        action="append",
        metavar="NAME=VALUE",
        help="a variable for the job (repeatable); it wins over a team secret of the same name",
    )
