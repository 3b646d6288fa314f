"""Around the training run: TensorBoard logs, evaluation and video, plots, several seeds, save and load."""

import json
import sys

import numpy as np
import pytest

from offpolicy import OffPolicyConfig, RunConfig, load_policy, train
from offpolicy.checkpoint import CheckpointError
from offpolicy.cli import main
from offpolicy.config import ConfigError
from offpolicy.evaluation import evaluate_policy, record_video
from offpolicy.plotting import group_runs, load_curves, plot_runs

TINY = ["--num-steps", "400", "--eval-interval", "200", "--eval-episodes", "2", "--num-envs", "2",
        "--autobatch-size", "2", "--warmup-steps", "100", "--quiet"]


def tiny_config(**changes):
    values = dict(num_steps=400, strategy=OffPolicyConfig(num_envs=2, autobatch_size=2, train_interval=8,
                                                          train_steps=4, eval_interval=200, eval_episodes=2,
                                                          warmup_steps=100, replay_buffer_size=1000))
    values.update(changes)
    return RunConfig(**values)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("tools") / "run"
    return train(tiny_config(tensorboard=True), run_dir=run_dir, quiet=True)


def test_tensorboard_logs_the_usual_names(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(trained.run_dir / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"rollout/ep_return", "rollout/ep_length", "rollout/exploration_rate", "train/loss", "train/q_values",
            "eval/mean_return", "eval/std_return", "eval/mean_length", "time/steps_per_second"} <= tags
    logged = [(e.step, round(e.value, 4)) for e in events.Scalars("eval/mean_return")]
    rows = [json.loads(line) for line in (trained.run_dir / "metrics" / "eval.jsonl").read_text().splitlines()]
    assert logged == [(row["step"], round(row["mean_return"], 4)) for row in rows]
    episodes = [json.loads(line) for line in (trained.run_dir / "metrics" / "train.jsonl").read_text().splitlines()
                if '"episode"' in line]
    assert len(events.Scalars("rollout/ep_return")) == len(episodes)


def test_missing_tensorboard_is_named_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ConfigError, match=r"pip install 'offpolicy\[tensorboard\]'"):
        train(tiny_config(tensorboard=True), run_dir=tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()


def test_eval_command_reports_mean_and_spread(trained, capsys):
    assert main(["eval", str(trained.run_dir), "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    best = trained.stats.best_eval_step
    assert f"checkpoint at step {best:,}" in out and "3 episodes: mean return" in out and "±" in out
    assert main(["eval", str(trained.run_dir), "--checkpoint", "last", "--episodes", "1"]) == 0
    assert "checkpoint at step 400" in capsys.readouterr().out
    assert main(["eval", str(trained.run_dir), "--checkpoint", "123"]) == 2
    assert "has no checkpoint at step 123; it has: 200, 400" in capsys.readouterr().err


def test_evaluation_is_deterministic_for_a_seed(trained):
    policy = load_policy(trained.run_dir).policy
    first = evaluate_policy(policy, "CartPole-v1", episodes=3, seed=5)
    assert first.returns == evaluate_policy(policy, "CartPole-v1", episodes=3, seed=5).returns
    assert first.lengths == [int(r) for r in first.returns]  # CartPole pays 1 per step


@pytest.mark.parametrize("encoder", [True, False])
def test_video_records_every_frame(trained, tmp_path, monkeypatch, encoder):
    if not encoder:
        monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)
    policy = load_policy(trained.run_dir).policy
    path, result, frames = record_video(policy, "CartPole-v1", tmp_path / "cartpole.mp4", episodes=2)
    assert path.suffix == (".mp4" if encoder else ".gif") and path.stat().st_size > 1000
    assert frames == sum(result.lengths) + 2  # each episode's first frame, then one per step

    import imageio.v3 as iio

    assert iio.imread(path, index=0).shape[:2] == (400, 600)  # CartPole's 600x400 frames


def test_save_and_load_act_the_same(trained, tmp_path):
    saved = trained.save(tmp_path / "policy")
    loaded = load_policy(saved)
    assert loaded.step is None and loaded.config.env == "CartPole-v1"
    observations = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    assert [trained.policy.predict(o) for o in observations] == [loaded.policy.predict(o) for o in observations]
    assert isinstance(loaded.policy.predict(observations[0]), int)
    with pytest.raises(CheckpointError, match="not a run directory"):
        load_policy(tmp_path)


def test_seeds_run_into_sibling_folders_with_a_table(tmp_path, capsys):
    assert main(["train", "--seeds", "3", "4", "--run-dir", str(tmp_path / "sweep"), *TINY]) == 0
    out = capsys.readouterr().out
    assert "2 seeds" in out and "best evaluation return: mean" in out
    for seed in (3, 4):
        assert json.loads((tmp_path / "sweep" / f"s{seed}" / "config.json").read_text())["seed"] == seed
    assert main(["train", "--seeds", "1", "1", "--run-dir", str(tmp_path / "again"), *TINY]) == 2


def test_plot_groups_seeds_and_tells_configs_apart(tmp_path):
    for seed in (0, 1):
        train(tiny_config(seed=seed), run_dir=tmp_path / "a" / f"s{seed}", quiet=True)
    train(tiny_config(hyperparameters={"lr": 1e-3}), run_dir=tmp_path / "b", quiet=True)
    groups = group_runs([load_curves(p) for p in [tmp_path / "a" / "s0", tmp_path / "a" / "s1", tmp_path / "b"]])
    assert sorted(len(members) for members in groups.values()) == [1, 2]
    assert any("2 seeds" in label for label in groups) and any("lr=0.001" in label for label in groups)
    output = plot_runs([tmp_path / "a", tmp_path / "b"], tmp_path / "curves.png", title="test")
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ConfigError, match="is not a run directory and holds none"):
        plot_runs([tmp_path / "nothing"], tmp_path / "x.png")


@pytest.mark.parametrize("mode", ["terminal", "pipe", "quiet"])
def test_progress_display_per_output(monkeypatch, mode):
    import io

    import offpolicy.training
    from offpolicy.display import ProgressDisplay

    stream = io.StringIO()
    monkeypatch.setattr(offpolicy.training, "ProgressDisplay",
                        lambda quiet=False: ProgressDisplay(mode == "quiet", stream=stream, live=mode == "terminal"))
    train(tiny_config(), save=False)
    out = stream.getvalue()
    if mode == "quiet":
        assert out == ""
    elif mode == "pipe":
        lines = out.splitlines()
        assert len(lines) == 2 and all(line.startswith("step ") and "| eval " in line for line in lines)
        assert "\x1b" not in out
    else:
        assert "best eval" in out and "episode returns" in out and "400/400" in out
        assert any(block in out for block in "▁▂▃▄▅▆▇█")


def test_sparkline_spans_lowest_to_highest():
    from offpolicy.display import sparkline

    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([5, 5, 5]) == "▅▅▅" and sparkline([]) == ""
    assert len(sparkline(range(100), width=10)) == 10
