"""The comparison-task path: scoring masks, `rasp train` / `rasp eval` /
`rasp data` on tiny SeqTasks (tests/seq_toys.py), resume bit-identity."""
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from seq_toys import TOYS, register_toys

from rasp.cli import main
from rasp.errors import RaspError
from trainer.benchmark import scoring
from trainer.benchmark.data import SeqBatch, collate, generate_split, read_jsonl
from trainer.settings.hparams import defaults, scored_positions
from trainer.benchmark.presets import apply, lr_at, parse_set


@pytest.fixture(autouse=True)
def toys():
    from trainer.tasks import TASKS
    register_toys()
    yield
    for t in TOYS:
        TASKS.pop(t.name, None)


def _batch(targets):
    t = torch.tensor(targets)
    tok = torch.ones(t.shape[0], t.shape[-1] if t.dim() > 1 else 1, dtype=torch.long)
    return SeqBatch(tok, tok != 0, t, torch.full((t.shape[0],), t.shape[-1] if t.dim() > 1 else 1),
                    torch.full((t.shape[0],), -1))


def test_metrics_score_exactly_the_scored_positions():
    b = _batch([[1, -1, 0, -1, 1], [0, 1, -1, -1, -1], [-1, -1, -1, -1, -1]])
    pred = torch.tensor([[1, 0, 1, 0, 1],       # one scored error (position 2); unscored 1, 3 wrong on purpose
                         [0, 1, 1, 1, 1],       # all scored right, unscored garbage
                         [0, 0, 0, 0, 0]])      # nothing scored: no value
    assert scoring.example_values("token_acc", pred, b) == [2 / 3, 1.0, None]
    assert scoring.example_values("seq_acc", pred, b) == [0.0, 1.0, None]
    assert scoring.example_values("last_read_acc", pred, b) == [1.0, 1.0, None]   # positions 4 and 1
    cls = _batch([2, 0, 1])
    assert scoring.example_values("acc", torch.tensor([2, 1, 1]), cls) == [1.0, 0.0, 1.0]
    # the loss sees the same positions: unscored logits get no gradient
    logits = torch.randn(3, 5, 2, requires_grad=True)
    scoring.loss_fn(logits, b).backward()
    assert torch.equal(logits.grad[0, 1], torch.zeros(2)) and torch.equal(logits.grad[2], torch.zeros(5, 2))
    assert logits.grad[0, 2].abs().sum() > 0


def test_a_curriculum_over_positions_scores_each_examples_first_targets():
    """loss_first K, loss_grow_every N: the loss of step s scores each example's first
    K + s // N targets (its scored positions, not its first tokens), the rest become -1."""
    assert [scored_positions(s, 0, 125) for s in (0, 900)] == [0, 0]           # off: all
    assert [scored_positions(s, 3, 0) for s in (0, 900)] == [3, 3]
    assert [scored_positions(s, 2, 125) for s in (0, 124, 125, 750)] == [2, 2, 3, 8]
    t = torch.tensor([[5, 6, 7, 8], [-1, 6, -1, 8]])
    assert scoring.keep_first_targets(t, 2).tolist() == [[5, 6, -1, -1], [-1, 6, -1, 8]]
    assert scoring.keep_first_targets(t, 0).tolist() == t.tolist()
    assert scoring.keep_first_targets(torch.tensor([3, 4]), 1).tolist() == [3, 4]       # pooled: one label each
    hp = defaults("seq")
    hp.loss_first = -1
    with pytest.raises(RaspError, match="loss_first = -1"):
        hp.validate()
    # a curriculum that would never reach the words' last positions is named before training (a warning)
    from trainer.benchmark.kind import check_position_curriculum, seq_task
    hp.train_split, hp.loss_first, hp.loss_grow_every, hp.steps = "train_k", 2, 1, 6      # 2 + 5 = 7 of 8
    said = check_position_curriculum(seq_task("words_z60"), hp)
    assert "the loss scores 7 positions, but train_k examples have up to 8" in said and "8..8 will never" in said
    hp.steps = 7
    assert check_position_curriculum(seq_task("words_z60"), hp) is None


def test_summary_and_standard_error():
    r = scoring.summary([1.0, 0.0, None, 1.0, 1.0])
    assert r["mean"] == 0.75 and r["n"] == 4
    assert abs(r["se"] - (0.25 / 4) ** 0.5) < 1e-12       # sample variance 0.25, se = sd / sqrt(n)
    assert scoring.summary([None, None])["mean"] is None


def test_collate_pads_and_masks():
    task = TOYS[0]
    exs = generate_split(task, "train", 5, 0)
    b = collate(task, exs)
    L = max(len(e.input) for e in exs)
    assert b.tokens.shape == b.targets.shape == (5, L)
    assert b.mask.sum().item() == sum(len(e.input) for e in exs)
    assert (b.targets[~b.mask] == -1).all()
    assert generate_split(task, "train", 5, 0)[3].input == exs[3].input        # seeded
    assert generate_split(task, "long", 5, 0)[0].input != exs[0].input


