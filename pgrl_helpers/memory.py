"""RL infrastructure: how much accelerator memory a GRPO or PPO step holds, line by line.

Per-parameter lines (``memory_breakdown``), each with its assumption:

* **policy** (trained): weights, gradients and Adam state;
* **reference model** for the KL penalty (frozen, weights only);
* PPO only: a **value model** (critic) of the policy's size, trained too (``value_params``
  to change its size);
* RLHF with a *learned* reward only: a **reward model** (frozen, weights only; pass
  ``reward_model_params``). A verifiable reward (our sort task, math answers) costs nothing.

The **old policy** is *not* a weight copy: the log-probs of the sampled tokens under the
policy that sampled them are computed once per batch and cached (our loop, TRL, OpenRLHF and
verl all do this), so it costs ``logprob_cache_bytes`` per sampled token, for GRPO and PPO
alike. Per-token lines come separately: that cache (and the reference log-probs),
``kv_cache_bytes`` of the rollouts, and ``activation_bytes`` of the backward pass.

Default precision (``MIXED_ADAM``): bf16 weights and gradients (2 bytes each) and, per trained
parameter, 12 bytes of fp32 optimizer state (a master copy of the weights plus Adam's first and
second moments), the accounting of ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054, sec. 3.1).
A trained copy is then 16 bytes per parameter and a frozen one 2: GRPO = 16 + 2 = 18, PPO =
18 + 16 = 34 bytes per parameter. ``measure_copies`` checks these constants against the bytes
that real torch modules and a real Adam step allocate.

Taught in notebook 07; also used in notebooks 10, 12.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from ._validate import check_number

#: Per-parameter model copies of each algorithm, as (name, trained, assumption).
MODEL_COPIES: dict[str, tuple[tuple[str, bool, str], ...]] = {
    "grpo": (
        ("policy", True, "trained: weights + grads + optimizer state"),
        ("reference", False, "frozen bf16 weights for the KL term (0 if beta = 0)"),
    ),
    "ppo": (
        ("policy", True, "trained: weights + grads + optimizer state"),
        ("reference", False, "frozen bf16 weights for the KL-in-reward term"),
        ("value model", True, "critic of the policy's size, trained"),
    ),
}
#: The old policy costs nothing per parameter: its log-probs are cached per token.
OLD_POLICY_NOTE = "old policy: cached log-probs of the sampled tokens, not a weight copy"

GIB = 1024**3


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter for each kind of tensor."""

    #: bytes per weight (bf16/fp16: 2, fp32: 4)
    weight_bytes: float = 2.0
    #: bytes per gradient entry, trained copies only
    grad_bytes: float = 2.0
    #: bytes of optimizer state per trained parameter (fp32 master + Adam m + v = 12)
    optimizer_bytes: float = 12.0

    def __post_init__(self):
        for name in ("weight_bytes", "grad_bytes", "optimizer_bytes"):
            check_number(getattr(self, name), name, 0, low_inclusive=True)


#: Everything in fp32 with plain Adam: 4 (weights) + 4 (grads) + 8 (m, v).
FP32_ADAM = Precision(weight_bytes=4.0, grad_bytes=4.0, optimizer_bytes=8.0)
#: bf16 weights/grads with fp32 master weights and Adam moments (the default).
MIXED_ADAM = Precision()


def _check_count(value, name: str, allow_none: bool = False) -> None:
    check_number(value, name, 0, allow_none=allow_none)


def _row(name: str, trained: bool, num_params: float, precision: Precision, why: str) -> dict:
    weights = num_params * precision.weight_bytes
    grads = num_params * precision.grad_bytes if trained else 0.0
    optimizer = num_params * precision.optimizer_bytes if trained else 0.0
    return {
        "copy": name,
        "trained": trained,
        "weights": float(weights),
        "grads": float(grads),
        "optimizer": float(optimizer),
        "total": float(weights + grads + optimizer),
        "assumption": why,
    }


