"""MIG instances as Slurm's typed gres: the profile read from the type, a node's instances grouped
into cards first fit in the order Slurm lists them (which is also its gres index order), the job's
typed gres, and mixes that cannot be imported."""

import pytest

from scheduler_app.core.mig import LayoutError, parse_layout
from slurm_backend.gres import card_indexes, mig_job_gres, mig_layouts, mig_profile, pack_mig, parse_node_gres

A100_80GB = 81920


def test_the_profile_is_the_types_suffix():
    assert mig_profile("a100_1g.10gb") == "1g.10gb"
    assert mig_profile("3g.40gb") == "3g.40gb"
    assert mig_profile("h100_7g.80gb") == "7g.80gb"
    assert mig_profile("fake") == mig_profile("a100") == mig_profile("") == ""


def test_a_mig_node_lists_its_instances_by_gres_index():
    gres = parse_node_gres("gpu:a100_3g.40gb:2(S:0),gpu:a100_1g.10gb:3(S:0)")

    assert gres.mig and gres.mixed() == ""
    assert gres.gpu_types == ("a100_3g.40gb",) * 2 + ("a100_1g.10gb",) * 3
    assert not parse_node_gres("gpu:fake:4,shard:fake:32").mig


def test_instances_pack_first_fit_into_cards_in_slurms_order():
    # 2 x 3g then 7 x 1g: gres indexes 0-1 and 2-8.
    slots = pack_mig(["a100_3g.40gb"] * 2 + ["a100_1g.10gb"] * 7, A100_80GB)

    assert [(s.card, s.instance) for s in slots[:3]] == [(0, "3g.40gb@0"), (0, "3g.40gb@4"), (1, "1g.10gb@0")]
    assert slots[8].card == 1 and slots[8].instance == "1g.10gb@6"
    assert mig_layouts(slots) == ["3g.40gb@0,3g.40gb@4", ",".join(f"1g.10gb@{i}" for i in range(7))]


def test_a_later_instance_fills_an_earlier_cards_free_slices():
    slots = pack_mig(["4g.40gb", "1g.10gb", "2g.20gb", "1g.10gb", "3g.40gb", "1g.10gb"], A100_80GB)

    # 4g@0 leaves slices 4-7 and takes 1g@4; 2g may start only at 0, 2 or 4, so it opens card 1;
    # the next 1g goes back to card 0 (5), 3g to card 1's other half (4), the last 1g to card 0 (6).
    assert [(s.card, s.instance) for s in slots] == [
        (0, "4g.40gb@0"),
        (0, "1g.10gb@4"),
        (1, "2g.20gb@0"),
        (0, "1g.10gb@5"),
        (1, "3g.40gb@4"),
        (0, "1g.10gb@6"),
    ]
    for layout in mig_layouts(slots):
        parse_layout(layout, A100_80GB)  # each card's layout is one the geometry allows


def test_gres_indexes_of_a_job_map_to_the_packed_instances():
    slots = pack_mig(["a100_3g.40gb"] * 2 + ["a100_1g.10gb"] * 7, A100_80GB)

    # As Slurm 22.05 printed them for the test cluster's node: gpu:a100_1g.10gb:1(IDX:3).
    indexes = card_indexes(["gpu:a100_1g.10gb:1(IDX:3)"])

    assert [(slots[i].card, slots[i].instance, slots[i].gres_type) for i in indexes] == [
        (1, "1g.10gb@1", "a100_1g.10gb")
    ]
    assert mig_job_gres("a100_1g.10gb", 1) == "gpu:a100_1g.10gb:1"


def test_types_of_another_geometry_or_no_profile_are_refused():
    with pytest.raises(LayoutError, match=r"a100_1g\.5gb"):
        pack_mig(["a100_1g.5gb"], A100_80GB)  # a 40 GB card's profile
    with pytest.raises(LayoutError, match="no MIG geometry"):
        pack_mig(["a100_1g.10gb"], 16384)
    assert [s.instance for s in pack_mig(["1g.5gb"], 40960)] == ["1g.5gb@0"]


def test_instances_beside_whole_cards_or_shards_are_a_mix():
    assert "whole cards (fake)" in parse_node_gres("gpu:a100_1g.10gb:1,gpu:fake:1").mixed()
    assert "shards" in parse_node_gres("gpu:a100_1g.10gb:7,shard:8").mixed()
    assert parse_node_gres("gpu:fake:4,shard:32").mixed() == ""
