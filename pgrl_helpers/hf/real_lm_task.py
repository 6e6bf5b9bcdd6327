"""The sort task of a real instruct model, in words (issue 37): prompts, rewards, splits.

The task in words: the user turn asks, in the words of ``prompt_template`` (a ``str.format``
string with the field ``{numbers}``), to sort a list of 3 to 5 integers from 0 to 9; the
reply should be the sorted list. ``prompt_token_ids`` writes that turn into the tokenizer's
chat template; ``decode_replies`` reads replies back as text, as TRL decodes completions.
Prompts as tensors are int64[batch, MAX_NUMBERS] of values 0-9, the numbers first and
``ABSENT`` (10) in the unused slots, so the loop's ``PromptTask`` machinery holds them out by
content: ``RealLMSortTask.prompt_key`` is the multiset and ``RealLMSortTask.splits`` draws
validation and test multisets, disjoint by content, with ``PromptTask.heldout_split``.

Three rewards, reported separately (``score_reply``): ``format`` (the reply ended its turn
and is a list of numbers only, ``parse_answer``), ``exact`` (it is the sorted list) and
``partial`` (the fraction of positions that hold the sorted list's number: notebook 01's
sort-distance reward over max(reply length, list length)). How to combine them is the
reward design of the training run (``combined_reward`` takes the weights).

The reply budget comes from the tokenizer (``reply_budget``): the tokens of the longest answer
the parser accepts, plus EOS; ``RealLMSortTask.min_response_length`` is that budget, and
``run_policy_gradient(config, policy=ChatLMPolicy(...), task=RealLMSortTask(...))`` refuses a
policy with fewer reply tokens before any work. The model, its generation and
``ChatLMPolicy`` are in ``real_lm.py``; the tests are tests/integration/test_real_lm.py. Needs
only torch (a tokenizer is passed in).

Taught in notebook 16; also used in notebook 17.
"""

from __future__ import annotations

import itertools
import math
import re
import string
from collections import Counter

import torch

from .._validate import check_integer, check_ndim, check_number
from ..task import PromptTask

# ----------------------------------------------------------------------------- the task in words

VALUES = tuple(range(10))
LENGTHS = (3, 4, 5)
MAX_NUMBERS = max(LENGTHS)
#: The value of an unused prompt slot (after the numbers); prompts' vocab_size is ABSENT + 1.
ABSENT = len(VALUES)
#: Candidate user messages (``str.format`` strings with ``{numbers}``), compared on
#: validation only. "issue" is the wording of issue 37's first try; "example" shows one
#: solved list (one-shot), whose multiset is in no held-out set (a test checks).
PROMPT_TEMPLATES = {
    "issue": "Sort these numbers in ascending order: {numbers}. Answer with the numbers only.",
    "list": (
        "Sort this list of numbers from smallest to largest: {numbers}\n"
        "Reply with the sorted list only, the numbers separated by commas."
    ),
    "example": (  # 9, 2, 6, 2: in no validation / test set (tests/integration/test_real_lm.py)
        "Sort the numbers in ascending order. Reply with the sorted numbers only, separated by "
        "commas.\nExample: 9, 2, 6, 2 -> 2, 2, 6, 9\nNumbers: {numbers}"
    ),
}
#: The validation and test multisets are drawn with this seed, the same for every run.
SPLIT_SEED = 2025


def check_numbers(numbers) -> list[int]:
    """``numbers`` as a list of ints; raises naming the problem unless it holds 3-5 ints 0-9."""
    if isinstance(numbers, (str, bytes)) or not hasattr(numbers, "__iter__"):
        raise ValueError(f"numbers must be a sequence of integers, got {numbers!r}")
    values = list(numbers)
    if len(values) not in LENGTHS:
        raise ValueError(f"numbers must hold {LENGTHS[0]}-{LENGTHS[-1]} integers, got {numbers!r}")
    for x in values:
        check_number(x, "each of numbers", VALUES[0], VALUES[-1], low_inclusive=True,
                     integer=True, note=f"in {numbers!r}")  # fmt: skip
    return values


def check_template(template: str) -> str:
    """Return ``template`` if it is a ``str.format`` string whose only field is ``{numbers}``."""
    if not isinstance(template, str):
        raise TypeError(f"prompt_template must be a str, got {type(template).__name__}")
    fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    if fields != ["numbers"]:
        raise ValueError(
            f"prompt_template must contain the field {{numbers}} exactly once and no other "
            f"field, got fields {fields} in {template!r}"
        )
    return template


def user_message(numbers, template: str) -> str:
    """The user turn: ``template`` with the numbers written '7, 2, 9, 4'."""
    values = check_numbers(numbers)
    return check_template(template).format(numbers=", ".join(str(x) for x in values))


