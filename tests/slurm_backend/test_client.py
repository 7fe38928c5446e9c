"""slurmrestd away, or answering errors: a clear message on the connection, nothing raised, nothing
changed. And the gres strings as Slurm writes them."""

from scheduler_app.services.inventory import create_pool
from slurm_backend.gres import card_indexes, job_gres, parse_node_gres
from slurm_backend.models import SlurmConnection
from slurm_backend.sync import sync_pool


def test_a_sync_with_slurmrestd_away_records_why_and_raises_nothing(db, tmp_path):
    pool = create_pool(name="away", gpu_model="fake", capacity_type="on-demand", backend="slurm")
    connection = SlurmConnection.objects.create(
        pool=pool, url=f"unix:{tmp_path}/no.sock", partition="gpu", output_dir=str(tmp_path)
    )

    problem = sync_pool(connection)

    connection.refresh_from_db()
    assert "cannot be reached" in problem and str(tmp_path) in problem
    assert connection.last_error == problem
    assert connection.sync_claimed_until is None
    assert not pool.nodes.exists()


def test_node_gres_gives_cards_and_shards_per_card():
    gres = parse_node_gres("gpu:fake:4(S:0-1),shard:fake:32")
    assert (gres.cards, gres.card_type, gres.shards_per_card, gres.granularity_milli()) == (4, "fake", 8, 125)
    assert parse_node_gres("gpu:2").granularity_milli() == 1000


def test_a_request_asks_for_shards_or_whole_cards():
    assert job_gres(250, 1, 125) == "shard:2"
    assert job_gres(300, 1, 125) == "shard:3"  # at least the share placed
    assert job_gres(1000, 2, 125) == "gpu:2"


def test_card_indexes_read_from_the_gres_detail():
    assert card_indexes(["shard:2(IDX:0)"]) == [0]
    assert card_indexes(["gpu:fake:3(IDX:0-1,3)"]) == [0, 1, 3]
    assert card_indexes([]) == []
