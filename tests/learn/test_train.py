"""tfx.learn.train: schedules, a short deterministic run, segments equal one run, the
trained-weights cache (same tensors whether computed or read; another run never reads it), and bad
arguments."""

import dataclasses
from pathlib import Path

import pytest
import torch

import tfx.inspect.timing
from tfx.inspect.timing import threads
from tfx.learn import train
from tfx.learn.corpus import CharVocab, MLMData, pack
from tfx.model.bert import BertConfig
from tfx.numpy.optim_np import noam_lr

SENTENCES = ["我喜欢吃苹果。", "我吃苹果。", "你喜欢吃什么？", "他喜欢苹果。", "我们吃饭吧。"] * 20


@pytest.fixture(scope="module")
def data():
    vocab = CharVocab.build(SENTENCES, min_count=2)
    packed = pack([vocab.encode(s) for s in SENTENCES], 16, vocab["[CLS]"], vocab["[SEP]"])
    return MLMData(SENTENCES, SENTENCES[:5], vocab, packed, packed[:4], "test-data")


def configs(data, **train_kw):
    model_cfg = BertConfig.tiny(
        vocab_size=len(data.vocab), d_model=32, n_heads=2, d_ff=64, max_len=16, dropout=0.1
    )
    kw = dict(steps=12, batch_size=8, lr=3e-3, warmup=3, eval_every=4, grad_every=4)
    return model_cfg, train.TrainConfig(**{**kw, **train_kw})


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(train, "cache_dir", lambda: tmp_path / "models")


def test_linear_schedule():
    cfg = train.TrainConfig(steps=100, warmup=10, lr=1.0)
    lrs = [train.lr_at(s, cfg, 64) for s in range(1, 101)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[-1] == 0.0 and all(a >= b for a, b in zip(lrs[9:], lrs[10:]))


def test_noam_schedule_is_chapter_09s():
    cfg = train.TrainConfig(steps=100, warmup=10, lr=2.0, schedule="noam")
    for s in (1, 5, 10, 40):
        want = 2.0 * noam_lr(s, 64, 10) / noam_lr(10, 64, 10)
        assert train.lr_at(s, cfg, 64) == pytest.approx(float(want))


def test_bad_configs(data):
    with pytest.raises(ValueError, match="schedule"):
        train.TrainConfig(schedule="cosine")
    with pytest.raises(ValueError, match="label_smoothing"):
        train.TrainConfig(label_smoothing=2.0)
    with pytest.raises(TypeError, match="steps"):
        train.TrainConfig(steps=1.5)
    model_cfg, train_cfg = configs(data)
    with pytest.raises(ValueError, match="vocab_size"):
        train.MLMTrainer(dataclasses.replace(model_cfg, vocab_size=7), train_cfg, data)
    with pytest.raises(TypeError, match="train_cfg"):
        train.MLMTrainer(model_cfg, {"steps": 3}, data)
    t = train.MLMTrainer(model_cfg, train_cfg, data, cache=False)
    with pytest.raises(ValueError, match="past the run's last step"):
        t.run(13, progress=False)


def test_training_learns_and_logs(data, capsys):
    model_cfg, train_cfg = configs(data, steps=40, lr=1e-2, warmup=5, eval_every=10)
    t = train.MLMTrainer(model_cfg, train_cfg, data, cache=False).run(40, progress=False)
    loss = t.log["loss"]
    assert len(loss) == 40 and sum(loss[-10:]) < 0.75 * sum(loss[:10])
    assert t.log["eval_step"] == [10, 20, 30, 40] and len(t.log["accuracy"]) == 4
    assert sorted(t.log["grad"]) == [1, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40]
    assert all(len(v) == model_cfg.n_layers and min(v) > 0 for v in t.log["grad"].values())
    out = capsys.readouterr().out
    assert "steps 0→40 of 40" in out and "it/s" not in out


def test_deterministic_and_segments_equal_one_run(data):
    model_cfg, train_cfg = configs(data)
    a = train.MLMTrainer(model_cfg, train_cfg, data, cache=False).run(12, progress=False)
    b = train.MLMTrainer(model_cfg, train_cfg, data, cache=False)
    b.run(5, progress=False).run(12, progress=False)
    for (name, p), q in zip(a.model.named_parameters(), b.model.parameters()):
        assert torch.equal(p, q), name
    assert a.log == b.log


def test_cache_gives_the_same_model_and_log(data, tmp_path):
    model_cfg, train_cfg = configs(data)
    a = train.MLMTrainer(model_cfg, train_cfg, data).run(6, progress=False).run(12, progress=False)
    files = sorted(p.name for p in (tmp_path / "models").iterdir())
    assert len(files) == 2 and files[0].endswith("step000006.pt")
    b = train.MLMTrainer(model_cfg, train_cfg, data)
    b.run(6, progress=False)  # read
    b.run(12, progress=False)  # read
    assert b.log == a.log and all(
        torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters())
    )
    # reading step 6 then training on gives what training all the way gave
    (tmp_path / "models" / files[1]).unlink()
    c = train.MLMTrainer(model_cfg, train_cfg, data).run(6, progress=False).run(12, progress=False)
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), c.model.parameters()))


