"""SAC and TD3: spaces, action scaling, the maths of their updates, save and restore."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from offpolicy.agents import SACConfig, SACLearner, TD3Config, TD3Learner
from offpolicy.agents.common import ActionScale
from offpolicy.agents.networks import FlattenEncoder, TwinCritic
from offpolicy.agents.sac import squashed_sample
from offpolicy.buffer import TransitionBuffer
from offpolicy.checkpoint import load_state, save_state
from offpolicy.config import ConfigError
from offpolicy.envs import EnvError
from offpolicy.steps import StepBatch

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACTIONS = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
LEARNERS = [(SACLearner, SACConfig), (TD3Learner, TD3Config)]
DELAY_ONE = {TD3Learner: {"policy_delay": 1}}  # TD3 moves its actor on the first update too


def filled_buffer(seed=0, size=400):
    rng = np.random.default_rng(seed)
    buffer = TransitionBuffer(1000, seed=seed)
    buffer.push(StepBatch.of_transitions(
        rng.normal(size=(size, 3)).astype(np.float32),
        rng.normal(size=(size, 3)).astype(np.float32),
        rng.uniform(ACTIONS.low, ACTIONS.high, size=(size, 2)).astype(np.float32),
        rng.normal(size=size).astype(np.float32),
        rng.random(size) < 0.1,
    ))
    return buffer


@pytest.mark.parametrize("learner, config", LEARNERS)
def test_unsupported_spaces_are_named(learner, config):
    name = learner.__name__[:3]
    with pytest.raises(EnvError, match=rf"{name} needs a bounded Box action space, got Discrete"):
        learner(OBS, gym.spaces.Discrete(3))
    with pytest.raises(EnvError, match="finite action bounds"):
        learner(OBS, gym.spaces.Box(-np.inf, np.inf, (2,)))
    with pytest.raises(ConfigError, match="gamma"):
        learner(OBS, ACTIONS, config(gamma=2.0))


@pytest.mark.parametrize("learner, config", LEARNERS)
def test_actions_respect_bounds_and_deterministic_is_repeatable(learner, config):
    policy = learner(OBS, ACTIONS, config(hidden=16)).policy()
    observations = torch.randn(500, 3) * 5
    actions = policy.act(observations, deterministic=False).actions
    assert actions.shape == (500, 2)
    low, high = torch.as_tensor(ACTIONS.low), torch.as_tensor(ACTIONS.high)
    assert ((actions >= low) & (actions <= high)).all()
    assert actions.std(0).min() > 0.01
    first = policy.act(observations, deterministic=True).actions
    assert torch.equal(first, policy.act(observations, deterministic=True).actions)


def test_action_scale_round_trip():
    scale = ActionScale(ACTIONS)
    unit = torch.tensor([[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0]])
    env = scale.to_env(unit)
    assert torch.allclose(env, torch.tensor([[-2.0, 0.0], [0.0, 0.5], [2.0, 1.0]]))
    assert torch.allclose(scale.to_unit(env), unit)


def test_squashed_log_prob_matches_torch_distributions():
    torch.manual_seed(0)
    actor = torch.nn.Linear(3, 4)
    observations = torch.randn(64, 3)
    generator = torch.Generator().manual_seed(3)
    actions, log_prob = squashed_sample(actor, observations, generator)
    mean, log_std = actor(observations).chunk(2, dim=-1)
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.clamp(-20, 2).exp()), [torch.distributions.TanhTransform()]
    )
    clipped = actions.clamp(-1 + 1e-6, 1 - 1e-6)
    assert torch.allclose(log_prob, dist.log_prob(clipped).sum(-1), atol=1e-3)


def test_twin_critic_is_two_independent_mlps():
    critic = TwinCritic(FlattenEncoder(OBS), 2, [8, 8])
    observations, actions = torch.randn(10, 3), torch.randn(10, 2)
    q = critic(observations, actions)
    assert q.shape == (2, 10)
    for member in range(2):
        hidden = torch.cat((observations, actions), 1)
        for index, (w, b) in enumerate(zip(critic.weights, critic.biases)):
            hidden = hidden @ w[member] + b[member]
            if index < 2:
                hidden = hidden.relu()
        assert torch.allclose(q[member], hidden.squeeze(-1), atol=1e-6)
    assert not torch.allclose(q[0], q[1])


def test_sac_tunes_entropy_coefficient_and_reports_it():
    learner = SACLearner(OBS, ACTIONS, SACConfig(hidden=16))
    buffer = filled_buffer()
    outputs = [learner.train(buffer.sample(64)) for _ in range(20)]
    assert outputs[0].metrics["entropy_coef"] != outputs[-1].metrics["entropy_coef"]
    fixed = SACLearner(OBS, ACTIONS, SACConfig(hidden=16, entropy_coef=0.2))
    assert all(float(fixed.train(buffer.sample(64)).metrics["entropy_coef"]) == pytest.approx(0.2) for _ in range(3))


def test_sac_update_uses_alpha_from_before_its_own_entropy_step():
    """As in Stable-Baselines3 and CleanRL: the critic and actor losses of an update use the alpha
    it started with, so the first update reports the starting value and the second the stepped one."""
    learner = SACLearner(OBS, ACTIONS, SACConfig(hidden=16, initial_entropy_coef=0.5))
    buffer = filled_buffer()
    first, second = (float(learner.train(buffer.sample(64)).metrics["entropy_coef"]) for _ in range(2))
    assert first == pytest.approx(0.5, abs=1e-7)
    assert second != pytest.approx(0.5, abs=1e-7)


def test_td3_updates_actor_every_policy_delay_steps():
    learner = TD3Learner(OBS, ACTIONS, TD3Config(hidden=16, policy_delay=3))
    buffer = filled_buffer()
    snapshots, reported = [], []
    for _ in range(6):
        reported.append("actor_loss" in learner.train(buffer.sample(64)).metrics)
        snapshots.append([p.clone() for p in learner.actor.parameters()])
    changed = [not all(torch.equal(a, b) for a, b in zip(before, after))
               for before, after in zip(snapshots, snapshots[1:])]
    assert changed == [False, True, False, False, True]
    assert reported == [False, False, True, False, False, True]  # only the updates that computed it


@pytest.mark.parametrize("learner, config", LEARNERS)
def test_critic_lr_sets_the_critics_step_apart_from_the_actors(learner, config):
    """Adam's first step moves each weight by about its learning rate, so one update with critic_lr 1e-2
    and lr 1e-4 moves the critics a hundred times further than the actor."""
    agent = learner(OBS, ACTIONS, config(hidden=16, lr=1e-4, critic_lr=1e-2, **DELAY_ONE.get(learner, {})))
    critic, actor = ([p.clone() for p in net.parameters()] for net in (agent.critic, agent.actor))
    agent.train(filled_buffer().sample(64))
    critic_step = max(float((a.detach() - b.detach()).abs().max()) for a, b in zip(agent.critic.parameters(), critic))
    actor_step = max(float((a.detach() - b.detach()).abs().max()) for a, b in zip(agent.actor.parameters(), actor))
    assert critic_step == pytest.approx(1e-2, rel=0.05) and actor_step == pytest.approx(1e-4, rel=0.05)
    with pytest.raises(ConfigError, match="critic_lr must be 0"):
        learner(OBS, ACTIONS, config(critic_lr=-1.0))


@pytest.mark.parametrize("learner, config", LEARNERS)
def test_critic_loss_is_weighted_per_transition(learner, config):
    """Importance weights scale each transition's critic loss: weighted 0, a batch teaches the critics
    nothing (Adam's step is 0 for gradients that were always 0); the TD errors come one per transition."""
    agent = learner(OBS, ACTIONS, config(hidden=16), seed=2)
    batch = filled_buffer().sample(64)
    batch.weights = torch.zeros(64)
    before = [p.clone() for p in agent.critic.parameters()]
    output = agent.train(batch)
    assert all(torch.equal(a, b) for a, b in zip(before, agent.critic.parameters()))
    assert float(output.metrics["loss"]) == 0.0 and output.td_errors.shape == (64,)
    assert (output.td_errors > 0).all()


@pytest.mark.parametrize("learner, config", LEARNERS)
def test_saved_and_restored_learner_trains_identically(tmp_path, learner, config):
    a = learner(OBS, ACTIONS, config(hidden=16), seed=1)
    buffer = filled_buffer(2)
    for _ in range(5):
        a.train(buffer.sample(32))
    save_state(tmp_path, "learner", a.state_dict())
    b = learner(OBS, ACTIONS, config(hidden=16), seed=7)
    b.load_state_dict(load_state(tmp_path, "learner"))
    for _ in range(5):
        batch = buffer.sample(32)
        a.train(batch)
        b.train(batch)
    state_a, state_b = a.state_dict(), b.state_dict()
    for part in ("actor", "critic", "target_critic"):
        for name, tensor in state_a[part].items():
            assert torch.equal(tensor, state_b[part][name]), (part, name)


@pytest.mark.parametrize("learner, config", LEARNERS)
def test_exploration_state_survives_a_checkpoint(tmp_path, learner, config):
    a = learner(OBS, ACTIONS, config(hidden=16), seed=1).policy()
    observations = torch.randn(8, 3)
    a.act(observations, deterministic=False)
    save_state(tmp_path, "exploration", a.exploration_state())
    b = learner(OBS, ACTIONS, config(hidden=16), seed=1).policy()
    b.load_exploration_state(load_state(tmp_path, "exploration"))
    assert torch.equal(a.act(observations, False).actions, b.act(observations, False).actions)


@pytest.mark.parametrize("learner, config", LEARNERS)
def test_seeding_exploration_gives_each_copy_its_own_draws(learner, config):
    policy = learner(OBS, ACTIONS, config(hidden=16), seed=1).policy()
    observations = torch.randn(8, 3)
    drawn = {}
    for seed in (1, 2, 1):
        policy.seed_exploration(seed)
        drawn.setdefault(seed, []).append(policy.act(observations, False).actions)
    assert torch.equal(*drawn[1])
    assert not torch.equal(drawn[1][0], drawn[2][0])


@pytest.mark.parametrize("learner, config", LEARNERS)
def test_random_steps_act_uniformly_over_the_bounds_then_the_policy_acts(learner, config):
    """The run's first random_steps actions are uniform over the action bounds whatever the networks (as
    Stable-Baselines3's and CleanRL's before learning starts); from then on, and in a run resumed past
    them, the policy acts."""
    policies = [learner(OBS, ACTIONS, config(hidden=16, random_steps=3_000), seed=seed).policy()
                for seed in (1, 2)]
    observations = torch.randn(1_000, 3)
    for policy in policies:
        policy.seed_exploration(7)
    low, high = ACTIONS.low, ACTIONS.high
    for _ in range(3):
        first, second = (policy.act(observations, deterministic=False).actions for policy in policies)
        assert torch.equal(first, second)
        actions = first.numpy()
        assert ((actions >= low) & (actions <= high)).all()
        np.testing.assert_allclose(actions.mean(0), (low + high) / 2, atol=0.05 * (high - low).max())
        np.testing.assert_allclose(actions.std(0), (high - low) / np.sqrt(12), rtol=0.08)
    first, second = (policy.act(observations, deterministic=False).actions for policy in policies)
    assert not torch.allclose(first, second, atol=0.05)
    resumed = learner(OBS, ACTIONS, config(hidden=16, random_steps=3_000), seed=1).policy()
    resumed.set_env_steps(3_000)
    assert resumed.exploration.random_start(1) is False
    with pytest.raises(ConfigError, match="random_steps must be 0 or more"):
        learner(OBS, ACTIONS, config(random_steps=-1))


def torch_adam(parameters):
    return torch.optim.Adam(parameters, lr=1e-2, fused=True)


def torch_rmsprop(parameters):
    return torch.optim.RMSprop(parameters, lr=1e-2, alpha=0.95, eps=0.01, centered=True)


@pytest.mark.parametrize("lean_class, torch_optimizer, moment, rtol", [
    ("LeanAdam", torch_adam, "exp_avg", 0.0),  # the same fused kernel: equal to the bit
    ("LeanRMSProp", torch_rmsprop, "grad_avg", 1e-5),
])
def test_lean_optimizers_match_torch_and_its_checkpoints(lean_class, torch_optimizer, moment, rtol):
    """Each lean optimiser takes torch's steps, and each loads the other's `state_dict`."""
    from offpolicy.agents import optim

    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    lean = copy.deepcopy(reference)
    plain = torch_optimizer(reference.parameters())
    fast = getattr(optim, lean_class)(lean.parameters(), 1e-2)
    for step in range(30):
        inputs = torch.randn(16, 3)
        for model, optimizer in ((reference, plain), (lean, fast)):
            optimizer.zero_grad(set_to_none=True)
            model(inputs).pow(2).mean().backward()
            optimizer.step()
        if step == 10:  # a restored optimiser keeps stepping the same way
            fast.load_state_dict(copy.deepcopy(plain.state_dict()))
    for a, b in zip(reference.parameters(), lean.parameters()):
        assert torch.allclose(a, b, rtol=rtol, atol=rtol / 100)
    saved = fast.state_dict()
    assert saved["state"][0]["step"] == plain.state_dict()["state"][0]["step"] == 30
    plain.load_state_dict(saved)  # and the other way round
    assert torch.equal(plain.state_dict()["state"][1][moment], saved["state"][1][moment])


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_compiled_rmsprop_takes_the_multi_tensor_steps(memory_format):
    """The compiled step computes what the multi-tensor calls do, to float32 rounding, convolutions in
    either memory layout included, and hands over to them through a checkpoint."""
    from offpolicy.agents.optim import LeanRMSProp

    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                    torch.nn.Linear(8 * 6 * 6, 5)).to(memory_format=memory_format)
    compiled = copy.deepcopy(reference)
    plain_optimizer = LeanRMSProp(reference.parameters(), 1e-2, compiled=False)
    compiled_optimizer = LeanRMSProp(compiled.parameters(), 1e-2, compiled=True)
    for step in range(40):
        inputs = torch.randn(16, 4, 8, 8).to(memory_format=memory_format)
        for model, optimizer in ((reference, plain_optimizer), (compiled, compiled_optimizer)):
            optimizer.zero_grad(set_to_none=True)
            model(inputs).pow(2).mean().backward()
            optimizer.step()
        if step == 20:
            compiled_optimizer.load_state_dict(copy.deepcopy(plain_optimizer.state_dict()))
    for a, b in zip(reference.parameters(), compiled.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    for a, b in zip(plain_optimizer.square_avgs, compiled_optimizer.square_avgs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-9)


def test_lean_rmsprop_before_its_first_step_saves_what_torch_saves():
    from offpolicy.agents.optim import LeanRMSProp

    layer = torch.nn.Linear(3, 2)
    assert LeanRMSProp(layer.parameters(), 1e-2).state_dict() == torch_rmsprop(layer.parameters()).state_dict()


@pytest.mark.parametrize("optimizer", ["adam-fused", "adam-fallback", "rmsprop-compiled", "rmsprop-multi-tensor"])
def test_grad_scale_divides_the_gradients_first(optimizer):
    """How the DQN fast path clips the gradient norm: inside Adam's kernel or RMSProp's compiled loop, or
    before the fallback's or the multi-tensor calls' step."""
    from offpolicy.agents.optim import LeanAdam, LeanRMSProp

    def make(parameters):
        if optimizer.startswith("rmsprop"):
            return LeanRMSProp(parameters, 1e-2, compiled=optimizer == "rmsprop-compiled")
        lean = LeanAdam(parameters, 1e-2)
        if optimizer == "adam-fallback":
            lean._fallback = torch.optim.Adam(lean.params, lr=1e-2)
        return lean

    torch.manual_seed(0)
    scaled, divided = (torch.nn.Linear(3, 4) for _ in range(2))
    divided.load_state_dict(scaled.state_dict())
    optimizers = [make(model.parameters()) for model in (scaled, divided)]
    for _ in range(5):
        inputs = torch.randn(8, 3)
        for model in (scaled, divided):
            model.zero_grad(set_to_none=True)
            model(inputs).pow(2).sum().backward()
        for p in divided.parameters():
            p.grad /= 4.0
        optimizers[0].step(torch.tensor(4.0))
        optimizers[1].step()
    # the steps barely depend on the gradients' scale; the first moments do
    moment = "grad_avg" if optimizer.startswith("rmsprop") else "exp_avg"
    states = [optimizer.state_dict()["state"] for optimizer in optimizers]
    for index, (a, b) in enumerate(zip(scaled.parameters(), divided.parameters())):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-7)
        assert torch.allclose(states[0][index][moment], states[1][index][moment], rtol=1e-6, atol=1e-8)
