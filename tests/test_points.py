"""The points table (sweep.csv): its writer and its one reader, which gives real types back."""

from __future__ import annotations

import pytest

from commsweep.base.errors import InputError
from commsweep.orchestration import sweep
from commsweep.setup import points as pts
from commsweep.setup.config_schema import validate_config


def expanded(**axes):
    cfg = {"sweep": {"model": ["gpt-7b"], "tp": [1, 2], "aiob": [False, True], "schedule": ["aicb", "megatron"],
                     **axes}}
    validate_config(cfg)
    return sweep.expand(cfg)


def test_the_table_reads_back_with_the_points_own_types(tmp_path):
    made, invalid = expanded(tp_overlap=[0.0, 0.5])
    path = tmp_path / "sweep.csv"
    path.write_text(sweep.table_csv(made, invalid))
    rows = pts.read_points(path)
    assert [r.point for r in rows] == [p.point_key for p in made]
    for row, point in zip(rows, made):
        assert (row.tp, row.sp, row.aiob, row.recompute, row.tp_overlap) == (
            point.tp, point.sp, point.aiob, point.recompute, point.tp_overlap)
        assert isinstance(row.world_size, int) and isinstance(row.nic_gbps, float)
        assert row.variant == pts.variant_of(point.schedule, point.aiob)
        assert row.memory_gib is not None and row.fits is True
        # the cells are the table's text, which the tables that repeat a point's columns copy
        assert row.cells["aiob"] == str(point.aiob) and row.cells["nvlink_gbps"] == "360"
        # a batch's rows (Point.row) read back as the table's do
        assert pts.PointRow.of(point).setting == row.setting


def test_the_four_variants_and_the_setting_they_share():
    made, _ = expanded()
    rows = [pts.PointRow.of(p) for p in made]
    assert sorted({r.variant for r in rows}) == sorted(pts.VARIANTS)
    by_setting: dict[tuple, set[str]] = {}
    for r in rows:
        by_setting.setdefault(r.setting, set()).add(r.variant)
    assert len(by_setting) == 2 and all(v == set(pts.VARIANTS) for v in by_setting.values())


def test_a_bad_cell_names_the_file_line_and_field(tmp_path):
    made, _ = expanded()
    text = sweep.table_csv(made)
    path = tmp_path / "sweep.csv"
    header, first, *rest = text.splitlines(keepends=True)
    assert ",False,True,aicb," in rest[1]  # sp off, aiob on
    path.write_text(header + first + rest[0] + rest[1].replace(",False,True,aicb,", ",False,yes,aicb,") + "".join(rest[2:]))
    with pytest.raises(InputError, match=r"sweep\.csv:4: field aiob: expected True or False, got 'yes'"):
        pts.read_points(path)
    path.write_text("model,tp\ngpt-7b,1\n")
    with pytest.raises(InputError, match=r"sweep\.csv:1: not a points table"):
        pts.read_points(path)
