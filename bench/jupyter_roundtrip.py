"""A Jupyter cell's round trip through the portal's JupyterLab proxy, against the same cell sent straight
to the agent-side Jupyter server.

The embedded portal and a real agent (unisolated) as bench.terminal_echo sets them up; one running
interactive request; a kernel started through the proxy (`POST /requests/<id>/lab/api/kernels`). Two
websockets to that kernel's channels: one through the portal (proxy, channel layer, agent's tunnel),
one straight to Jupyter's Unix socket with its token (read from the server's environment: the bench
runs as root or as the agent's user). Cells (`1+1`) alternate between the two, one at a time; a round
trip is from the send of execute_request to the kernel's `idle` status for it. Prints p50 and p95 of
each and the difference.

    python -m bench.jupyter_roundtrip [--cells 200]
"""

import argparse
import asyncio
import json
import statistics
import time
import uuid
from pathlib import Path

import psutil
import requests
from websockets.asyncio.client import connect, unix_connect

from bench.terminal_echo import _interactive_request, portal_and_agent

SCRATCH = Path("/var/tmp/gpu-portal-bench-lab")  # short: Jupyter's socket path must fit 107 characters


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=200, help="Cells each way (default 200).")
    args = parser.parse_args(argv)
    with portal_and_agent(SCRATCH) as (url, setup):
        request = _interactive_request(url, setup["token"])
        headers = {"Authorization": f"Bearer {setup['token']}"}
        lab = f"{url}/requests/{request}/lab/"
        answer = requests.post(f"{lab}api/kernels", json={"name": "python3"}, headers=headers, timeout=180)
        if answer.status_code != 201:
            raise RuntimeError(f"no kernel: {answer.status_code} {answer.text}")
        kernel = answer.json()["id"]
        times = asyncio.run(_measure(lab, headers, kernel, args.cells))
    result = _report(times)
    print(json.dumps(result))
    return result


def _jupyter() -> tuple[str, str]:
    """The agent's Jupyter server: its socket and token."""
    for process in psutil.process_iter(["cmdline"]):
        arguments = process.info["cmdline"] or []
        if "jupyterlab" in arguments:
            socket = next(a.split("=", 1)[1] for a in arguments if a.startswith("--sock="))
            return socket, process.environ()["JUPYTER_TOKEN"]
    raise RuntimeError("no Jupyter server found")


async def _measure(lab: str, headers: dict, kernel: str, cells: int) -> dict[str, list[float]]:
    path = f"{lab.split('://', 1)[1].split('/', 1)[1]}api/kernels/{kernel}/channels"
    socket, token = _jupyter()
    proxied = await connect(f"{lab.replace('http://', 'ws://')}api/kernels/{kernel}/channels",
                            additional_headers=headers, origin=lab.split("/requests")[0])  # fmt: skip
    direct = await unix_connect(socket, uri=f"ws://localhost/{path}",
                                additional_headers={"Authorization": f"token {token}"})  # fmt: skip
    times = {"direct": [], "proxied": []}
    try:
        for _ in range(cells):
            for name, ws in (("direct", direct), ("proxied", proxied)):
                times[name].append(await _cell(ws))
    finally:
        await proxied.close()
        await direct.close()
    return times


async def _cell(ws) -> float:
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "bench",
              "session": uuid.uuid4().hex, "version": "5.3", "date": "2025-01-01T00:00:00Z"}  # fmt: skip
    content = {"code": "1+1", "silent": False, "store_history": False, "user_expressions": {},
               "allow_stdin": False, "stop_on_error": True}  # fmt: skip
    message = {"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"}
    started = time.perf_counter()
    await ws.send(json.dumps(message))
    while True:
        reply = json.loads(await asyncio.wait_for(ws.recv(), 60))
        mine = reply["parent_header"].get("msg_id") == msg_id and reply["msg_type"] == "status"
        if mine and reply["content"]["execution_state"] == "idle":
            return time.perf_counter() - started


def _report(times: dict[str, list[float]]) -> dict:
    result = {}
    for name, values in times.items():
        result[f"{name}_p50_ms"] = statistics.median(values) * 1000
        result[f"{name}_p95_ms"] = statistics.quantiles(values, n=20)[-1] * 1000
    result["p95_added_ms"] = result["proxied_p95_ms"] - result["direct_p95_ms"]
    result["cells"] = len(times["direct"])
    figures = {name: f"p50 {result[f'{name}_p50_ms']:.1f} ms, p95 {result[f'{name}_p95_ms']:.1f} ms"
               for name in times}  # fmt: skip
    print(f"{result['cells']} cells each way: direct {figures['direct']}; through the portal "
          f"{figures['proxied']}; p95 added {result['p95_added_ms']:.1f} ms (target <= 100)")  # fmt: skip
    return result


if __name__ == "__main__":
    main()
