"""Fixtures of the price catalog: a spot pool beside the shared on-demand `pool`, and small public
price files written in tmp_path in the real file's format."""

import pytest

from scheduler_app.choices import CapacityType
from scheduler_app.services.inventory import create_pool

HEADER = (
    "cloud,region,zone,instance_type,gpu_model,gpu_count,vcpus,memory_gib,"
    "ondemand_usd_per_hour,spot_usd_per_hour,ondemand_usd_per_gpu_hour,spot_usd_per_gpu_hour"
)


@pytest.fixture
def spot_pool(db):
    return create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)


@pytest.fixture
def price_file(tmp_path):
    """price_file(rows) -> path of a CSV; each row is (gpu_model, on-demand per GPU-h, spot per GPU-h),
    "" for a price the cloud does not publish."""

    def write(rows, name="prices.csv", header=HEADER):
        lines = [header]
        for index, (model, on_demand, spot) in enumerate(rows):
            lines.append(
                f'aws,"Region {index}, US",z{index},p4de.24xlarge,{model},1,96,1152,,,{on_demand},{spot}'
            )
        path = tmp_path / name
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    return write
