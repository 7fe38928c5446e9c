"""Live updates over websockets: each state change published after commit (infra.live), the 1 Hz
ticker's changed readings (ticker.py, the cards' readings asked for through readings.py) and the streams
that carry both to the browsers (consumers.py)."""