def test_other_runs_never_read_the_cache(data, tmp_path):
    model_cfg, train_cfg = configs(data)
    train.MLMTrainer(model_cfg, train_cfg, data).run(12, progress=False)
    longer = dataclasses.replace(train_cfg, steps=24)  # another schedule: another key
    keys = {
        train.run_key(model_cfg, train_cfg, data.checksum),
        train.run_key(model_cfg, longer, data.checksum),
        train.run_key(model_cfg, dataclasses.replace(train_cfg, seed=1), data.checksum),
        train.run_key(model_cfg, train_cfg, "other-data"),
        train.run_key(dataclasses.replace(model_cfg, n_layers=1), train_cfg, data.checksum),
    }
    assert len(keys) == 5


def test_a_cache_made_on_another_instruction_set_is_not_read(data, monkeypatch):
    """Weights trained where the kernels round differently are another run: train anew there."""
    model_cfg, train_cfg = configs(data)
    here = train.run_key(model_cfg, train_cfg, data.checksum)
    other = "DEFAULT" if torch.backends.cpu.get_cpu_capability() != "DEFAULT" else "AVX2"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: other)
    assert train.run_key(model_cfg, train_cfg, data.checksum) != here


def test_damaged_cache_file_is_recomputed(data, tmp_path):
    model_cfg, train_cfg = configs(data)
    a = train.MLMTrainer(model_cfg, train_cfg, data).run(12, progress=False)
    (path,) = (tmp_path / "models").iterdir()
    path.write_bytes(b"not a checkpoint")
    b = train.MLMTrainer(model_cfg, train_cfg, data).run(12, progress=False)
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    assert torch.load(path, weights_only=True)["step"] == 12  # rewritten


def test_two_writers_at_once_leave_one_whole_file(tmp_path, monkeypatch):
    """Two processes saving the same step: each writes a temporary file of its own and renames it
    into place, so the file is one writer's state, whole, and no temporary file is left. (With one
    shared temporary name the second writer overwrote the first's temporary file and renamed it
    away, and the first's rename failed.) The second writer saves between the first's write and
    its rename."""
    path = tmp_path / "models" / "mlm-key-step000006.pt"
    state = {"step": 6, "w": torch.arange(1000.0)}
    save, replace = torch.save, train.os.replace
    saves, renamed = [], []

    def interleaved(obj, f, *args, **kwargs):
        saves.append(f)
        save(obj, f, *args, **kwargs)
        if len(saves) == 1:  # the other process saves before this one renames its file
            train.write_checkpoint(state, path)

    def recorded(src, dst):
        renamed.append(Path(src))
        return replace(src, dst)

    monkeypatch.setattr(torch, "save", interleaved)
    monkeypatch.setattr(train.os, "replace", recorded)
    train.write_checkpoint(state, path)
    assert len(saves) == 2 and len(set(renamed)) == 2
    assert all(p.parent == path.parent and p != path for p in renamed)
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    loaded = train.read_checkpoint(path)
    assert loaded["step"] == 6 and torch.equal(loaded["w"], state["w"])


