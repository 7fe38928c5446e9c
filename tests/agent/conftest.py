import pytest


@pytest.fixture(autouse=True)
def _agent_files(agent_files):
    """Every agent test keeps its checkpoints and simulated memory claims in its own folder."""
