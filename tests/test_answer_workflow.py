"""The answer through Snakemake: difference_by_cause.csv, its figures, answer.md and the
report's front page, opened in a real browser (headless Chromium).

One small sweep for the module: the default sweep's TP 2 points on netA, with a
``tp_overlap`` axis of two ratios (16 points). Without Debian's ``chromium`` the browser
test skips with the reason; under CI (CI=true, where .ci/run installs it) it fails instead.
Its screenshot of the report stays in ``test-artifacts/report.png`` (``COMMSWEEP_TEST_ARTIFACTS``
names another folder).
"""

from __future__ import annotations

import csv
import html
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import sweeps
from commsweep.analysis import causes
from conftest import REPO
from test_answer import check_numbers

pytestmark = pytest.mark.slow

AIOB_TP2 = "gpt-7b_ws16_tp2_pp1_ep1_sp0_mb1_gb16_seq2048_aicb_aiob__netA_tpo0"
ARTIFACTS = Path(os.environ.get("COMMSWEEP_TEST_ARTIFACTS", REPO / "test-artifacts"))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("answer-run")
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["sweep"].update(tp=[2], network=["netA"], tp_overlap=[0, 0.5])
    path = workdir / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    sweeps.run(workdir, "--configfile", str(path))
    sweeps.run(workdir, "--configfile", str(path), "--report", "results/report.html")
    return workdir / "results"


def test_the_answer_comes_out_of_the_run(run):
    rows = causes.read_csv(run / "difference_by_cause.csv")
    [dropped] = [r for r in rows if r.point == AIOB_TP2 and r.cause == "missing_bwd_tp_allreduce"]
    assert (dropped.rows, dropped.bytes) == (130, -2_181_038_080)
    extra = [r for r in rows if r.point == AIOB_TP2
             and r.cause in ("extra_layernorm_grad_allreduce", "extra_embedding_grad_allreduce")]
    assert sum(r.bytes for r in extra) == 7_303_725_056
    text = (run / "answer.md").read_text()
    assert check_numbers(text, rows) > 20
    assert "drops 130 all-reduces per iteration: \u22122,181,038,080 bytes" in text
    assert "![" in text and "(plots/difference_by_cause.png)" in text
    for png in ("difference_by_cause.png", "exposed_tp_by_overlap.png", "exposed_by_group.png"):
        assert (run / "plots" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_overlap_axis_scales_exposed_tp_time_only(run):
    with open(run / "summary.csv", newline="") as fh:
        points = {r["point"]: r for r in csv.DictReader(fh)}
    at0, at_half = points[AIOB_TP2], points[AIOB_TP2.removesuffix("0") + "0.5"]
    assert (at0["tp_overlap"], at_half["tp_overlap"]) == ("0.0", "0.5")
    # Volume is volume: the same bytes; exposure is the knob: half the exposed TP time.
    assert at0["payload_bytes"] == at_half["payload_bytes"]
    assert abs(int(at_half["sim_tp_us"]) - int(at0["sim_tp_us"]) / 2) <= 1
    assert at0["sim_dp_us"] == at_half["sim_dp_us"]
    # Causes compare points of the same ratio.
    rows = causes.read_csv(run / "difference_by_cause.csv")
    half = [r for r in rows if r.point == AIOB_TP2.removesuffix("0") + "0.5" and r.cause == "missing_bwd_tp_allreduce"]
    full = [r for r in rows if r.point == AIOB_TP2 and r.cause == "missing_bwd_tp_allreduce"]
    assert half[0].bytes == full[0].bytes and abs(half[0].exposed_us - full[0].exposed_us / 2) < 1


# -- the report in a real browser -----------------------------------------------------------

# Added to a copy of the report: once the page has run its scripts, list every image (those
# on the front page and every image result of the report) with the size it decodes to, and
# the page's visible text.
PROBE = """<script>
window.addEventListener("load", () => setTimeout(async () => {
  const sources = [...document.querySelectorAll("img")].map(i => ["page", i.src]);
  for (const [path, r] of Object.entries(results)) {
    if (r.mime_type.startsWith("image/")) sources.push([path, r.data_uri]);
  }
  const images = await Promise.all(sources.map(([name, src]) => new Promise(done => {
    const img = new Image();
    img.onload = () => done([name, img.naturalWidth, img.naturalHeight]);
    img.onerror = () => done([name, 0, 0]);
    img.src = src;
  })));
  const heading = [...document.querySelectorAll("h1")].find(h => h.textContent.startsWith("The answer"));
  const top = heading ? heading.getBoundingClientRect().top : null;
  // The front page's figures where the browser draws them: top, width, and their own width.
  const front = [...document.querySelectorAll("img")].map(i => {
    const box = i.getBoundingClientRect();
    return [box.top, box.width, i.naturalWidth];
  });
  const out = document.createElement("pre");
  out.id = "commsweep-probe";
  out.textContent = JSON.stringify({text: document.body.innerText, images: images, top: top, front: front,
                                    height: window.innerHeight});
  document.body.appendChild(out);
}, 1000));
</script>
"""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        reason = "Debian's chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must run the browser test (.ci/run installs it)")
        pytest.skip(reason)
    return found


def headless(browser: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--hide-scrollbars"]
    return subprocess.run([browser, *flags, *args], capture_output=True, text=True, timeout=timeout)


def test_the_report_opens_on_the_answer_in_a_browser(run, tmp_path, record_property):
    browser = chromium()
    report = run / "report.html"
    page = report.read_text(encoding="utf-8")
    probed = tmp_path / "report.html"
    end = page.rindex("</body>")
    probed.write_text(page[:end] + PROBE + page[end:], encoding="utf-8")
    result = headless(browser, "--window-size=1400,1000", "--virtual-time-budget=30000", "--dump-dom",
                      probed.as_uri())
    start = result.stdout.find('<pre id="commsweep-probe">')
    assert start >= 0, f"the report did not finish loading in Chromium:\n{result.stderr[-2000:]}"
    found = json.loads(html.unescape(result.stdout[start:].split(">", 1)[1].split("</pre>", 1)[0]))
    text = found["text"]
    # The front page is the answer, with this run's numbers, its heading in view on opening.
    assert found["top"] is not None and 0 <= found["top"] < found["height"], (found["top"], found["height"])
    assert "ALLREDUCE is what Megatron issues." in text
    assert "drops 130 all-reduces per iteration: \u22122,181,038,080 bytes" in text
    assert "What SimAI does with NONE:" in text
    # Every figure decodes: the front page's two and every image result of the report.
    broken = [name for name, width, height in found["images"] if not (width and height)]
    assert not broken, f"images that do not load: {broken}"
    results = {name for name, _, _ in found["images"] if name != "page"}
    assert {"results/plots/difference_by_cause.png", "results/plots/exposed_tp_by_overlap.png",
            "results/plots/exposed_by_group.png"} <= results
    assert sum(name == "page" and width > 600 for name, width, _ in found["images"]) == 2
    # The answer's figure on the first screen, right under the answer, drawn at (nearly) its own
    # width, so its letters are as large as drawn (tests/test_figures.py checks those).
    top, shown, natural = [f for f in found["front"] if f[2] > 600][0]  # not the menu's logo
    assert 0 < top < found["height"] * 0.5, (top, found["height"])
    assert shown >= 0.9 * natural, (shown, natural)
    # The screenshot, kept for a person to look at.
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report.png"
    taken = headless(browser, "--window-size=1400,2200", "--virtual-time-budget=30000", f"--screenshot={shot}",
                     report.as_uri())
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", taken.stderr[-2000:]
    record_property("screenshot", str(shot))