def test_a_failed_save_leaves_nothing(tmp_path, monkeypatch):
    def broken(obj, f, *args, **kwargs):
        f.write(b"half a ch")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken)
    path = tmp_path / "mlm-key-step000001.pt"
    with pytest.raises(OSError, match="disk full"):
        train.write_checkpoint({"step": 1}, path)
    assert list(tmp_path.iterdir()) == [] and train.read_checkpoint(path) is None


def test_the_parts_are_the_trainers(data):
    """The held-out masking, the schedule's evaluation and gradient steps, and one optimizer step
    called by hand are what the trainer does."""
    model_cfg, train_cfg = configs(data, steps=10, eval_every=4, grad_every=3)
    t = train.MLMTrainer(model_cfg, train_cfg, data, cache=False)
    for (i, lab), (i2, lab2) in zip(t.held_out, train.mask_held_out(data, train_cfg.masking)):
        assert torch.equal(i, i2) and torch.equal(lab, lab2)
    assert [s for s in range(1, 11) if train_cfg.evaluates_at(s)] == [4, 8, 10]
    assert [s for s in range(1, 11) if train_cfg.records_grads_at(s)] == [1, 3, 6, 9]
    twin = train.MLMTrainer(model_cfg, train_cfg, data, cache=False)
    # the trainer computes with its own thread count: so must the step by hand, bit for bit
    with torch.random.fork_rng(devices=[]), threads(twin.n_threads):
        torch.set_rng_state(twin.dropout_rng)
        inputs, labels = twin._batch()
        lr = train.lr_at(1, train_cfg, model_cfg.d_model)
        loss, norms = train.optimizer_step(
            twin.model, twin.opt, inputs, labels, train_cfg, lr, True
        )
    t.run(1, progress=False)
    assert [loss] == t.log["loss"] and t.log["grad"] == {1: norms}
    assert all(torch.equal(p, q) for p, q in zip(t.model.parameters(), twin.model.parameters()))


def test_step_time_ratios_takes_mlm_step_pairs_sizes_by_name():
    with pytest.raises(TypeError, match="d_modle"):
        train.step_time_ratios(d_modle=64, repeats=1, bf16=False)
    with pytest.raises(TypeError):
        train.step_time_ratios(300, 64)  # sizes only by name: never taken for repeats


def test_step_time_ratios_runs_at_a_tiny_size():
    tiny = dict(vocab_size=300, d_model=64, n_layers=1, batch=2, length=8, repeats=1)
    r = train.step_time_ratios(**tiny, bf16=True)
    assert min(r.hf_fp32, r.tfx_fp32, r.tfx_bf16) > 0
    assert r.ratio_fp32 == r.tfx_fp32 / r.hf_fp32 and "Hugging Face" in str(r)
    assert "skipped" not in str(r) and r.ratio_bf16 == r.tfx_bf16 / r.hf_fp32


def test_step_time_ratios_skips_bf16_where_the_cpu_has_no_fast_path(monkeypatch):
    """An AVX2-only CPU gets the fp32 steps and a one-line reason, not minutes of bf16 matmuls."""
    tiny = dict(vocab_size=300, d_model=64, n_layers=1, batch=2, length=8, repeats=1)
    r = train.step_time_ratios(**tiny, bf16=False)
    assert r.tfx_bf16 is None and r.ratio_bf16 is None and "bf16" not in r.fastest
    assert f"bf16 autocast: skipped, {train.BF16_SKIPPED}" in str(r)
    slow = tfx.inspect.timing.CpuCapability(aten="AVX2", fast_bf16=False, flags=("avx2",))
    monkeypatch.setattr(tfx.inspect.timing, "cpu_capability", lambda: slow)
    assert train.step_time_ratios(**tiny).tfx_bf16 is None  # bf16=None decides from the CPU
    with pytest.raises(TypeError, match="bf16 must be True, False or None"):
        train.step_time_ratios(**tiny, bf16="yes")


def test_summary_reads_the_log_and_refuses_bad_ranges(data):
    """The summary line depends only on the log: the same whether the steps ran or were cached."""
    trainer = train.MLMTrainer(*configs(data), data).run(8, progress=False)
    assert trainer.summary(0, 4) != trainer.summary(4, 8)
    fresh = train.MLMTrainer(*configs(data), data).run(8, progress=False)  # read from the cache
    assert fresh.summary(0, 8) == trainer.summary(0, 8)
    line = trainer.summary(0, trainer.step)
    assert line.startswith(f"steps 0→{trainer.step} of {trainer.cfg.steps}: mean training loss ")
    with pytest.raises(ValueError, match="start <= until"):
        trainer.summary(2, 1)
    with pytest.raises(ValueError, match="start <= until"):
        trainer.summary(0, trainer.step + 1)


