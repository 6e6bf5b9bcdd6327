"""RL infrastructure: how much accelerator memory the model copies of GRPO and PPO take.

An RL step for a language model keeps several copies of the network in memory:

* the **policy** being trained: weights, gradients and optimizer (Adam) state;
* the **old policy** that sampled the batch (weights only; frozen);
* the **reference model** for the KL penalty (weights only; frozen);
* PPO only: a **value model** (critic) of the same size, trained too.

GRPO replaces the value model by the group mean of the rewards, so it drops the
largest extra copy. This module counts ``parameters x bytes`` per copy; it leaves out
activations, the KV cache of the rollouts and framework overhead, so real numbers are
higher. Default precision is the usual mixed-precision setup: bf16 weights and
gradients (2 bytes each) and, per trained parameter, 12 bytes of fp32 optimizer
state (a master copy of the weights plus Adam's first and second moments).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The algorithms this calculator knows, with their model copies as (name, trained).
MODEL_COPIES: dict[str, tuple[tuple[str, bool], ...]] = {
    "grpo": (("policy", True), ("old policy", False), ("reference", False)),
    "ppo": (
        ("policy", True),
        ("old policy", False),
        ("reference", False),
        ("value model", True),
    ),
}

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
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")


#: Everything in fp32 with plain Adam: 4 (weights) + 4 (grads) + 8 (m, v).
FP32_ADAM = Precision(weight_bytes=4.0, grad_bytes=4.0, optimizer_bytes=8.0)
#: bf16 weights/grads with fp32 master weights and Adam moments (the default).
MIXED_ADAM = Precision()


def _check_params(num_params) -> None:
    if isinstance(num_params, bool) or not isinstance(num_params, (int, float)):
        raise TypeError(f"num_params must be a number, got {type(num_params).__name__}")
    if not num_params > 0:
        raise ValueError(f"num_params must be > 0, got {num_params!r}")


def memory_breakdown(
    num_params: float, algorithm: str = "grpo", precision: Precision = MIXED_ADAM
) -> list[dict]:
    """One row per model copy: bytes for weights, gradients, optimizer state and total.

    Returns a list of dicts with keys ``copy``, ``trained``, ``weights``, ``grads``,
    ``optimizer``, ``total`` (bytes, floats). Frozen copies hold weights only.
    """
    _check_params(num_params)
    if algorithm not in MODEL_COPIES:
        raise ValueError(
            f"unknown algorithm {algorithm!r}; valid ones are: {', '.join(MODEL_COPIES)}"
        )
    if not isinstance(precision, Precision):
        raise TypeError(f"precision must be a Precision, got {type(precision).__name__}")
    rows = []
    for name, trained in MODEL_COPIES[algorithm]:
        weights = num_params * precision.weight_bytes
        grads = num_params * precision.grad_bytes if trained else 0.0
        optimizer = num_params * precision.optimizer_bytes if trained else 0.0
        rows.append(
            {
                "copy": name,
                "trained": trained,
                "weights": float(weights),
                "grads": float(grads),
                "optimizer": float(optimizer),
                "total": float(weights + grads + optimizer),
            }
        )
    return rows


def total_memory(
    num_params: float, algorithm: str = "grpo", precision: Precision = MIXED_ADAM
) -> float:
    """Total bytes over every model copy of ``algorithm`` (no activations, no KV cache)."""
    return sum(row["total"] for row in memory_breakdown(num_params, algorithm, precision))


def memory_table(
    model_sizes: dict[str, float], precision: Precision = MIXED_ADAM, unit: float = GIB
) -> str:
    """Plain-text table: per model size, GiB per copy for GRPO and PPO and what PPO adds.

    ``model_sizes`` maps a label (``"7B"``) to a parameter count (``7e9``).
    """
    if not model_sizes:
        raise ValueError("model_sizes is empty; pass e.g. {'7B': 7e9}")
    copies = [name for name, _ in MODEL_COPIES["ppo"]]
    header = f"{'model':>6} " + " ".join(f"{c:>12}" for c in copies)
    header += f" {'GRPO total':>11} {'PPO total':>10} {'PPO / GRPO':>10}"
    unit_name = "GiB" if unit == GIB else f"x{unit:g} bytes"
    lines = [f"memory per model copy in {unit_name} (weights + grads + optimizer state)", header]
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