def test_presets_merge_and_set():
    hp = apply(defaults("seq"), parse_set(["lr=0.5", "steps=3.0", "max_iters=12", "name=abc", "betas=[0.8,0.9]"]))
    assert hp.lr == 0.5 and hp.steps == 3 and isinstance(hp.steps, int) and hp.betas == [0.8, 0.9]
    assert hp.extra == {"max_iters": 12, "name": "abc"}
    hp = apply(defaults("seq"), {"steps": 10, "lr": 1.0, "schedule": "cosine"})
    assert lr_at(0, hp) == 1.0 and lr_at(10, hp) < 1e-9
    assert lr_at(5, apply(defaults("seq"), {"steps": 10, "lr": 1.0, "schedule": "linear"})) == 0.5


def test_every_preset_key_names_a_task_family():
    """A model's preset for a family no task has never applies (mamba2, llama and
    their implicit forms once keyed copying's sizes under "copying", while the
    copying task's family is "memory", so they trained copying at the defaults)."""
    from trainer.models import comparison_models, get_encoder_spec
    from trainer.benchmark.presets import FAMILY, task_family
    from trainer.tasks import TASKS
    from trainer.tasks.base import SeqTask
    families = {task_family(t) for t in TASKS.values() if isinstance(t, SeqTask)}
    for preset, table in FAMILY.items():
        assert set(table) <= families, (preset, set(table) - families)
    for name in comparison_models():
        for preset, table in get_encoder_spec(name).presets.items():
            assert set(table) <= families, (name, preset, set(table) - families)


def _train(tmp, task, model, *extra):
    return main(["train", "--task", task, "--model", model, "--out", str(tmp), "--no-progress", *extra])


def test_train_resume_is_bit_identical(tmp_path):
    args = ("--steps", "30", "--set", "ckpt_every=15", "--set", "eval_every=10", "--set", "dropout=0.1",
            "--d-model", "16", "--n-head", "2", "--set", "d_ff=32", "--set", "log_every=5")
    full = tmp_path / "full"
    assert _train(full, "toy_parity", "transformer_rope", *args) == 0
    cut = tmp_path / "cut"
    shutil.copytree(full, cut)
    shutil.rmtree(cut / "checkpoints" / "step_0000030")          # killed after the step-15 checkpoint
    (cut / "latest.json").write_text(json.dumps({"step": 15, "path": "checkpoints/step_0000015"}))
    (cut / "summary.json").unlink()
    assert main(["train", "--out", str(cut), "--resume", "--no-progress"]) == 0
    a = (full / "checkpoints/step_0000030/model.safetensors").read_bytes()
    b = (cut / "checkpoints/step_0000030/model.safetensors").read_bytes()
    assert a == b
    rows = lambda d: [r for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines())
                      if "loss" in r or "eval_acc" in r]
    strip = lambda rs: [{k: v for k, v in r.items() if k != "steps_per_s"} for r in rs]
    assert strip(rows(full)) == strip(rows(cut))
    s = json.loads((cut / "summary.json").read_text())
    assert s["finished"] is True and s["step"] == 30
    run = json.loads((full / "run.json").read_text())
    assert run["kind"] == "seq" and run["hparams"]["dropout"] == 0.1 and run["hparams"]["d_ff"] == 32


def test_eval_json_schema(tmp_path, capsys):
    for task in ("toy_sum", "toy_pair"):
        out = tmp_path / task
        assert _train(out, task, "gru", "--steps", "20", "--set", "eval_every=0", "--d-model", "16") == 0
        assert main(["eval", str(out), "-n", "40", "--no-progress"]) == 0
        res = json.loads((out / "eval.json").read_text())
        assert res["task"] == task and res["model"] == "gru" and set(res["splits"]) == {"train", "valid", "long"}
        for e in res["splits"].values():
            assert e["n"] == 40
            assert set(e["metrics"]) == {"acc"} and set(e["metrics"]["acc"]) == {"mean", "se"}
            assert sum(row["n"] for row in e["by_length"].values()) == 40
            assert all(set(row) == {"acc", "n"} for row in e["by_length"].values())
            assert set(e["stats"]["depth"]) == {"mean", "max", "by_length"}
        assert (out / "eval_accuracy.png").exists()
    # toy_sum marks groups; a re-run of one split keeps the others
    res = json.loads((tmp_path / "toy_sum" / "eval.json").read_text())
    assert set(res["splits"]["train"]["by_group"]) == {"0", "1"}
    assert main(["eval", str(tmp_path / "toy_sum"), "--splits", "long", "-n", "10", "--no-progress"]) == 0
    res = json.loads((tmp_path / "toy_sum" / "eval.json").read_text())
    assert res["splits"]["long"]["n"] == 10 and res["splits"]["train"]["n"] == 40
    assert main(["eval", str(tmp_path / "toy_sum"), "--splits", "nope"]) == 2
    assert "no split 'nope'" in capsys.readouterr().err


