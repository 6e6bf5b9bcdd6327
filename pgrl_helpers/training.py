"""The training loop: ``run_policy_gradient(config)`` -> ``History``.

The defaults (``TrainConfig()``) are the lecture's run: GRPO (Shao et al. 2024, DeepSeekMath,
arXiv:2402.03300) and PPO (Schulman et al. 2017, arXiv:1707.06347) with these parts left
out, each a field away:

1. No KL term (``kl_coef=0``): no reference model. The runs are short and start from random
   weights, so there is no pretrained policy to stay near. GRPO adds beta x k3 to the loss
   (notebook 05; ``kl_coef=0.04``, ``kl_estimator="k3"``).
2. No ratio and no clip (``loss_mode="naive"``: -log pi x delta, i.e. REINFORCE). At the
   first step on a batch the ratio is 1 and all three losses have the same gradient; the
   ratio and PPO's clip only matter once a batch is reused (notebook 04; ``"clipped"``).
3. Centred rewards without the std (``deltas_mode="centered_rewards"``: R - mean R, as in
   nanochat and Dr. GRPO). GRPO divides by the group's std, which up-weights near-tied and
   very easy or hard groups (notebook 06; ``"normalized_rewards"``).
4. 10 optimizer steps per batch (``num_steps_per_epoch=10``), the lecture's reuse of each
   sampled batch. With the naive loss those later steps ignore that the policy has moved
   (the drift PPO's ratio corrects). DeepSeekMath takes 1 step per batch, PPO 3 to 15 epochs.
5. No value model (``advantage_estimator="group"``): the group mean is the baseline, as in
   GRPO; PPO's critic with GAE is ``"gae"`` (notebook 10).
6. No entropy bonus (``entropy_coef=0``, PPO's c2 term) and no per-response length
   normalisation: the token mean (``loss_aggregation="token_mean"``) equals GRPO's
   1/|o_i| mean while every response has the same length (notebook 08 has varying ones).
7. The lecture's 3 fixed prompts (``prompt_source="lecture"``), G = 10, Adam at 1e-3.

The loop talks to three interfaces and never asks which model or task it runs:

* a **Task** (``config.build_task()``, or ``task=``; see ``pgrl_helpers.task``): prompts,
  rewards, the exact-answer check, the held-out key;
* a **Policy** (``config.build_policy()``, or ``policy=``; see ``pgrl_helpers.policy``):
  sample, per-token log-probs, entropy, greedy decoding;
* a **Rollout** (``pgrl_helpers.rollout``): one epoch's prompts, responses, mask,
  rewards, deltas and frozen log-probs.

The loop follows the policy's device (``rollout.policy_device``: a CUDA or MPS model trains
where it is): the task draws prompts on the CPU, the loop moves them to the policy's device,
and each scored batch is moved there once (``Rollout.to``, in ``Resampler.draw``), so the
policy, the estimator and the loss see one device; the sampling generator lives there too.
The held-out prompts are moved there for evaluation.

Per epoch, the four steps the lecture names:

1. refresh the frozen reference model on schedule (only when the KL term is on);
2. sample G responses per prompt and score them (rewards, once);
3. freeze the old log-probs (for the ratio) and the reference log-probs, then make the
   deltas (an estimator may read those log-probs: a KL penalty in the reward);
4. take ``num_steps_per_epoch`` optimizer steps on that batch, then let the estimator
   learn from it (``estimator.after_epoch``: PPO's critic steps; nothing for GRPO).

Five named extension points, all in ``pgrl_helpers.registry``, each a dict keyed by a
``TrainConfig`` field: ``TASKS`` (``task``), ``MODELS`` (``model``), ``ROLLOUT_SOURCES``
(``rollout_source``), ``BATCH_FILTERS`` (``batch_filter``) and ``ADVANTAGE_ESTIMATORS``
(``advantage_estimator``). The policy objective is one call, ``objective.surrogate_loss``:
``loss_mode`` picks the loss, and the ratio's level (``importance_sampling_level``) is one
of its options.

Taught in notebook 07; also used in notebooks 04, 08, 09, 10, 11, 12, 13, 15, 16.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from tqdm.auto import tqdm

from ._validate import check_number
from .config import TrainConfig
from .history import History, Run
from .infra import PhaseClock
from .kl import build_kl_controller, kl_per_response
from .losses import compute_ratio
from .masking import aggregate_loss
from .objective import surrogate_loss
from .policy import check_policy_fits
from .registry import (
    BATCH_FILTERS,
    ROLLOUT_SOURCES,
    OnPolicySource,
    build_estimator,
)
from .rollout import Resampler, Rollout, frac_reward_zero_std, policy_device


class NonFiniteError(FloatingPointError):
    """The loss, rewards or gradient became NaN or inf during training."""


def run_policy_gradient(
    config: TrainConfig,
    callback: Callable[[int, History], object] | None = None,
    policy: torch.nn.Module | None = None,
    task=None,
    *,
    score_test: bool = True,
    resume: dict | None = None,
) -> History:
    """Train a policy with GRPO-style policy gradients; return the history.

    The history is the records and counts (``History``); the trained policy, the reference,
    the estimator and the held-out prompts are ``history.run`` (``Run``).
    ``callback(epoch, history)`` runs after every epoch (and its evaluation, if any);
    returning True or "stop" ends the run. ``policy`` continues training a given policy
    (it must implement ``Policy`` and fit the task's prompts and the config's response
    length) instead of building one; ``task`` (a ``Task``, e.g. ``hf.real_lm_task.
    RealLMSortTask``) is used instead of ``config.build_task()``. The config's fields that
    only build the toy task / model are then not checked (``TrainConfig.validate``), and
    with a given task the policy's own ``response_length`` is the run's. ``score_test``
    False: the held-out evaluations score validation only (their ``test_*`` entries are
    None), so a caller that scores the test split itself once never has it computed
    earlier. ``resume``: a ``loop_state(history)`` saved from an earlier call with the same
    config, policy and task (e.g. in a callback that then stopped the run): the run continues
    after that state's last epoch and gives the history an uninterrupted run would have
    (records, counts; the phase timings aside). The same config (seed included) gives an
    identical history.

    Taught in notebook 07; also used in notebooks 08, 09, 10, 11, 12, 13, 15, 16.
    """
    config.validate(builds_task=task is None, builds_policy=policy is None)
    if task is not None and config.advantage_estimator == "gae":
        raise ValueError(
            "advantage_estimator 'gae' builds its critic from the config's toy task and model "
            "fields (vocab_size, prompt_length, embedding_dim, ...): with a given task, use "
            "'group'"
        )
    threads_before = torch.get_num_threads()
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    try:
        return _train(config, callback, policy, task, score_test, resume)
    finally:
        torch.set_num_threads(threads_before)


def _train(config: TrainConfig, callback, policy, task=None, score_test=True, resume=None):
    """The loop (after validation and thread setup): read it top to bottom."""
    policy = config.build_policy() if policy is None else policy
    check_policy_fits(policy, *_shapes(config, policy, task))
    task = config.build_task() if task is None else task
    policy.train()
    device = policy_device(policy)  # every batch the policy, estimator and loss see goes here
    run = Run(model=policy)  # what is running: the objects the loop reads back
    history = History(config, run)  # what happened: the records and the counts
    _hold_out(run, history, task, config)  # validation + test, disjoint by key
    source = ROLLOUT_SOURCES[config.rollout_source](policy, config)
    batch_filter = BATCH_FILTERS[config.batch_filter]
    estimator = build_estimator(config.advantage_estimator, policy, config)
    run.advantage_estimator = estimator
    kl_coef = build_kl_controller(config)  # beta: fixed, or adapted to config.kl_target
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate)
    prompt_generator = torch.Generator().manual_seed(config.seed)  # the task draws on the CPU
    sample_generator = torch.Generator(device=device).manual_seed(config.seed + 1_000_003)
    counters = {"step": 0, "responses_sampled": 0}
    draw = Resampler(task, source, history, prompt_generator, sample_generator, counters, device)
    run.score_test, run.optimizer = score_test, optimizer
    run.generators = {"prompt": prompt_generator, "sample": sample_generator}
    run.counters = counters
    first = _resume(resume, run, history, counters)  # 0, or the epoch a saved run stopped at

    if first == 0 and _evaluate_on_schedule(run, history, task, config, 0, counters):
        history.stop_reason = "target"
        return history
    clock = PhaseClock(config.profile_time)
    bar = tqdm(range(first, config.num_epochs), desc="epochs", disable=not config.progress)
    for epoch in bar:
        clock.start()
        # 1. refresh the frozen reference model on schedule (only when the KL term is on)
        if config.kl_coef > 0 and epoch % config.compute_ref_model_period == 0:
            run.ref_model = _freeze(policy)
            history.ref_refresh_epochs.append(epoch)

        # 2. sample G responses per prompt; score them once (deltas: after step 3). The batch
        # comes back on the policy's device (``Resampler.draw``, the one place it moves).
        where = f"rewards at epoch {epoch}, step {counters['step']}"
        rollout = draw.draw(config.batch_prompts, where, clock)  # prompts, responses, mask, rewards
        rollout.resample = draw
        rollout = batch_filter(rollout, config)
        clock.lap("reward")

        # 3. frozen log-probs of the sampling policy and of the reference model; deltas.
        # With one optimizer step per batch the old log-probs equal the first step's
        # log-probs: they are taken from that forward pass (detached) instead of a second
        # one, as TRL's GRPOTrainer does at num_iterations=1 (``_reuses_step_log_probs``).
        reuse = _reuses_step_log_probs(config, source)
        with torch.no_grad():
            rollout.old_log_probs = None if reuse else source.old_log_probs(rollout)  # [b, t, pos]
            if config.kl_coef > 0:
                rollout.ref_log_probs = run.ref_model.log_probs(rollout.prompts, rollout.responses)
            rollout.token_entropy = _token_entropy_if_needed(policy, rollout, config)
        rollout.deltas = estimator(rollout, config)  # [batch, trial] or [batch, trial, pos]
        clock.lap("log_probs")

        # 4. several optimizer steps on this one batch
        for inner_step in range(config.num_steps_per_epoch):
            where = (epoch, counters["step"])
            log_probs = policy.log_probs(rollout.prompts, rollout.responses)
            _check_finite(log_probs.detach(), "log-probs", *where)
            if reuse:  # the policy has not moved since sampling: pi_old = pi_theta, detached
                rollout.old_log_probs = log_probs.detach()
            loss, loss_metrics = surrogate_loss(log_probs, rollout, config)  # [batch, trial, pos]
            loss = aggregate_loss(rollout.weighted(loss), rollout.mask, config.loss_aggregation)
            kl = None
            if config.kl_coef > 0:
                kl = kl_per_response(
                    log_probs, rollout.ref_log_probs, config.kl_estimator, rollout.mask
                )
                loss = loss + kl_coef.penalty(kl)  # beta x KL, one beta per epoch
            with torch.set_grad_enabled(config.entropy_coef > 0):
                entropy = policy.mean_entropy(rollout.prompts, rollout.responses, rollout.mask)
            if config.entropy_coef > 0:
                loss = loss - config.entropy_coef * entropy
            _check_finite(loss.detach(), "loss", *where)
            optimizer.zero_grad()
            loss.backward()
            grad_norm = _grad_norm(policy, *where)  # checked finite
            record = _step_record(rollout, log_probs, loss, kl, entropy, grad_norm, loss_metrics)
            optimizer.step()
            source.after_optimizer_step()
            head = {"kind": "step", "epoch": epoch, "step": counters["step"]}
            history.append(head | {"inner_step": inner_step} | record)
            _check_finite_parameters(policy, *where)
            counters["step"] += 1
        if config.kl_coef > 0:  # Ziegler et al.: beta adapts once a batch, from its 1st step's KL
            kl_coef.update(history[-config.num_steps_per_epoch]["kl"], rollout.num_responses)
        estimator.after_epoch(rollout)  # e.g. the critic's steps (advantage_estimator 'gae')
        clock.lap("optimizer")

        bar.set_postfix(mean_reward=f"{record['mean_reward']:.3f}", refresh=False)
        if _evaluate_on_schedule(run, history, task, config, epoch + 1, counters):
            history.stop_reason = "target"
        clock.stop("evaluation", history)
        if callback is not None and history.stop_reason is None:
            if callback(epoch, history) in (True, "stop"):
                history.stop_reason = "callback"
        if history.stop_reason is not None:
            break
    bar.close()
    history.stop_reason = history.stop_reason or "max_epochs"  # every epoch ran
    return history


# --------------------------------------------------------------------------------------
# The pieces the loop calls
# --------------------------------------------------------------------------------------


def loop_state(history: History) -> dict:
    """What ``run_policy_gradient(..., resume=...)`` needs to continue a run after its last
    epoch (save it with ``torch.save``): the epochs done, the policy's trainable parameters,
    the Adam state, the generators' and torch's RNG states, the counters, the records and the
    history's counts. Only for runs without a frozen reference (``kl_coef`` 0), with the
    'group' estimator and the on-policy source: their other state is rebuilt identically."""
    config, run = history.config, history.run
    _check_resumable(config)
    steps = history.steps()
    policy = run.model
    return {
        "epochs_done": steps[-1]["epoch"] + 1 if steps else 0,
        "parameters": {
            name: p.detach().clone() for name, p in policy.named_parameters() if p.requires_grad
        },
        "optimizer": run.optimizer.state_dict(),
        "generators": {k: g.get_state() for k, g in run.generators.items()},
        "torch_rng": torch.get_rng_state(),
        "counters": dict(run.counters),
        "records": [dict(r) for r in history],
        "history": {
            k: v for k, v in vars(history).items() if k not in ("config", "run", "stop_reason")
        },
    }


def _check_resumable(config: TrainConfig) -> None:
    if config.kl_coef > 0 or config.advantage_estimator != "group":
        raise ValueError(
            "a run can be resumed only without a KL term (kl_coef 0) and with the 'group' "
            "estimator: the reference model and the critic are not saved"
        )
    if config.rollout_source != "on_policy" or config.batch_filter != "none":
        raise ValueError("a run can be resumed only with rollout_source 'on_policy' and "
                         "batch_filter 'none'")  # fmt: skip


def _resume(state: dict | None, run, history: History, counters: dict) -> int:
    """Load a ``loop_state`` into the freshly built run; return the first epoch to run."""
    if state is None:
        return 0
    _check_resumable(history.config)
    policy = run.model
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    if set(state["parameters"]) != trainable:
        raise ValueError("the saved state's parameters are not this policy's trainable ones")
    with torch.no_grad():
        named = dict(policy.named_parameters())
        for name, value in state["parameters"].items():
            named[name].copy_(value)
    run.optimizer.load_state_dict(state["optimizer"])
    for name, generator in run.generators.items():
        generator.set_state(state["generators"][name])
    torch.set_rng_state(state["torch_rng"])
    counters.update(state["counters"])
    history.extend(dict(r) for r in state["records"])
    vars(history).update(state["history"])
    return state["epochs_done"]


def _step_record(rollout: Rollout, log_probs, loss, kl, entropy, grad_norm, loss_metrics) -> dict:
    """The metrics of one optimizer step (names and meanings in ``METRICS``).

    ``loss_metrics`` are the objective's own (``losses.LOSS_FUNCTIONS``): ``clip_fraction``
    only from a loss that clips (None otherwise), ``weight_clip_fraction`` from CISPO.
    """
    with torch.no_grad():
        ratio = compute_ratio(log_probs.detach(), rollout.old_log_probs)
        record = {
            "loss": loss.item(),
            "mean_reward": rollout.rewards.mean().item(),
            "kl": None if kl is None else kl.item(),
            "clip_fraction": None,
            "entropy": entropy.item(),
            "ratio_mean": ratio[rollout.mask > 0].mean().item(),
            "grad_norm": grad_norm.item(),
            "response_length": rollout.mask.sum(dim=-1).mean().item(),
            "frac_reward_zero_std": frac_reward_zero_std(rollout.rewards),
        }
        return record | loss_metrics | rollout.metrics


def _token_entropy_if_needed(policy, rollout: Rollout, config: TrainConfig):
    """Per-slot entropy float[batch, trial, pos] for the high-entropy-token mask, else None."""
    if config.top_entropy_quantile < 1:
        return policy.token_entropy(rollout.prompts, rollout.responses)
    return None


def _reuses_step_log_probs(config: TrainConfig, source) -> bool:
    """True when the old log-probs can be the first step's own log-probs, detached.

    That holds when the trained policy itself sampled the batch (``OnPolicySource``), only
    one optimizer step is taken on it, and the estimator does not read the old log-probs
    before that step (the 'gae' estimator's KL-in-reward does). TRL's GRPOTrainer does the
    same at ``num_iterations=1`` (``old_per_token_logps = per_token_logps.detach()``).
    """
    return (
        config.num_steps_per_epoch == 1
        and type(source) is OnPolicySource
        and config.advantage_estimator == "group"
    )


def evaluate_greedy(policy, prompts: torch.Tensor, task) -> dict[str, float]:
    """Greedy decoding on ``prompts`` int[batch, prompt_pos], scored by ``task``.

    Returns {'exact_sort': fraction answered exactly (``task.exact``), 'mean_reward':
    mean ``task.reward`` of the greedy responses}.

    Taught in notebook 07.
    """
    responses = policy.greedy(prompts)  # [batch, 1, pos]
    return {
        "exact_sort": task.exact(prompts, responses).float().mean().item(),
        "mean_reward": task.reward(prompts, responses).mean().item(),
    }


def _evaluate_on_schedule(run, history, task, config, epochs_done: int, counters: dict) -> bool:
    """Evaluate when due; True once the run should stop for its target.

    Due: before training, every ``eval_every`` epochs, at the last epoch, and at the end of
    the ``epochs_after_target`` window. ``history.target_epoch`` records when validation
    first reached the target; the run stops ``epochs_after_target`` epochs later (0: at
    once), so ``history.largest_drop_after_target()`` can see a collapse.
    """
    window_end = None
    if history.target_epoch is not None:
        window_end = history.target_epoch + config.epochs_after_target
    due = epochs_done % config.eval_every == 0 or epochs_done in (config.num_epochs, window_end)
    if due and _evaluate(run, history, task, config, epochs_done, **counters):
        if history.target_epoch is None:
            history.target_epoch = window_end = epochs_done
            window_end += config.epochs_after_target
    return window_end is not None and epochs_done >= window_end


def _evaluate(run, history, task, config, epochs_done, step, responses_sampled) -> bool:
    """Append an eval record of ``run.model``; True if the stopping target is reached.

    The prompts go to the policy's device; the test set is scored only if ``run.score_test``
    (else its entries are None)."""
    device = policy_device(run.model)
    try:
        scores = evaluate_greedy(run.model, run.validation_prompts.to(device), task)
        test = {"exact_sort": None, "mean_reward": None}
        if run.score_test:
            test = evaluate_greedy(run.model, run.test_prompts.to(device), task)  # never read
    except ValueError as err:
        raise ValueError(f"held-out evaluation after {epochs_done} epochs: {err}") from err
    train = None
    if task.fixed_prompts is not None:
        fixed = task.fixed_prompts.to(device)
        train = evaluate_greedy(run.model, fixed, task)["exact_sort"]
    history.append(
        {
            "kind": "eval",
            "epoch": epochs_done,
            "step": step,
            "responses_sampled": responses_sampled,
            "validation_exact_sort": scores["exact_sort"],
            "validation_mean_reward": scores["mean_reward"],
            "train_exact_sort": train,
            "test_exact_sort": test["exact_sort"],
            "test_mean_reward": test["mean_reward"],
        }
    )
    target = config.target_validation_exact_sort  # the stopping rule reads validation only
    return target is not None and scores["exact_sort"] >= target


def _grad_norm(model: torch.nn.Module, epoch: int, step: int) -> torch.Tensor:
    """L2 norm of all the parameters' gradients together; a ``NonFiniteError`` (a
    FloatingPointError) names epoch and step if it is not finite."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)
    _check_finite(norm, "gradient norm", epoch, step)
    return norm


