"""bench/gpu.py, the prepared script for a lent GPU, in its CPU dry mode with
a tiny budget: it keeps to its deadline and writes a well-formed page."""
from __future__ import annotations

import time

from bench import gpu


def test_dry_run_on_the_cpu_writes_a_well_formed_page_within_its_budget(tmp_path):
    out = tmp_path / "gpu.md"
    start = time.monotonic()
    assert gpu.main(["--device", "cpu", "--budget", "20", "--per", "0.3", "--out", str(out)]) == 0
    assert time.monotonic() - start < 20 + 60        # a step started before the deadline may finish (loaded CI)
    text = out.read_text()
    for heading in ("# The trainer on a GPU", "Device: CPU", "## Every model's training step",
                    "## Steps per second", "## Fan et al.'s parity at the paper preset"):
        assert heading in text
    results = [line.split(" | ")[1].rstrip(" |") for line in text.splitlines() if line.startswith("| parity / ")]
    assert results and results[0] == "pass"          # the first model ran; later ones may be skipped
    assert all(r == "pass" or r.startswith("skipped") for r in results)


def test_without_cuda_it_writes_nothing(tmp_path, monkeypatch, capsys):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu.main(["--out", str(tmp_path / "gpu.md")]) == 1
    assert not (tmp_path / "gpu.md").exists() and "no CUDA device" in capsys.readouterr().err
