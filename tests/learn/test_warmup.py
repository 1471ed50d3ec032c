"""Chapter 06's additions: tfx.learn.warmup (the warm-up race) and bench/warmup.py (clear errors,
determinism, a run that learns, the script end to end with --quick), the init rules it adds to
tfx.inspect.stack, and the gradient-flow widget at its extremes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tfx
from tfx.inspect.stack import INIT_SCALE_RANGE, MAX_DEPTH, StackConfig, build_stack, describe
from tfx.learn.warmup import RaceConfig, RaceModel, race

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "kwargs,words",
    [
        (dict(norm="sandwich"), "norm must be 'post' or 'pre'"),
        (dict(warmup=-1), "warmup must be an int >= 0"),
        (dict(lr=0), "lr must be a positive number"),
        (dict(depth=0), "depth must be a positive int"),
        (dict(d_model=30), "must be divisible by n_heads"),
        (dict(threshold=-1.0), "threshold must be a positive number"),
        (dict(optimizer="sgd"), "optimizer must be one of \\('adam', 'radam'\\), got 'sgd'"),
        (dict(init="xavier"), "init must be one of \\('default', 'bert'\\), got 'xavier'"),
    ],
)
def test_bad_config_gets_a_clear_error(kwargs, words):
    with pytest.raises(ValueError, match=words):
        RaceConfig(**kwargs)
    with pytest.raises(TypeError, match="cfg must be a RaceConfig"):
        race({"norm": "post"})


def test_model_shapes_and_placement():
    post, pre = RaceModel(RaceConfig(norm="post")), RaceModel(RaceConfig(norm="pre"))
    ids = torch.randint(0, 16, (3, 8))
    assert post(ids).shape == pre(ids).shape == (3, 8, 16)
    assert not post.layers[0].norm_first and pre.layers[0].norm_first
    assert isinstance(post.final_norm, torch.nn.Identity)
    assert not isinstance(pre.final_norm, torch.nn.Identity)


def test_race_is_deterministic_and_learns():
    cfg = RaceConfig(norm="pre", depth=2, max_steps=150, threshold=0.5)
    a, b = race(cfg), race(cfg)
    assert a.losses == b.losses and a.steps == b.steps
    assert a.steps is not None and a.losses[-1] < 0.5 < a.losses[0]
    assert len(a.grad_norms) == len(a.losses) == a.steps
    assert all(p.grad is not None for p in a.model.parameters())


def test_race_with_radam_differs_from_adam_and_learns():
    """RAdam is the optimiser chapter 06 uses to separate Adam's warm-up from post-LN's."""
    cfg = dict(norm="pre", depth=2, max_steps=150, threshold=0.5)
    adam, radam = race(RaceConfig(**cfg)), race(RaceConfig(optimizer="radam", **cfg))
    assert adam.losses[0] == radam.losses[0]  # the same model and batch at step 1
    assert adam.losses[1] != radam.losses[1]  # different first steps
    assert radam.steps is not None and radam.losses[-1] < 0.5


def test_bert_init_draws_n002_and_leaves_the_default_alone():
    """init="bert" (chapter 06's bench axis): linear weights, embeddings and positions from
    N(0, 0.02²), linear biases zero, LayerNorms untouched; the default draws what it always did."""
    torch.manual_seed(0)
    default_a = RaceModel(RaceConfig())
    torch.manual_seed(0)
    default_b = RaceModel(RaceConfig(init="default"))
    assert all(torch.equal(p, q) for p, q in zip(default_a.parameters(), default_b.parameters()))
    torch.manual_seed(0)
    bert = RaceModel(RaceConfig(init="bert", d_model=64, depth=4))
    weights = torch.cat(
        [m.weight.flatten() for m in bert.modules() if isinstance(m, torch.nn.Linear)]
        + [bert.embed.weight.flatten(), bert.pos.flatten()]
    )
    assert abs(weights.std().item() - 0.02) < 0.001 and abs(weights.mean().item()) < 0.001
    assert all((m.bias == 0).all() for m in bert.modules() if isinstance(m, torch.nn.Linear))
    norm = bert.layers[0].norm1
    assert (norm.weight == 1).all() and (norm.bias == 0).all()
    assert default_a.embed.weight.std() > 0.5  # PyTorch's N(0, 1) embeddings


def test_race_reports_never_when_the_threshold_is_not_reached():
    r = race(RaceConfig(depth=1, max_steps=3, threshold=1e-6))
    assert r.steps is None and len(r.losses) == 3


def test_bench_warmup_quick_writes_results(tmp_path):
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "warmup.py"), "--quick", "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    (path,) = tmp_path.glob("warmup-*-quick.json")
    results = json.loads(path.read_text())
    assert results["machine"] and results["command"].endswith("--quick")
    assert len(results["rows"]) == 8
    assert {r["init"] for r in results["rows"]} == {"default", "bert"}
    assert {(r["norm"], r["warmup"]) for r in results["rows"]} == {
        ("post", 0),
        ("post", 5),
        ("pre", 0),
        ("pre", 5),
    }
    assert path.with_suffix(".md").read_text().startswith("# Warm-up race")


def test_gradient_flow_widget_reprints_on_every_control_at_its_extremes(capsys):
    import matplotlib

    matplotlib.use("Agg")
    w = tfx.book.widgets.gradient_flow_widget()
    (depth, scale), (norm, residual) = w.children[0].children, w.children[1].children
    out = w.children[2]
    assert (depth.description, scale.description, norm.description, residual.description) == (
        "depth",
        "init scale",
        "norm placement",
        "residual",
    )
    assert (depth.max, 10**scale.min, 10**scale.max) == (  # a log slider's range is in exponents
        MAX_DEPTH,
        pytest.approx(INIT_SCALE_RANGE[0]),
        pytest.approx(INIT_SCALE_RANGE[1]),
    )

    def printed():
        return capsys.readouterr().out + "".join(o.get("text", "") for o in out.outputs)

    assert "12 layers · post-LN · residual on" in printed()
    residual.value = False
    assert "residual off" in printed()
    norm.value = "none"
    assert "no LN · residual off" in printed()
    depth.value = depth.max
    scale.value = 10**scale.max
    text = printed()
    assert f"{MAX_DEPTH} layers" in text and "init ×100" in text
    norm.value = "pre"
    scale.value = 10**scale.min
    depth.value = depth.min
    assert "1 layer · pre-LN + final LN · residual off · init ×0.01" in printed()


@pytest.mark.parametrize(
    "init,scale,std",
    [
        ("fan_in", 1.0, lambda i, o: i**-0.5),
        ("xavier", 1.0, lambda i, o: (2 / (i + o)) ** 0.5),
        ("he", 2.0, lambda i, o: 2 * (2 / i) ** 0.5),
        ("fixed", 0.02, lambda i, o: 0.02),
    ],
)
def test_stack_init_rules_draw_the_stated_std(init, scale, std):
    model = build_stack(StackConfig(depth=2, init=init, init_scale=scale))
    for name in ("attn.qkv", "ff.fc1", "ff.fc2"):
        lin = model.layers[0].get_submodule(name)
        want = std(lin.in_features, lin.out_features)
        assert lin.weight.std().item() == pytest.approx(want, rel=0.1), name


def test_stack_init_rule_is_validated_and_described():
    with pytest.raises(ValueError, match="init must be one of"):
        StackConfig(init="lecun")
    assert describe(StackConfig()).endswith("init ×1/√fan_in")  # the default names its rule
    assert describe(StackConfig(init="fixed", init_scale=0.02)).endswith("init fixed ×0.02")


def test_steps_by_cell_groups_the_bench_rows():
    from tfx.learn.warmup import steps_by_cell

    row = {"depth": 6, "lr": 1e-3, "norm": "post", "warmup": 0}
    bench = {
        "rows": [
            {**row, "init": "bert", "steps": 40},
            {**row, "init": "bert", "steps": None},
            {**row, "init": "default", "steps": 12},
        ]
    }
    cells = steps_by_cell(bench)
    assert cells == {
        "default": {(6, 1e-3, "post", 0): [12]},
        "bert": {(6, 1e-3, "post", 0): [40, None]},
    }
    with pytest.raises(TypeError, match="rows"):
        steps_by_cell({"grid": {}})