def memory_breakdown(
    num_params: float,
    algorithm: str = "grpo",
    precision: Precision = MIXED_ADAM,
    *,
    value_params: float | None = None,
    reward_model_params: float | None = None,
) -> list[dict]:
    """One row per model copy held per parameter: bytes of weights, grads, optimizer state.

    Returns dicts with keys ``copy``, ``trained``, ``weights``, ``grads``, ``optimizer``,
    ``total`` (bytes, floats) and ``assumption`` (one line). Frozen copies hold weights only.
    No row for the old policy (its log-probs are cached per token: ``logprob_cache_bytes``).
    ``value_params``: size of PPO's value model (default: the policy's). ``reward_model_params``:
    adds a frozen learned reward model (RLHF); leave None for a verifiable reward.

    Taught in notebook 07; also used in notebooks 10, 12.
    """
    _check_count(num_params, "num_params")
    _check_count(value_params, "value_params", allow_none=True)
    _check_count(reward_model_params, "reward_model_params", allow_none=True)
    if algorithm not in MODEL_COPIES:
        raise ValueError(
            f"unknown algorithm {algorithm!r}; valid ones are: {', '.join(MODEL_COPIES)}"
        )
    if not isinstance(precision, Precision):
        raise TypeError(f"precision must be a Precision, got {type(precision).__name__}")
    rows = []
    for name, trained, why in MODEL_COPIES[algorithm]:
        size = value_params if (name == "value model" and value_params) else num_params
        rows.append(_row(name, trained, size, precision, why))
    if reward_model_params is not None:
        why = "learned reward model (RLHF), frozen weights; none for a verifiable reward"
        rows.append(_row("reward model", False, reward_model_params, precision, why))
    return rows


def total_memory(
    num_params: float,
    algorithm: str = "grpo",
    precision: Precision = MIXED_ADAM,
    **extra_models,
) -> float:
    """Total bytes of the per-parameter rows (no KV cache, activations or log-prob cache).

    With ``MIXED_ADAM``: 18 bytes per parameter for GRPO, 34 for PPO.

    Taught in notebook 07.
    """
    rows = memory_breakdown(num_params, algorithm, precision, **extra_models)
    return sum(row["total"] for row in rows)


def logprob_cache_bytes(num_tokens: float, bytes_per_value: float = 4.0) -> float:
    """Bytes of one cached log-prob per sampled token (old policy, or reference), fp32.

    Taught in notebook 07.
    """
    _check_count(num_tokens, "num_tokens")
    return float(num_tokens * bytes_per_value)


def kv_cache_bytes(
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    num_tokens: float,
    bytes_per_value: float = 2.0,
) -> float:
    """KV cache of the rollouts: 2 (K and V) x layers x kv_heads x head_dim x tokens x bytes.

    ``num_tokens`` = sequences generated at once x (prompt + response) length.

    Taught in notebook 07.
    """
    for name, value in dict(
        num_layers=num_layers, num_kv_heads=num_kv_heads, head_dim=head_dim, num_tokens=num_tokens
    ).items():
        _check_count(value, name)
    return float(2 * num_layers * num_kv_heads * head_dim * num_tokens * bytes_per_value)


def activation_bytes(
    num_layers: int,
    hidden_size: int,
    num_heads: int,
    seq_len: int,
    batch_size: int,
    recompute: bool = True,
) -> float:
    """Activations kept for the backward pass of a transformer, 16-bit (Korthikanti et al. 2022).

    Without recomputation each layer keeps s*b*h*(34 + 5*a*s/h) bytes (arXiv 2205.05198, eq. 1;
    s sequence length, b batch, h hidden size, a heads); with full activation recomputation
    only each layer's input, 2*s*b*h bytes. Estimates: the exact figure depends on the kernels.

    Taught in notebook 07.
    """
    for name, value in dict(
        num_layers=num_layers,
        hidden_size=hidden_size,
        num_heads=num_heads,
        seq_len=seq_len,
        batch_size=batch_size,
    ).items():
        _check_count(value, name)
    s, b, h, a = seq_len, batch_size, hidden_size, num_heads
    per_layer = 2 * s * b * h if recompute else s * b * h * (34 + 5 * a * s / h)
    return float(num_layers * per_layer)


