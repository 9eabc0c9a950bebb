"""The soak (benches/soak.sh): its checks fail on a leak and pass on noise, and a 60-second soak of
the release binary passes them.

The checks are benches/soak.py's `check`; the synthetic series below are sampled like a real run
(every 2 s: an idle baseline, the warm-up, the load, the cool-down).
"""

import importlib.util
import json
import os
import random
import subprocess
import sys

import pytest

import conftest
from conftest import REPO, clean_env

_spec = importlib.util.spec_from_file_location("soak", REPO / "benches" / "soak.py")
soak = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(soak)

INTERVAL = 2.0
REQUESTS_PER_S = 50  # about what the soak's load makes (summary.json's operations)
RSS_CHECKS = {"RSS slope after warm-up", "RSS last quarter vs first quarter after warm-up"}


def series(seconds, rss_mb, fds=lambda t, phase: 30 if phase in ("warmup", "load") else 15, cooldown=10):
    """Samples of a run of `seconds` of load: rss_mb(t, phase) in MB, fds(t, phase)."""
    samples, t = [], 0.0
    phases = [("idle", 6), ("warmup", seconds * soak.WARMUP_FRACTION),
              ("load", seconds * (1 - soak.WARMUP_FRACTION)), ("cooldown", cooldown)]
    for phase, length in phases:
        end = t + length
        while t < end:
            samples.append({"t": t, "phase": phase, "rss_kb": int(rss_mb(t, phase) * 1024), "fds": fds(t, phase)})
            t += INTERVAL
    return samples


def failed(results):
    return sorted(name for name, ok, _ in results if not ok)


@pytest.mark.parametrize("seconds", [60, 600])
@pytest.mark.parametrize("seed", range(5))
def test_a_flat_noisy_series_passes(seconds, seed):
    rnd = random.Random(seed)
    end = 6 + seconds
    step_at = rnd.uniform(6 + 0.25 * seconds, end)  # one allocator step of 1.5 MB somewhere

    def rss(t, phase):
        if phase == "idle":
            return 20 + rnd.gauss(0, 0.05)
        return 25 + rnd.gauss(0, 0.3) + (1.5 if t >= step_at else 0)

    def fds(t, phase):
        return 15 if phase in ("idle", "cooldown") else 25 + rnd.randrange(10)

    results = soak.check(series(seconds, rss, fds))
    assert not failed(results), results


@pytest.mark.parametrize("seconds", [60, 600])
def test_a_leak_of_100_kb_per_request_fails(seconds):
    def rss(t, phase):
        return 20 if phase == "idle" else 25 + 100 / 1024 * REQUESTS_PER_S * (t - 6)

    assert RSS_CHECKS <= set(failed(soak.check(series(seconds, rss))))


def test_a_leak_of_1_kb_per_request_fails_the_10_minute_run():
    rnd = random.Random(1)

    def rss(t, phase):
        return 20 if phase == "idle" else 25 + 1 / 1024 * REQUESTS_PER_S * (t - 6) + rnd.gauss(0, 0.3)

    assert RSS_CHECKS <= set(failed(soak.check(series(600, rss))))


def test_growth_that_starts_late_fails():
    # Flat for most of the run, then 6 MB in the last three minutes (a table that starts to grow).
    def rss(t, phase):
        return 25 + max(0.0, t - 430) / 180 * 6 if phase != "idle" else 20

    assert "RSS last quarter vs first quarter after warm-up" in failed(soak.check(series(600, rss)))


def test_leaked_descriptors_fail():
    # One descriptor kept per abandoned connection (about one every 3 s).
    def leaking(t, phase):
        return 15 if phase == "idle" else 30 + int(t / 3)

    assert {"fds last quarter vs first quarter after warm-up", "fds back to the idle baseline after the load"} \
        <= set(failed(soak.check(series(60, lambda t, p: 25, leaking))))

    def not_returned(t, phase):
        return {"idle": 15, "cooldown": 21}.get(phase, 30)

    assert failed(soak.check(series(60, lambda t, p: 25, not_returned))) == [
        "fds back to the idle baseline after the load"]


def test_too_few_samples_fail():
    assert failed(soak.check(series(60, lambda t, p: 25)[:5])) == ["enough samples"]


def test_slope_is_least_squares_per_minute():
    assert soak.slope_per_minute([(0, 1.0), (30, 2.0), (60, 3.0)]) == pytest.approx(2.0)
    assert soak.slope_per_minute([(0, 5.0), (2, 5.0)]) == 0.0
    assert soak.slope_per_minute([(0, 5.0)]) == 0.0


def test_a_60_second_soak_of_the_release_binary(tmp_path):
    """benches/soak.sh 60: RSS and fds flat after the warm-up, fds back to the baseline, no
    unexpected outcome, a clean stop. The same checks as the 10-minute run."""
    binary = os.environ.get("TIPHYS_RELEASE_BIN") or conftest.TIPHYS_BIN
    if not os.path.isfile(binary):
        pytest.fail(f"tiphys binary {binary} does not exist: run `cargo build --release` (or set TIPHYS_RELEASE_BIN)")
    out = tmp_path / "soak"
    proc = subprocess.run(["bash", str(REPO / "benches" / "soak.sh"), "60", str(out)], check=False,
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
                          env=clean_env(TIPHYS_RELEASE_BIN=binary, SOAK_PYTHON=sys.executable))
    report = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, report
    summary = json.loads((out / "summary.json").read_text())
    assert summary["passed"], report
    assert all(c["ok"] for c in summary["checks"]), summary["checks"]
    assert (out / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "samples.csv").read_text().count("\n") >= 30