# The caller's thread count must not matter: pretrained_mlm() in a process with 1 thread and in
# one with 3 threads gives the same weights, and the second reads the first's cache (no step runs).
_CACHE_PROBE = """
import hashlib, sys, torch
torch.set_num_threads(int(sys.argv[2]))
from pathlib import Path
from tfx.learn import corpus
from tfx.learn import train
from tfx.model.bert import BertConfig
from tfx.learn.corpus import CharVocab, MLMData, pack

sentences = ["我喜欢吃苹果。", "我吃苹果。", "你喜欢吃什么？", "他喜欢苹果。"] * 10
vocab = CharVocab.build(sentences, min_count=2)
packed = pack([vocab.encode(s) for s in sentences], 16, vocab["[CLS]"], vocab["[SEP]"])
data = MLMData(sentences, sentences[:4], vocab, packed, packed[:4], "probe-data")
corpus.load_mlm_data = lambda: data
train.cache_dir = lambda: Path(sys.argv[1])
train.default_configs = lambda V, max_len=64: (
    BertConfig.tiny(vocab_size=V, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_len=16),
    train.TrainConfig(steps=6, batch_size=4, warmup=2, eval_every=3, grad_every=3),
)
seen = []
step = train.MLMTrainer.train_step
def counting_step(self):
    seen.append(torch.get_num_threads())
    return step(self)
train.MLMTrainer.train_step = counting_step
model, _, trainer = train.pretrained_mlm()
h = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
print(len(seen), sorted(set(seen)), torch.get_num_threads(), h.hexdigest(), trainer.key)
"""


def test_pretrained_mlm_reads_the_cache_whatever_the_callers_threads(tmp_path):
    import subprocess
    import sys

    def run(n_threads: int) -> list:
        out = subprocess.run(
            [sys.executable, "-c", _CACHE_PROBE, str(tmp_path / "models"), str(n_threads)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()[-1].split()  # after the run's summary line

    steps, threads_in_training, after, digest, key = run(1)
    assert steps == "6" and threads_in_training == f"[{train.TRAIN_THREADS}]"
    assert after == "1"  # the caller's count is restored
    assert len(list((tmp_path / "models").glob(f"mlm-{key}-*.pt"))) == 1
    steps2, _, after2, digest2, key2 = run(3)
    assert steps2 == "0" and after2 == "3"  # read from the cache: no step ran
    assert (key2, digest2) == (key, digest)


def test_bench_mlm_config_tiny_writes_results(tmp_path):
    """bench/mlm_config.py --tiny: a variant with more steps for a faster step, results named."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, str(root / "bench" / "mlm_config.py"), "--tiny", "--only", "1,4"]
        + ["--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    [path] = tmp_path.glob("mlm-config-*-tiny.json")
    record = json.loads(path.read_text())
    ref, bf16 = record["variants"].values()
    assert ref["step_time_ratio"] == 1.0 and ref["train"]["steps"] == 20
    assert bf16["train"]["bf16"] and bf16["budget"] == "same time"
    assert bf16["train"]["steps"] == max(10, round(20 / bf16["step_time_ratio"] / 10) * 10)
    assert 0 < ref["held_out_accuracy"] < 1 and record["machine"] and record["commands"]
    assert (tmp_path / path.name.replace(".json", ".md")).read_text().count("| reference") == 1


def test_the_parts_name_a_bad_argument(data, tmp_path):
    _, train_cfg = configs(data, steps=2)
    with pytest.raises(ValueError, match="rows must be"):
        train.mask_held_out(data, train_cfg.masking, rows=0)
    with pytest.raises(TypeError, match="state must be a dict, got list"):
        train.write_checkpoint([1], tmp_path / "x.pt")
    train.write_checkpoint({"step": 1}, str(tmp_path / "x.pt"))  # a str path is a path
    assert train.read_checkpoint(str(tmp_path / "x.pt")) == {"step": 1}