def memory_table(
    model_sizes: dict[str, float], precision: Precision = MIXED_ADAM, unit: float = GIB
) -> str:
    """Plain-text table: per model size, GiB per copy for GRPO and PPO and the ratio.

    ``model_sizes`` maps a label (``"7B"``) to a parameter count (``7e9``). The old policy has
    no column: it is cached log-probs, per token.

    Taught in notebook 07.
    """
    if not model_sizes:
        raise ValueError("model_sizes is empty; pass e.g. {'7B': 7e9}")
    copies = [name for name, _, _ in MODEL_COPIES["ppo"]]
    header = f"{'model':>6} " + " ".join(f"{c:>12}" for c in copies)
    header += f" {'GRPO total':>11} {'PPO total':>10} {'PPO / GRPO':>10}"
    unit_name = "GiB" if unit == GIB else f"x{unit:g} bytes"
    lines = [
        f"memory per model copy in {unit_name} (weights + grads + optimizer state; "
        f"{OLD_POLICY_NOTE})",
        header,
    ]
    for label, num_params in model_sizes.items():
        per_copy = {
            row["copy"]: row["total"] for row in memory_breakdown(num_params, "ppo", precision)
        }
        grpo = total_memory(num_params, "grpo", precision)
        ppo = total_memory(num_params, "ppo", precision)
        cells = " ".join(f"{per_copy[c] / unit:>12,.0f}" for c in copies)
        lines.append(
            f"{label:>6} {cells} {grpo / unit:>11,.0f} {ppo / unit:>10,.0f} {ppo / grpo:>10.2f}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# An independent count: the bytes real torch modules and a real Adam step allocate
# --------------------------------------------------------------------------------------


def _nbytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if t is None or t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += t.numel() * t.element_size()
    return total


def _train_copy(make_model, mixed: bool, batch: torch.Tensor) -> dict:
    """One Adam step on a fresh model; bytes of weights, grads and optimizer tensors."""
    model = make_model()
    if mixed:  # bf16 model; fp32 master weights own the Adam state (ZeRO-style)
        model = model.to(torch.bfloat16)
        master = [p.detach().float().clone().requires_grad_(True) for p in model.parameters()]
        optimizer = torch.optim.Adam(master, lr=1e-3)
        model(batch.to(torch.bfloat16)).float().pow(2).mean().backward()
        for m, p in zip(master, model.parameters()):
            m.grad = p.grad.float()
        optimizer.step()
        for m, p in zip(master, model.parameters()):
            m.grad = None  # the fp32 gradient is transient; bf16 grads stay on the model
            p.data.copy_(m.detach())
        optimizer_tensors = list(master)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        model(batch).pow(2).mean().backward()
        optimizer.step()
        optimizer_tensors = []
    for state in optimizer.state.values():  # exp_avg, exp_avg_sq (the scalar step excluded)
        optimizer_tensors += [v for k, v in state.items() if k != "step"]
    params = list(model.parameters())
    return {
        "weights": _nbytes(params),
        "grads": _nbytes(p.grad for p in params),
        "optimizer": _nbytes(optimizer_tensors),
    }


def measure_copies(make_model, algorithm: str = "grpo", mixed: bool = True) -> dict:
    """Measured bytes per copy of ``algorithm`` for the model ``make_model()`` builds.

    ``make_model``: no-argument callable returning an ``nn.Module`` that maps float[batch, d]
    to a tensor, d = ``in_features`` of its first ``nn.Linear``. Trained copies take one real
    Adam step (fp32 master weights when ``mixed``); the reference is a deep copy in bf16 (or
    fp32) without gradients. Returns {copy: bytes}, {"num_params": ..., "total": ...}: count
    with ``tensor.element_size()``, independent of ``Precision``'s constants.

    Taught in notebook 07.
    """
    if algorithm not in MODEL_COPIES:
        raise ValueError(
            f"unknown algorithm {algorithm!r}; valid ones are: {', '.join(MODEL_COPIES)}"
        )
    probe = make_model()
    first = next((m for m in probe.modules() if isinstance(m, torch.nn.Linear)), None)
    if first is None:
        raise ValueError("make_model() must build a module with at least one nn.Linear")
    batch = torch.randn(4, first.in_features, generator=torch.Generator().manual_seed(0))
    out = {"num_params": sum(p.numel() for p in probe.parameters())}
    for name, trained, _ in MODEL_COPIES[algorithm]:
        if trained:
            out[name] = sum(_train_copy(make_model, mixed, batch).values())
        else:
            frozen = copy.deepcopy(probe).requires_grad_(False)
            frozen = frozen.to(torch.bfloat16) if mixed else frozen
            out[name] = _nbytes(frozen.parameters())
    out["total"] = sum(v for k, v in out.items() if k != "num_params")
    return out


def measured_memory(
    module: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> dict:
    """Bytes a module really holds: {'params', 'weights', 'grads', 'optimizer', 'total'}.

    weights and grads: ``numel * element_size`` of every parameter and its ``.grad``
    (None counts 0); optimizer: every tensor in ``optimizer.state`` for this module's
    parameters (Adam: exp_avg, exp_avg_sq and a scalar step). Activations not counted.

    Taught in notebook 10.
    """
    params = list(module.parameters())
    weights = sum(p.numel() * p.element_size() for p in params)
    grads = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    state = 0
    if optimizer is not None:
        for p in params:
            for value in optimizer.state.get(p, {}).values():
                if isinstance(value, torch.Tensor) and value.ndim > 0:
                    state += value.numel() * value.element_size()
    return {
        "params": sum(p.numel() for p in params),
        "weights": weights,
        "grads": grads,
        "optimizer": state,
        "total": weights + grads + state,
    }