def test_rasp_data_writes_reads_and_refuses(tmp_path, capsys):
    f = tmp_path / "d.jsonl"
    assert main(["data", "toy_parity", "--split", "long", "-n", "7", "-o", str(f)]) == 0
    exs = read_jsonl(TOYS[0], f)
    assert [e.input for e in exs] == [e.input for e in generate_split(TOYS[0], "long", 7, 0)]
    assert main(["data", "toy_parity", "--stats"]) == 0
    assert "scored_per_sequence" in capsys.readouterr().out
    for bad, msg in ((["nope", "--stats"], "unknown task"), (["parity", "--stats"], "Fan task"),
                     (["toy_parity", "--split", "x", "-n", "3", "-o", str(f)], "no split 'x'"),
                     (["toy_parity", "--split", "long", "-n", "0", "-o", str(f)], "-n: must be in 1.."),
                     (["toy_parity", "--split", "long"], "rasp data TASK")):
        try:
            status = main(["data", *bad])
        except SystemExit as e:                  # argparse's one-line error
            status = e.code
        assert status == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err


def test_train_from_file_and_bad_inputs(tmp_path, capsys):
    f = tmp_path / "train.jsonl"
    assert main(["data", "toy_sum", "--split", "train", "-n", "50", "-o", str(f)]) == 0
    out = tmp_path / "run"
    assert _train(out, "toy_sum", "lstm", "--data", str(f), "--steps", "5", "--set", "eval_every=0",
                  "--batch-size", "8") == 0
    assert json.loads((out / "run.json").read_text())["data"] == str(f.resolve())
    f.write_text('{"input": [1, 2], "target": 1}\n{"input": [1, 9], "target": 0}\n')
    capsys.readouterr()
    assert _train(tmp_path / "r2", "toy_sum", "lstm", "--data", str(f), "--steps", "2") == 2
    assert f"{f}:2: input must be" in capsys.readouterr().err
    assert _train(tmp_path / "r3", "toy_sum", "lstm", "--max-train-n", "4") == 2
    assert "--max-train-n 4: a Fan-task option" in capsys.readouterr().err
    assert _train(tmp_path / "r4", "toy_sum", "nosuchmodel") == 2
    assert _train(tmp_path / "r5", "toy_sum", "gru", "--set", "pooling=max") == 2
    assert "pooling" in capsys.readouterr().err


class _Probe(torch.nn.Module):
    """A GRU encoder that also reports an aux loss, per-sample `iterations`
    (= its length) and per-position `residual`, and records set_progress."""
    calls: list = []

    def __init__(self, cfg):
        super().__init__()
        from trainer.models.rnn import RecurrentEncoder
        self.inner = RecurrentEncoder(cfg, "gru")

    def set_progress(self, step, total):
        _Probe.calls.append((step, total))

    def forward(self, tokens, mask):
        out = self.inner(tokens, mask)
        out.aux_loss = torch.tensor(5.0)
        out.stats = {"iterations": mask.sum(1).float(), "residual": mask.float() * 0.5}
        return out


def test_trainer_calls_set_progress_adds_aux_loss_and_reports_stats(tmp_path):
    from trainer.models.base import MODELS, EncoderSpec, register_encoder
    register_encoder(EncoderSpec("probe_enc", _Probe, "tests"))
    _Probe.calls.clear()
    try:
        out = tmp_path / "p"
        assert _train(out, "toy_sum", "probe_enc", "--steps", "3", "--set", "eval_every=0", "--set",
                      "log_every=1") == 0
        assert _Probe.calls == [(0, 3), (1, 3), (2, 3)]
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        assert all(r["loss"] > 5.0 for r in rows if "loss" in r)
        assert main(["eval", str(out), "--splits", "long", "-n", "30", "--no-progress"]) == 0
        st = json.loads((out / "eval.json").read_text())["splits"]["long"]["stats"]
        assert all(float(L) == v for L, v in st["iterations"]["by_length"].items())
        assert st["residual"]["mean"] == 0.5 and st["iterations"]["max"] <= 12
    finally:
        MODELS.pop("probe_enc", None)


@pytest.mark.heavy
def test_ddp_two_cpu_processes_match_single_process_for_a_comparison_model(tmp_path):
    """`torchrun --nproc_per_node 2` (gloo) trains a comparison model on the
    same global batch as one process: the logged loss curve agrees (each
    shard's loss is normalised by the mean shard weight, so the averaged
    gradients are the full batch's; only float summation order differs)."""
    import subprocess
    root = Path(__file__).resolve().parent.parent
    args = ["train", "--task", "words_z60", "--model", "gru", "--no-progress", "--steps", "12", "--batch-size", "16",
            "--set", "log_every=3", "--set", "eval_every=0", "--set", "eval_samples=16", "--set", "ckpt_every=12",
            "--d-model", "16", "--lr", "0.03"]
    env = {**__import__("os").environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    assert main([*args, "--out", str(single)]) == 0
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        "-m", "trainer", *args, "--out", str(ddp)], cwd=root, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((ddp / "run.json").read_text())["world_size"] == 2

    def losses(run):
        return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    a, b = losses(single), losses(ddp)
    assert len(a) == len(b) == 4 and len(set(a)) == 4
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4 * max(a), (a, b)
    from safetensors.torch import load_file
    wa, wb = (load_file(str(run / "checkpoints" / "step_0000012" / "model.safetensors")) for run in (single, ddp))
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < 1e-4      # the same trajectory
