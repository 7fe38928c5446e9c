"""bench.terminal_echo: a keystroke's latency is the time until its echo comes back, and the whole bench
(portal, agent, terminals) runs at a tiny size."""

import asyncio
import itertools
import math
import random
import statistics

import pytest

from bench import terminal_echo

DELAY_S = 0.05


class EchoAfter:
    """A terminal's websocket that echoes each byte after DELAY_S, behind a frame that does not hold it."""

    def __init__(self):
        self.frames: asyncio.Queue = asyncio.Queue()

    async def send(self, data: bytes) -> None:
        async def later():
            self.frames.put_nowait(b"\x1b[?2004l")
            await asyncio.sleep(DELAY_S)
            self.frames.put_nowait(b"\r" + data)

        asyncio.get_running_loop().create_task(later())

    async def recv(self) -> bytes:
        return await self.frames.get()


def test_a_keystroke_counts_until_its_echo_arrives_not_its_pause_before():
    pauses = iter([0.2, 0.0, 0.1])
    latencies = asyncio.run(terminal_echo._type(EchoAfter(), keys=3, pauses=pauses))

    assert len(latencies) == 3
    assert all(DELAY_S <= latency < DELAY_S + 0.1 for latency in latencies), latencies


def test_independent_typists_pause_a_random_phase_then_exponentially_and_lockstep_ones_do_not():
    draw = random.Random(3)
    pauses = [list(itertools.islice(terminal_echo._poisson(draw, 0.1), 2001)) for _ in range(2)]
    lockstep = list(itertools.islice(terminal_echo._lockstep(0.1), 4))

    assert all(0 <= typist[0] < 0.1 for typist in pauses) and pauses[0][0] != pauses[1][0]
    assert all(abs(statistics.mean(typist[1:]) - 0.1) < 0.01 for typist in pauses)
    assert statistics.quantiles(pauses[0][1:], n=2)[0] == pytest.approx(0.1 * math.log(2), rel=0.1)
    assert lockstep == [0.0, 0.1, 0.1, 0.1]


def test_the_bench_runs_terminals_on_a_real_portal_and_agent(tmp_path, capsys):
    result = terminal_echo.main(["--terminals", "2", "--keys", "3", "--interval-ms", "10",
                                 "--scratch", str(tmp_path / "bench")])  # fmt: skip

    assert result["terminals"] == 2 and result["keystrokes"] == 6
    assert 0 < result["median_ms"] <= result["p95_ms"] < 5000
    assert "2 terminals x 3 keystrokes" in capsys.readouterr().out
