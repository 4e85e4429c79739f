"""bench/simulate.py names the SimAI build it times, from the build's own CMake files.

SimAI's speed depends on its build (its build script sets no build type: -O0), so a speed
figure without the build means little. The bench reads the build from the CMake build
directory above the binary, and refuses a binary it cannot place unless the user labels it.
The CMake directories here are made by real CMake runs on a one-line program whose target has
SimAI's binary name and layout (``bin/SimAI_analytical`` linking into the build tree).
"""

from __future__ import annotations

import csv
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, reference_path

spec = importlib.util.spec_from_file_location("bench_simulate", REPO / "bench" / "simulate.py")
bench = sys.modules["bench_simulate"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
spec.loader.exec_module(bench)

needs_cmake = pytest.mark.skipif(not (shutil.which("cmake") and (shutil.which("c++") or shutil.which("g++"))),
                                 reason="needs cmake and a C++ compiler")


def test_the_optimisation_level_is_the_last_on_the_command_line():
    assert bench.optimisation("") == "-O0"
    assert bench.optimisation("-std=gnu++11") == "-O0"
    assert bench.optimisation("-O2 -DNDEBUG -std=gnu++11") == "-O2"
    assert bench.optimisation("-O3 -DNDEBUG -O2") == "-O2"
    assert bench.optimisation("-O -g") == "-O1"
    assert bench.optimisation("-Os -DNDEBUG") == "-Os"
    assert bench.optimisation("-DOPT=-O3") == "-O0"


def cmake_build(tmp_path: Path, *flags: str, compile: bool = False) -> Path:
    """A SimAI-like checkout: the CMake build in a subfolder, bin/SimAI_analytical linking to it."""
    src = tmp_path / "src"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.15)\nproject(Sim CXX)\n"
                                        "add_executable(SimAI_analytical main.cc)\n")
    (src / "main.cc").write_text("int main() { return 0; }\n")
    build = src / "build"
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), *flags], check=True, capture_output=True)
    if compile:
        subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "SimAI_analytical").symlink_to(build / "SimAI_analytical")
    return tmp_path


@needs_cmake
@pytest.mark.parametrize("flags, label", [
    ((), "-O0 (no build type)"),  # what SimAI's build script does
    (("-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG"), "-O2 (Release)"),
    (("-DCMAKE_BUILD_TYPE=Release",), "-O3 (Release)"),
    (("-DCMAKE_BUILD_TYPE=RelWithDebInfo",), "-O2 (RelWithDebInfo)"),
    (("-DCMAKE_CXX_FLAGS=-O1",), "-O1 (no build type)"),
])
def test_the_build_is_read_from_cmake(tmp_path, flags, label):
    root = cmake_build(tmp_path, *flags)
    found = bench.detect_build(root / "bin" / "SimAI_analytical")
    assert found is not None and found[0] == label
    assert "CMakeCache.txt" in found[1] and "flags.make" in found[1]


@needs_cmake
def test_a_built_simai_is_labelled_and_an_unplaceable_copy_refused(tmp_path, capsys):
    root = cmake_build(tmp_path / "built", compile=True)
    build = bench.make_build(root, None)
    assert build.label == "-O0 (no build type)" and build.binary == root / "bin" / "SimAI_analytical"
    # the same binary copied out of its build tree: nothing says how it was built
    copy = tmp_path / "copy"
    (copy / "bin").mkdir(parents=True)
    shutil.copy2(root / "bin" / "SimAI_analytical", copy / "bin" / "SimAI_analytical")
    with pytest.raises(SystemExit) as exit_:
        bench.make_build(copy, None)
    assert exit_.value.code == 2
    assert "--simai-build" in capsys.readouterr().err
    assert bench.make_build(copy, "-O2").label == "-O2"
    # a label beside a CMake build keeps what CMake says, for the reader to see
    assert "CMake says -O0 (no build type)" in bench.make_build(root, "-O3").detail
    with pytest.raises(SystemExit) as exit_:
        bench.make_build(tmp_path / "nowhere", None)
    assert exit_.value.code == 2
    assert "not found or not executable" in capsys.readouterr().err


@needs_cmake
def test_a_simai_that_writes_other_bytes_is_reported_and_fails_the_bench(tmp_path, capsys):
    reference_path("simai", "endtoend", "INDEX.csv")
    root = cmake_build(tmp_path, compile=True)  # a program that exits 0 and writes nothing
    assert bench.main(["--simai-root", str(root), "--simai-build", "-O2", "--only", "microAllReduce",
                       "--repeat", "1"]) == 1
    out = capsys.readouterr().out
    assert "SimAI -O2: " in out and "given with --simai-build; CMake says -O0 (no build type)" in out
    assert "OUTPUT DIFFERS: SimAI -O2 differs from the engine" in out
    assert "byte-identical" not in out


def test_the_bench_checks_the_bytes_and_reports_against_the_recorded_simai(tmp_path, capsys):
    reference_path("simai", "endtoend", "INDEX.csv")
    table = tmp_path / "times.csv"
    assert bench.main(["--only", "microAllReduce", "--only", "tp2_pp1_seq2048_mbs1_ga1_sp0_aiob netA",
                       "--repeat", "1", "--csv", str(table)]) == 0
    out = capsys.readouterr().out
    assert "every output compared is byte-identical" in out
    assert "no SimAI build given" in out
    rows = {r["workload"]: r for r in csv.DictReader(table.open())}
    assert set(rows) == {"microAllReduce netA", "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp0_aiob netA"}
    aiob = rows["gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp0_aiob netA"]
    assert aiob["identical"] == "yes" and aiob["rows"] == "79"
    assert float(aiob["simai_o0_recorded_min_ms"]) == 1140.0  # INDEX.csv's wall_s
    assert 0 < float(aiob["engine_in_process_min_ms"]) < float(aiob["commsweep_simulate_min_ms"])
    assert rows["microAllReduce netA"]["simai_o0_recorded_min_ms"] == ""  # recorded as 0.00 s: no yardstick