def _hold_out(run, history, task, config) -> torch.Tensor:
    """Draw the validation and test sets (disjoint by the task's key) into ``run``; record
    and return all their keys (``history.heldout_keys``).

    The stopping rule reads validation only; training never sees a prompt with these keys.
    """
    run.validation_prompts, run.test_prompts = heldout_split(config, task)
    history.heldout_keys = task.prompt_key(torch.cat([run.validation_prompts, run.test_prompts]))
    return history.heldout_keys


def heldout_split(config: TrainConfig, task=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The run's (validation, test) prompts int64[n, prompt_pos], n = ``config.heldout_size``.

    Disjoint by the task's key and drawn with ``config.eval_seed``: the same sets for every
    training seed, and the loop never trains on a prompt with one of their keys. ``task``:
    the run's task (None: ``config.build_task()``).

    Taught in notebook 04.
    """
    task = config.build_task() if task is None else task
    size = config.heldout_size_for(task)
    sizes = (size, size)
    validation, test = task.heldout_split(sizes, config.eval_seed)
    return validation, test


def _shapes(config: TrainConfig, policy, task) -> tuple[int, int, int]:
    """(vocab_size, prompt_length, response_length) the policy must fit: the config's, or
    with a given ``task`` its prompts' and the policy's own response length (an int >= 1, at
    least the task's ``min_response_length`` if it has one)."""
    if task is None:
        return config.vocab_size, config.prompt_length, config.response_length
    length = getattr(policy, "response_length", None)
    try:
        check_number(length, "response_length", 1, low_inclusive=True, integer=True)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"the given policy ({type(policy).__name__}) must say how many response slots it "
            f"writes: response_length an int >= 1, got {length!r}"
        ) from err
    needed = getattr(task, "min_response_length", None)
    if needed is not None and length < needed:
        raise ValueError(
            f"the given policy writes at most {length} response tokens, but task "
            f"{getattr(task, 'name', type(task).__name__)!r} needs {needed} (its longest "
            "accepted answer plus EOS): a longer answer would be cut off and scored 0"
        )
    return task.vocab_size, task.prompt_length, length


def _check_finite_parameters(policy, epoch: int, step: int) -> None:
    if not all(torch.isfinite(p).all() for p in policy.parameters()):
        raise NonFiniteError(
            f"the model's parameters became non-finite in the optimizer step at epoch "
            f"{epoch}, step {step}: try a smaller learning_rate"
        )


def _freeze(model: torch.nn.Module) -> torch.nn.Module:
    """A frozen deep copy: gradients off, eval mode (the lecture's ``model.clone()``)."""
    ref = copy.deepcopy(model)
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref.eval()


def _check_finite(value: torch.Tensor, what: str, epoch: int, step: int) -> None:
    if not torch.isfinite(value).all():
        raise NonFiniteError(
            f"non-finite {what} ({value.flatten()[:4].tolist()}) at epoch {epoch}, step {step}: "
            "try a smaller learning_rate, or check the reward function"
        )
