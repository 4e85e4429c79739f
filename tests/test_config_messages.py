"""What a sweep config's mistakes are told: the file, the line where it knows it, and the key.

Each through ``configfile.load``, the one reader of the Snakefile (``pipeline.load_config``)
and of ``commsweep sweep``.
"""

from __future__ import annotations

import pytest

from commsweep.base.errors import ConfigError
from commsweep.orchestration import cli, sweep
from commsweep.setup import configfile

NET = "{gpus_per_server: 8, nics_per_server: 8, nvlink_gbps: 360, nic_gbps: 48.5}"


def write(tmp_path, text: str, name: str = "my.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, line, key", [
    ("sweep:\n  tp: [1]\n  pp: [1]\n  tp: [2]\n", 4, "sweep.tp"),
    ("sweep:\n  tp: [1]\nskip_invalid: true\nsweep:\n  tp: [2]\n", 4, "sweep"),
    (f"networks:\n  netA: {{gpus_per_server: 8, nics_per_server: 8, nvlink_gbps: 360, nic_gbps: 48.5, nic_gbps: 1}}\n",
     2, "networks.netA.nic_gbps"),
    ("models:\n  m:\n    base: gpt-7b\n    num_layers: 4\n    'num_layers': 8\nsweep: {model: [m]}\n", 5, "models.m.num_layers"),
])
def test_a_key_written_twice_is_refused_at_its_line(tmp_path, text, line, key):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        configfile.load([path])
    assert str(info.value).startswith(f"{path}:{line}: {key}: given twice (first at line ")


def test_the_same_key_in_two_mappings_is_no_repeat(tmp_path):
    path = write(tmp_path, f"networks:\n  netA: {NET}\n  netB: {NET}\nsweep: {{network: [netA, netB]}}\n")
    assert list(configfile.load([path])["networks"]) == ["netA", "netB"]


def test_a_single_value_is_a_one_value_axis(tmp_path):
    path = write(tmp_path, "sweep:\n  tp: 4\n  sp: true\n  schedule: aicb\n  model: gpt-7b\n  network: netA\n"
                           "  tp_overlap: 0.5\n  simulation: analytical\n")
    config = configfile.load([path])
    assert {k: config["sweep"][k] for k in ("tp", "sp", "schedule", "model", "network", "tp_overlap", "simulation")} == \
        {"tp": [4], "sp": [True], "schedule": ["aicb"], "model": ["gpt-7b"], "network": ["netA"], "tp_overlap": [0.5],
         "simulation": ["analytical"]}
    points, _ = sweep.points_from_config(sweep.load_config(path))
    assert [(p.tp, p.sp, p.schedule) for p in points] == [(4, True, "aicb")]
    # A --config override is read the same way; a wrong value is still named.
    assert configfile.load([path], ["sweep={tp: 2}"])["sweep"]["tp"] == [2]
    for text, said in (("sweep:\n  tp: x\n", "sweep.tp: 'x' is not of type 'array', 'integer'"),
                       ("sweep:\n  tp: 0\n", "sweep.tp: 0 is less than the minimum of 1"),
                       ("sweep:\n  schedule: aicbx\n", "sweep.schedule: 'aicbx' is not one of ['aicb', 'megatron']")):
        with pytest.raises(ConfigError, match="^" + str(write(tmp_path, text)) + ": " + said.replace("[", r"\[")):
            configfile.load([tmp_path / "my.yaml"])


def test_networks_of_its_own_without_the_axis_are_told_the_default(tmp_path):
    path = write(tmp_path, f"networks:\n  myNet: {NET}\n  other: {NET}\n")
    with pytest.raises(ConfigError) as info:
        configfile.load([path])
    assert str(info.value) == (f"{path}: sweep.network: not set, so it defaults to [netA]; this config's networks "
                               "replace the default netA and are: myNet, other; set sweep.network (e.g. [myNet])")
    path = write(tmp_path, f"networks:\n  myNet: {NET}\nsweep: {{network: [netB]}}\n")
    with pytest.raises(ConfigError, match=f"^{path}: sweep.network: unknown network 'netB'; the config defines: myNet$"):
        configfile.load([path])


@pytest.mark.parametrize("text, said", [
    ("sweep: {model: [nosuch]}\n", "sweep.model: unknown model 'nosuch'; known: "),
    ("models:\n  m: {base: gpt-7b, layers: 4}\nsweep: {model: [m]}\n", "models.m.layers: unknown key"),
    ("models:\n  m: {base: nosuch}\nsweep: {model: [m]}\n", "models.m.base: unknown base model 'nosuch'"),
    (f"networks:\n  netA: {{gpus_per_server: 8, nics_per_server: 8, nvlink_gbps: 1.0e-50, nic_gbps: 48.5}}\n",
     "networks.netA.nvlink_gbps: must be a positive number, got 1e-50"),
])
def test_model_and_network_errors_name_the_file(tmp_path, text, said, capsys):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        configfile.load([path])
    assert str(info.value).startswith(f"{path}: {said}")
    assert cli.main(["sweep", "--check", str(path)]) == 2
    assert f"commsweep sweep: error: {path}: {said}" in capsys.readouterr().err