def chat_messages(numbers, template: str) -> list[dict]:
    """The chat prompt: one user turn (the model's template adds its default system turn)."""
    return [{"role": "user", "content": user_message(numbers, template)}]


def prompt_token_ids(tokenizer, numbers, template: str) -> list[int]:
    """Token ids of the chat-formatted prompt, ending with the assistant header."""
    text = tokenizer.apply_chat_template(
        chat_messages(numbers, template), add_generation_prompt=True, tokenize=False
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


# ----------------------------------------------------------------------------- parser, rewards

#: A reply that is a list of numbers only: separated by commas and/or spaces, optionally in
#: square brackets, optionally ending with a full stop.
_NUMBER_LIST = re.compile(r"(\d+(?:\s*,\s*|\s+))*\d+")


def parse_answer(text: str) -> list[int] | None:
    """The numbers of a reply that is a list of numbers only ('2, 4, 7, 9', '2 4 7 9',
    '[2, 4, 7, 9]', '2, 4, 7, 9.'), or None for anything else (prose, an empty reply)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    body = text.strip()
    if body.endswith("."):
        body = body[:-1].rstrip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1].strip()
    if not _NUMBER_LIST.fullmatch(body):
        return None
    return [int(x) for x in re.findall(r"\d+", body)]


#: The ways a list can be written that ``parse_answer`` accepts, in canonical form: three
#: separators (comma and space, comma, space) times the optional brackets and full stop.
ANSWER_FORMATS = tuple(
    (left + "{}" + right + stop, sep)
    for sep in (", ", ",", " ")
    for left, right in (("", ""), ("[", "]"))
    for stop in ("", ".")
)


def reply_budget(tokenizer) -> dict:
    """The reply tokens a chat model needs to answer every prompt in any accepted format:
    {'tokens': the longest accepted answer's tokens + 1 (EOS), 'answer': that answer,
    'reason': a sentence}. Answers are the ``MAX_NUMBERS``-number lists of each digit and two
    mixed lists, in every ``ANSWER_FORMATS`` form that the tokenizer writes back as the same
    list (a form the tokenizer cannot write, e.g. unknown tokens, is not counted)."""
    lists = [[v] * MAX_NUMBERS for v in VALUES]
    lists += [list(range(MAX_NUMBERS)), list(range(10 - MAX_NUMBERS, 10))]
    longest, answer = 0, None
    for numbers in lists:
        for form, sep in ANSWER_FORMATS:
            text = form.format(sep.join(map(str, numbers)))
            ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
            unknown = tokenizer.unk_token_id is not None and tokenizer.unk_token_id in ids
            back = tokenizer.decode(ids, skip_special_tokens=False)
            if unknown or parse_answer(back) != numbers:
                continue
            if len(ids) > longest:
                longest, answer = len(ids), text
    if answer is None:
        raise ValueError("the tokenizer cannot write a list of numbers in any accepted format")
    return {
        "tokens": longest + 1,
        "answer": answer,
        "reason": f"the longest accepted answer, {answer!r}, is {longest} tokens, plus EOS",
    }


def partial_credit(numbers, answer: list[int] | None) -> float:
    """Fraction of positions holding the sorted list's number, over max(len(answer), len(list)):
    notebook 01's sort-distance reward for replies of any length. 0 for None."""
    target = sorted(check_numbers(numbers))
    if answer is None:
        return 0.0
    hits = sum(1 for got, want in zip(answer, target) if got == want)
    return hits / max(len(answer), len(target))


def score_reply(numbers, text: str, finished: bool = True) -> dict[str, float]:
    """The three rewards of one reply, each 0 or 1 ('partial': in [0, 1]).

    'format': the reply ended its turn (``finished``: the model wrote EOS) and parses as a list
    of numbers; 'exact': and it is ``sorted(numbers)``; 'partial': ``partial_credit`` (0 if
    the format fails). A reply cut off at the length limit scores 0 on all three.
    """
    target = sorted(check_numbers(numbers))
    answer = parse_answer(text) if finished else None
    return {
        "exact": float(answer == target),
        "partial": partial_credit(target, answer),
        "format": float(answer is not None),
    }


def combined_reward(scores: dict[str, float], weights: dict[str, float]) -> float:
    """sum_k weights[k] x scores[k] over the named rewards ('exact', 'partial', 'format')."""
    unknown = set(weights) - {"exact", "partial", "format"}
    if unknown:
        raise ValueError(f"unknown reward names {sorted(unknown)}; valid: exact, partial, format")
    if not weights:
        raise ValueError("weights is empty: name at least one of exact, partial, format")
    for name, weight in weights.items():
        check_number(weight, f"weights[{name!r}]", 0, low_inclusive=True)
    if not any(weights.values()):
        raise ValueError(f"weights are all 0 ({weights}): every reward would be 0")
    return sum(float(w) * scores[k] for k, w in weights.items())


# ----------------------------------------------------------------------------- prompts as tensors


def encode_numbers(lists) -> torch.Tensor:
    """Lists of 3-5 numbers -> int64[n, MAX_NUMBERS], the numbers first, then ``ABSENT``."""
    rows = [check_numbers(x) for x in lists]
    if not rows:
        raise ValueError("lists must hold at least one list of numbers")
    return torch.tensor([r + [ABSENT] * (MAX_NUMBERS - len(r)) for r in rows], dtype=torch.long)


def decode_numbers(prompts: torch.Tensor) -> list[list[int]]:
    """int[batch, MAX_NUMBERS] -> the list of numbers of each row (checked: 3-5 numbers, then
    only ``ABSENT``)."""
    check_ndim(prompts, 2, "prompts", "batch, prompt_pos")
    check_integer(prompts, "prompts")
    if prompts.shape[1] != MAX_NUMBERS:
        raise ValueError(f"prompts must have {MAX_NUMBERS} slots, got {prompts.shape[1]}")
    out = []
    for row in prompts.tolist():
        n = next((i for i, x in enumerate(row) if x == ABSENT), MAX_NUMBERS)
        if any(x != ABSENT for x in row[n:]):
            raise ValueError(f"prompt {row}: a number after an ABSENT ({ABSENT}) slot")
        out.append(check_numbers(row[:n]))
    return out


def multiset_code(numbers) -> int:
    """The content key of a list: its multiset, as the base-6 number of the value counts."""
    counts = Counter(check_numbers(numbers))
    return sum(counts[v] * 6**v for v in VALUES)


def needs_sorting(numbers) -> bool:
    """False for a list already in ascending order, unless all its numbers are equal (such a
    list, [3, 3, 3], has no other order)."""
    values = list(numbers)
    return values != sorted(values) or len(set(values)) == 1


def all_multisets(length: int) -> list[tuple[int, ...]]:
    """Every multiset of ``length`` values 0-9, as sorted tuples (C(9 + length, length))."""
    return list(itertools.combinations_with_replacement(VALUES, length))


class RealLMSortTask(PromptTask):
    """The sort task of a chat model, on the loop's ``Task`` interface.

    Prompts int64[batch, MAX_NUMBERS] (``encode_numbers``); the key is the multiset, so a
    held-out multiset never reaches training in any ordering. Responses are the model's token
    ids int64[batch, trial, pos] (EOS ends a reply; the slots after it are ignored), decoded
    with ``tokenizer`` for ``reward`` / ``exact`` / ``scores``; ``reward`` is
    ``combined_reward`` with ``weights``.

    No prompt is already in order unless all its numbers are equal (``needs_sorting``): an
    already sorted prompt rewards echoing the input, the shortcut issue 37's first try
    collapsed onto (10 of 48 validation prompts were sorted before this rule).
    """

    name = "real_lm_sort"

    def __init__(self, tokenizer=None, weights: dict[str, float] | None = None):
        super().__init__(MAX_NUMBERS, ABSENT + 1)
        self.tokenizer = tokenizer
        self.weights = {"exact": 1.0} if weights is None else dict(weights)
        combined_reward({"exact": 0.0, "partial": 0.0, "format": 0.0}, self.weights)  # check
        self._budget = None

    @property
    def min_response_length(self) -> int | None:
        """Reply tokens a policy must be allowed (``reply_budget``; None without a tokenizer).
        ``run_policy_gradient`` refuses a policy with a smaller ``response_length``."""
        if self.tokenizer is None:
            return None
        if self._budget is None:
            self._budget = reply_budget(self.tokenizer)
        return self._budget["tokens"]

    # ---- held out by content ----------------------------------------------------------

    def prompt_key(self, prompts: torch.Tensor) -> torch.Tensor:
        """int64[batch]: the multiset of each prompt (``multiset_code``)."""
        return torch.tensor([multiset_code(x) for x in decode_numbers(prompts)], dtype=torch.long)

    def num_keys(self) -> int:
        """Multisets of 3-5 values 0-9: 220 + 715 + 2002 = 2937."""
        return sum(math.comb(len(VALUES) + n - 1, n) for n in LENGTHS)

    def random_prompts(self, n: int, generator: torch.Generator | None) -> torch.Tensor:
        """int64[n, MAX_NUMBERS]: a length uniform in 3-5, then values uniform in 0-9; a row
        already in order (numbers not all equal) is drawn again."""
        out = torch.empty(n, MAX_NUMBERS, dtype=torch.long)
        todo = torch.ones(n, dtype=torch.bool)
        while todo.any():
            k = int(todo.sum())
            pick = torch.randint(0, len(LENGTHS), (k,), generator=generator)
            lengths = torch.tensor(LENGTHS)[pick]
            values = torch.randint(0, len(VALUES), (k, MAX_NUMBERS), generator=generator)
            absent = torch.arange(MAX_NUMBERS)[None, :] >= lengths[:, None]
            out[todo] = values.masked_fill(absent, ABSENT)
            todo = torch.tensor([not needs_sorting(x) for x in decode_numbers(out)]) & todo
        return out

    def _candidates(self, generator: torch.Generator):
        """Multisets in a seeded random order, one random ordering each, the lengths taken in
        turn (3, 4, 5, 3, ...) so that every held-out set has about as many of each length
        (the pool of length 3, 220 multisets, runs out first). ``heldout_split`` meets them
        in this order; one chunk holds every multiset."""
        pools = []
        for n in LENGTHS:
            pool = all_multisets(n)
            order = torch.randperm(len(pool), generator=generator).tolist()
            pools.append([pool[i] for i in order])
        rows = []
        for group in itertools.zip_longest(*pools):
            for multiset in group:
                if multiset is None:
                    continue
                numbers = list(multiset)  # sorted: shuffle until not (unless all equal)
                while not needs_sorting(numbers):
                    shuffle = torch.randperm(len(multiset), generator=generator).tolist()
                    numbers = [multiset[i] for i in shuffle]
                rows.append(numbers)
        yield encode_numbers(rows)

    def splits(
        self, num_validation: int = 48, num_test: int = 96, seed: int = SPLIT_SEED
    ) -> dict[str, torch.Tensor]:
        """{'validation', 'test'}: int64[n, MAX_NUMBERS] held-out prompts, one per multiset,
        disjoint by content (``PromptTask.heldout_split``); validation does not depend on
        ``num_test``."""
        validation, test = self.heldout_split((num_validation, num_test), seed)
        return {"validation": validation, "test": test}

    # ---- rewards ----------------------------------------------------------------------

    def scores(self, prompts: torch.Tensor, responses: torch.Tensor) -> dict[str, torch.Tensor]:
        """{'exact', 'partial', 'format'}: float32[batch, trial] each (``score_reply``), on
        the responses' device."""
        if self.tokenizer is None:
            raise ValueError("RealLMSortTask needs the tokenizer to score responses")
        check_ndim(responses, 3, "responses", "batch, trial, pos")
        check_integer(responses, "responses")
        lists = decode_numbers(prompts)
        if responses.shape[0] != len(lists):
            raise ValueError(
                f"prompts and responses disagree on batch size: {len(lists)} and "
                f"{responses.shape[0]}"
            )
        texts, finished = decode_replies(self.tokenizer, responses.reshape(-1, responses.shape[2]))
        trial = responses.shape[1]
        rows = [
            score_reply(lists[i // trial], text, done)
            for i, (text, done) in enumerate(zip(texts, finished))
        ]
        return {
            k: torch.tensor(
                [r[k] for r in rows], dtype=torch.float32, device=responses.device
            ).reshape(-1, trial)
            for k in ("exact", "partial", "format")
        }

    def reward(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        """float32[batch, trial]: ``combined_reward`` of the three scores with ``weights``."""
        s = self.scores(prompts, responses)
        return sum(float(w) * s[k] for k, w in self.weights.items())

    def exact(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        """bool[batch, trial]: the reply is exactly the sorted list."""
        return self.scores(prompts, responses)["exact"].bool()


# ----------------------------------------------------------------------------- replies as text


def decode_replies(tokenizer, tokens: torch.Tensor) -> tuple[list[str], list[bool]]:
    """(text before the first EOS, whether there was an EOS) of each row of int[n, pos].

    ``finished`` is read on the raw ids. The text keeps any other special token written
    (``skip_special_tokens=False``; TRL skips them), so that a reply such as
    ``'1, 2<|im_start|>, 3'`` is no list of numbers for ``parse_answer``, not [1, 2, 3]."""
    check_ndim(tokens, 2, "tokens", "n, pos")
    eos = tokenizer.eos_token_id
    texts, finished = [], []
    for row in tokens.tolist():
        cut = row.index(eos) if eos in row else len(row)
        texts.append(tokenizer.decode(row[:cut], skip_special_tokens=False))
        finished.append(cut < len(row))
    return texts, finished