def test_an_empty_config_file_is_refused(tmp_path):
    for text in ("", "# only a comment\n"):
        path = write(tmp_path, text)
        with pytest.raises(ConfigError, match=f"^{path}:1: the file is empty"):
            configfile.load([path])
    assert configfile.load([write(tmp_path, "{}\n")])["sweep"]["tp"] == [1]  # every default, asked for


def test_snakemake_reads_the_config_as_commsweep_sweep_does(tmp_path):
    """The Snakefile's reading (``snakemake --configfile``): a single value is a one-value axis,
    and a key written twice is refused at its line, as ``commsweep sweep`` reads them."""
    import sweeps

    path = write(tmp_path, "sweep:\n  tp: 4\n  sp: [false, true]\n")
    assert sweeps.planned(sweeps.run(tmp_path / "w", "--configfile", str(path), "--dry-run"))["points"] == 2
    assert [p.tp for p in sweep.points_from_config(sweep.load_config(path))[0]] == [4, 4]
    path = write(tmp_path, "sweep:\n  tp: [4]\n  tp: [2]\n")
    result = sweeps.run(tmp_path / "w", "--configfile", str(path), "--dry-run", check=False)
    assert result.returncode != 0
    assert f"{path}:3: sweep.tp: given twice (first at line 2)" in result.stdout + result.stderr


@pytest.mark.parametrize("text, said", [
    ("results: /tmp/r2\n", "results: '/tmp/r2' is not a folder relative to the project folder"),
    ("results: ../r2\n", "results: '../r2' is not a folder relative to the project folder"),
    ("sweep:\n  model: [gpt 7b]\n", "sweep.model[0]: 'gpt 7b' is not a name of letters, digits"),
    (f"networks:\n  net A: {NET}\n", "networks: 'net A' is not a name of letters, digits"),
    ("megatron_core: [latest]\n", "megatron_core[0]: 'latest' is not a release such as 0.12.0"),
])
def test_a_value_of_the_wrong_shape_is_told_in_words_not_as_a_regular_expression(tmp_path, text, said):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        configfile.load([path])
    assert str(info.value).startswith(f"{path}: {said}")
    assert "^[" not in str(info.value)
    # RESULTS=DIR of `make run` is read as --config results=DIR, and told the same way.
    with pytest.raises(ConfigError, match="results: '/abs' is not a folder relative"):
        configfile.load([write(tmp_path, "{}\n", "ok.yaml")], ["results=/abs"])


def test_every_pattern_of_the_schema_has_its_words():
    from commsweep.setup import config_schema

    def patterns(node):
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                yield node["pattern"]
            for value in node.values():
                yield from patterns(value)
        elif isinstance(node, list):
            for value in node:
                yield from patterns(value)

    assert set(patterns(config_schema.schema())) <= set(config_schema.PATTERN_WORDS)


def test_a_bad_results_folder_on_the_command_line_is_told_as_the_option_it_came_from(tmp_path, capsys):
    """`commsweep sweep FILE --results DIR` (what `make run RESULTS=DIR` runs) names --results."""
    path = write(tmp_path, "{}\n")
    assert cli.main(["sweep", "--check", str(path), "--results", "/abs"]) == 2
    assert capsys.readouterr().err.startswith(
        f"commsweep sweep: error: {path}, --results: results: '/abs' is not a folder relative to the project folder")


@pytest.mark.parametrize("text, said", [
    ("sweep: {aiob: [true], tp: [2]}\naiob: {gpu: H1000}\n", "aiob.gpu: unknown GPU type 'H1000'"),
    ("sweep: {aiob: [true], tp: [2]}\naiob: {backend: file}\n", "aiob.file: the file backend needs the path"),
    ("sweep: {aiob: [true], tp: [2]}\naiob: {backend: file, file: moved.txt}\n",
     "aiob.file: 1 of 1 AIOB file(s) not found: moved.txt\n"),
])
def test_a_key_checked_after_reading_names_the_file_too(tmp_path, text, said, capsys):
    """Keys checked once the config is read (a GPU, an AIOB file) are named with their file, as
    the schema's errors are, and a path without {profile} is not told what {profile} means."""
    path = write(tmp_path, text)
    assert cli.main(["sweep", "--check", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"commsweep sweep: error: {path}: {said}")


def test_a_model_of_ones_own_missing_a_field_is_told_a_preset_gives_it(tmp_path):
    path = write(tmp_path, "models:\n  m: {num_layers: 4}\nsweep: {model: m}\n")
    with pytest.raises(ConfigError) as info:
        configfile.load([path])
    assert str(info.value) == (f"{path}: models.m.hidden_size: missing (a required key); or start from a preset "
                               "that has it, with `base:` (e.g. base: gpt-7b)")
