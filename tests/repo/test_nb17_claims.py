"""Notebook 17 ("What RL adds when only a verifier is available") against the results it reads.

The notebook reads ``benchmarks/results/real_lm_verifier.json`` (``bench_real_lm_verifier.py
report``) and loads the committed adapter ``real_lm_verifier_runs/sft_imperfect_seed0_adapter``.
These tests keep its prose in line with that file: every number the prose quotes (the arms' test
exact per seed, the teacher's rates, the base model under both parsers and prompts, the
validation steps, the McNemar counts, p-values, Holm's count, floor and bootstrap interval, the
goals' status) is rebuilt from the results and must appear in the prose, and each of those numbers
must also appear in a stored cell output (prose numbers come from outputs). They also check that
no live cell scores the test split, that ``sft_gold`` is labelled as using gold answers, and that
the committed adapter is the one the runs started from, and that section 7's prose quotes
the counts its live cells print (kept replies, GRPO's tied groups, the rejected kinds). Each
check has a planted-fault twin.
A rerun with more seeds changes the numbers: these tests then fail until the prose says the new
ones.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path

import pytest

from pgrl_helpers.paired_tests import mcnemar_problems_needed

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
NOTEBOOK = ROOT / "notebooks" / "17_what_rl_adds.ipynb"
ADAPTER = RESULTS / "real_lm_verifier_runs" / "sft_imperfect_seed0_adapter"


def notebook() -> dict:
    return json.loads(NOTEBOOK.read_text())


def results() -> dict:
    path = RESULTS / "real_lm_verifier.json"
    if not path.exists():
        pytest.skip(f"{path.name} not found: run benchmarks/bench_real_lm_verifier.py report")
    return json.loads(path.read_text())


def flat(text: str) -> str:
    return " ".join(text.split())


def markdown(nb: dict) -> str:
    return flat(
        "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    )


def outputs(nb: dict) -> str:
    texts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            texts.append(
                "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
            )
    return flat("\n".join(texts))


# ---------------------------------------------------------------- the numbers of the prose


def and3(values) -> str:
    """'a, b and c' with three decimals (the prose's lists of seeds)."""
    return andl(f"{v:.3f}" for v in values)


def andl(items) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def p_text(p: float) -> str:
    return "< 0.001" if p < 1e-3 else f"{p:.3f}"


def boot(c: dict) -> str:
    b = c["bootstrap"]
    return f"{b['mean']:+.3f} [{b['low']:+.3f}, {b['high']:+.3f}]"


def pairs(c: dict) -> str:
    return andl(f"{t['a_only']}/{t['b_only']}" for t in c["mcnemar"])


def holms(c: dict) -> str:
    return andl(p_text(t["p_holm"]) for t in c["mcnemar"])


def expected_phrases(r: dict) -> list[str]:
    """Every sentence fragment of the prose that quotes a number, rebuilt from the results."""
    arms, teacher = r["arms"], r["teacher"]
    exact = {arm: [run["test_exact"] for run in a["runs"]] for arm, a in arms.items()}
    by = {(c["a"], c["b"]): c for c in r["comparisons"]}
    after, teach = (
        by[("sft_imperfect_grpo", "sft_imperfect")],
        by[("sft_imperfect_grpo", "teacher")],
    )
    race_sft, race = (
        by[("sft_imperfect_grpo", "sft_imperfect_ei")],
        by[("grpo", "expert_iteration")],
    )
    seeds = sorted(teacher, key=int)
    demos = [teacher[s]["on_demonstrations"]["exact"] for s in seeds]
    on_test = [teacher[s]["on_test_exact"] for s in seeds]
    base = r["base"]
    n_test = len(base["strict"]["issue"]["exact_per_problem"])
    strict = {sum(base["strict"][p]["exact_per_problem"]) for p in ("issue", "example")}
    lenient = {sum(base["lenient"][p]["exact_per_problem"]) for p in ("issue", "example")}
    assert len(strict) == len(lenient) == 1, "the prose says 'under either prompt'"
    (strict,), (lenient,) = strict, lenient
    grpo_run = arms["sft_imperfect_grpo"]["runs"][0]
    start = grpo_run["validation_curve"][0]["exact"]
    span = {arm: f"{min(v):.3f} to {max(v):.3f}" for arm, v in exact.items()}
    vs = r["passk"]["vs_base"]
    solved = [v["solved_at_n"][0] for v in vs.values()]
    b_issue = next(v for k, v in vs.items() if k.endswith("_vs_base_issue"))["solved_at_n"][1]
    b_ex = next(v for k, v in vs.items() if k.endswith("_vs_base_example"))["solved_at_n"][1]
    kept_list = [str(run["kept_replies"]) for run in arms["expert_iteration"]["runs"]]
    kept = andl(kept_list)
    holm_step = mcnemar_problems_needed(
        sum(t["a_only"] for t in after["mcnemar"]),
        sum(t["b_only"] for t in after["mcnemar"]),
        n_test * len(after["mcnemar"]),
        alpha=0.01 / r["holm"]["tests"],
    )
    c = r["passk"]["curves"]
    sd = sorted(x.rpartition("_seed")[2] for x in c if x.startswith("sft_imperfect_grpo_seed"))
    clear = [str(t["seed"]) for t in after["mcnemar"] if t["p_holm"] < 0.01]
    return [
        # section 1: the arms' format
        "whose lowest format rate is "
        f"{min(run['test_format'] for run in arms['expert_iteration']['runs']):.3f} (its seed "
        f"{min(arms['expert_iteration']['runs'], key=lambda x: x['test_format'])['seed']}, which "
        f"found only {min(run['kept_replies'] for run in arms['expert_iteration']['runs'])} "
        "verified replies",
        # section 2: the base model
        f"With the strict parser it sorts {strict} of the {n_test} test lists under either prompt",
        f"credits {lenient} of {n_test} ({lenient / n_test:.3f}) under either prompt",
        # section 3: the teacher
        f"exact rate on its own demonstrations is {and3(demos)} (seeds 0 to 2)",
        f"On the {n_test} test lists it would score {and3(on_test)}",
        # section 4: validation
        f"its kept adapter: {start:.3f} on validation for seed 0) and both keep step "
        f"{grpo_run['best_step']}, where validation reached {grpo_run['validation_best_exact']:.3f}",
        # section 6: pass@k
        f"for {b_issue} of the 64 lists under the series' prompt and for {b_ex} under the "
        "one-shot prompt",
        f"solves between {min(solved)} and {max(solved)} lists at $k = n$",
        f"raised pass@1 from {and3(c['sft_imperfect_seed' + x]['1'] for x in sd)} to "
        f"{and3(c['sft_imperfect_grpo_seed' + x]['1'] for x in sd)} (seeds {andl(sd)})",
        # section 8: the reading
        f"({r['holm']['tests']} McNemar tests, Holm over all of them)",
        f"demonstrations reaches test exact {and3(exact['sft_imperfect'])} (seeds 0 to 2), "
        f"against {and3(exact['sft_gold'])} for the same SFT on gold answers, and "
        f"{and3(exact['grpo'])} for GRPO from the base",
        f"own rate on the same lists ({', '.join(f'{v:.3f}' for v in on_test)})",
        f"`sft_imperfect_grpo` reaches {and3(exact['sft_imperfect_grpo'])} against "
        f"`sft_imperfect`'s {and3(exact['sft_imperfect'])}: lists gained/lost {pairs(after)} "
        f"(seeds 0 to 2), Holm-adjusted p {holms(after)}; the bootstrap over seeds and lists "
        f"gives {boot(after)}",
        f"{'only seed ' + andl(clear) if clear else 'no seed'} clears p < 0.01 after Holm",
        f"one seed's test needs about {after['power']['problems_per_seed']} test lists",
        f"strictest step (0.01/{r['holm']['tests']}) the same calculation asks for "
        f"{holm_step} lists per seed",
        f"(lists {pairs(teach)}, Holm-adjusted p {holms(teach)}; mean {boot(teach)})",
        f"`sft_imperfect_ei` reaches {and3(exact['sft_imperfect_ei'])}. The two differ on few "
        f"lists ({pairs(race_sft)}), mean {boot(race_sft)}",
        f"the power calculation asks for {race_sft['power']['seeds']} seeds",
        f"`expert_iteration` reaches {and3(exact['expert_iteration'])} against GRPO's "
        f"{and3(exact['grpo'])} (lists {pairs(race)}, Holm-adjusted p {holms(race)}); grpo minus "
        f"expert_iteration {boot(race)}",
        f"Expert iteration kept {kept} verified replies",
        # what you learned
        f"scored {span['sft_imperfect']} on test against {span['sft_gold']} for gold SFT",
        f"at notebook 16's budget ({span['grpo']}) on every seed",
        f"every seed (mean {boot(after)})",
        f"(kept {kept} replies)",
    ]


def claim_problems(r: dict) -> list[str]:
    """The prose's statements that are not numbers, checked against the results."""
    arms, by = r["arms"], {(c["a"], c["b"]): c for c in r["comparisons"]}
    exact = {arm: {run["seed"]: run["test_exact"] for run in a["runs"]} for arm, a in arms.items()}
    teacher = {int(s): t["on_test_exact"] for s, t in r["teacher"].items()}
    after, race = by[("sft_imperfect_grpo", "sft_imperfect")], by[("grpo", "expert_iteration")]
    race_sft = by[("sft_imperfect_grpo", "sft_imperfect_ei")]
    problems = []
    above = [s for s in sorted(teacher) if exact["sft_imperfect"][s] > teacher[s]]
    if above != [0, 2]:
        problems.append(
            f"'the student is above on seeds 0 and 2 and below on seed 1': above on {above}"
        )
    if not all(exact["sft_imperfect"][s] > exact["grpo"][s] for s in exact["grpo"]):
        problems.append("'above GRPO from the base ... on every seed' no longer holds")
    if sorted(len(a["runs"]) for a in arms.values()) != [3] * 6:
        problems.append("'Every arm has three seeds' no longer holds")
    below = sorted(a for a, v in arms.items() if min(x["test_format"] for x in v["runs"]) < 1)
    if below != ["expert_iteration"]:
        problems.append(f"'every trained arm but one answers in the list format': below 1 {below}")
    if not all(t["a_only"] > t["b_only"] for t in after["mcnemar"]):
        problems.append("'lifts the student on every seed' no longer holds")
    if after["bootstrap"]["low"] <= 0:
        problems.append("'the interval excludes 0' (sft_imperfect_grpo vs sft_imperfect) fails")
    if all(t["p_holm"] < 0.01 for t in after["mcnemar"]):
        problems.append("'the goal ... is not met' no longer holds: every seed clears")
    if not all(exact["sft_imperfect_grpo"][s] > teacher[s] for s in teacher):
        problems.append("'sft_imperfect_grpo is above its teacher on every seed' no longer holds")
    b = race_sft["bootstrap"]
    if b["low"] > 0 or b["high"] < 0 or any(t["p_holm"] < 0.05 for t in race_sft["mcnemar"]):
        problems.append("'nothing ranks them' (GRPO and expert iteration after SFT): one ranks")
    if race["bootstrap"]["low"] <= 0:
        problems.append("'GRPO ahead of expert iteration, an interval that excludes 0' fails")
    vs = r["passk"]["vs_base"]
    if any(v["lost_at_n"] for v in vs.values()):
        problems.append("'loses no list the base solves' no longer holds")
    if any(v["first_k_base_at_or_above"] for v in vs.values()):
        problems.append("'no curve crosses' no longer holds")
    labels = set(r["passk"]["curves"])
    if not {f"{a}_seed0" for a in arms} <= labels or sum(x.endswith("_seed1") for x in labels) != 2:
        problems.append("'sampled for seed 0 of every arm (and seed 1 of two)' no longer holds")
    curves = r["passk"]["curves"]
    for seed in (x.rpartition("_seed")[2] for x in labels if x.startswith("sft_imperfect_grpo_")):
        start, after_rl = (
            curves.get(f"sft_imperfect_seed{seed}"),
            curves[f"sft_imperfect_grpo_seed{seed}"],
        )
        n = str(r["n_samples"])
        if start is None or start[n] != 1.0 or after_rl["1"] <= start["1"]:
            problems.append(
                f"'the start already solved every list; pass@1 up' fails on seed {seed}"
            )
    if r["learning_rate_choice"]:
        problems.append("'no learning rate has been chosen yet': one has")
    return problems


def number_problems(nb: dict, r: dict) -> list[str]:
    text, shown = markdown(nb), outputs(nb)
    problems = claim_problems(r)
    kept = ", ".join(str(run["kept_replies"]) for run in r["arms"]["expert_iteration"]["runs"])
    if f"expert_iteration: verified replies kept per seed {kept};" not in shown:
        problems.append(f"the kept replies the prose quotes ({kept}) are printed by no cell")
    for phrase in expected_phrases(r):
        if phrase not in text:
            problems.append(f"the prose lacks {phrase!r}")
        for number in re.findall(r"[+-]?\d+\.\d+", phrase):
            if number.lstrip("+") not in shown:
                problems.append(f"{number} (in {phrase!r}) is printed by no cell")
    return problems


def test_every_number_of_the_prose_matches_the_results_and_an_output():
    problems = number_problems(notebook(), results())
    assert not problems, "\n".join(problems)


PLANTS = {
    "an arm's test exact": lambda r: r["arms"]["sft_imperfect"]["runs"][1].update(test_exact=0.7),
    "the teacher on test": lambda r: r["teacher"]["2"].update(on_test_exact=0.75),
    "a McNemar count": lambda r: r["comparisons"][0]["mcnemar"][0].update(a_only=12),
    "a Holm-adjusted p": lambda r: r["comparisons"][1]["mcnemar"][0].update(p_holm=0.04),
    "Holm's count": lambda r: r["holm"].update(tests=16),
    "a power": lambda r: r["comparisons"][0]["power"].update(problems_per_seed=200),
    "the bootstrap": lambda r: r["comparisons"][0]["bootstrap"].update(high=0.25),
    "the base": lambda r: (
        r["base"]["lenient"]["issue"]["exact_per_problem"].__setitem__(0, 1)
        or r["base"]["lenient"]["example"]["exact_per_problem"].__setitem__(0, 1)
    ),
    "a kept step": lambda r: r["arms"]["sft_imperfect_grpo"]["runs"][0].update(best_step=40),
    "the student below its teacher": lambda r: r["teacher"]["0"].update(on_test_exact=0.9),
    "every seed significant": lambda r: [
        t.update(p_holm=0.001) for t in r["comparisons"][0]["mcnemar"]
    ],
    "expert iteration level with grpo": lambda r: next(
        c for c in r["comparisons"] if c["a"] == "grpo" and c["b"] == "expert_iteration"
    )["bootstrap"].update(low=-0.01),
    "a list lost at n": lambda r: next(iter(r["passk"]["vs_base"].values())).update(lost_at_n=[3]),
    "a crossover": lambda r: next(iter(r["passk"]["vs_base"].values())).update(
        first_k_base_at_or_above=32
    ),
    "a format below 1": lambda r: r["arms"]["sft_gold"]["runs"][0].update(test_format=0.98),
    "a kept count": lambda r: r["arms"]["expert_iteration"]["runs"][2].update(kept_replies=70),
    "a rate chosen": lambda r: r.update(learning_rate_choice={"sft_imperfect_grpo": {}}),
    "sharpening undone": lambda r: r["passk"]["curves"]["sft_imperfect_seed0"].update({"1": 0.95}),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_planted_changed_results_fail_the_numbers(plant):
    r = copy.deepcopy(results())
    PLANTS[plant](r)
    assert number_problems(notebook(), r), f"a changed {plant} went unnoticed"


def test_planted_prose_number_without_an_output_fails():
    nb, r = copy.deepcopy(notebook()), results()
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            for out in cell.get("outputs", []):
                if "text" in out:
                    out["text"] = "".join(out["text"]).replace("0.781", "0.7xx")
    assert any("printed by no cell" in p for p in number_problems(nb, r))


# ---------------------------------------------------------------- no live cell scores the test split

#: The calls the test tensor may be passed to: its contents and keys, never a model.
ALLOWED = {"decode_numbers", "prompt_key", "key", "len", "cat", "set"}


def split_problems(nb: dict) -> list[str]:
    problems = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse("".join(cell["source"]))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "test" and isinstance(node.ctx, ast.Load):
                call = parents.get(node)
                while isinstance(call, (ast.List, ast.Tuple)):  # torch.cat([validation, test])
                    call = parents.get(call)
                func = getattr(call, "func", None)
                name = getattr(func, "attr", getattr(func, "id", None))
                if not isinstance(call, ast.Call) or name not in ALLOWED:
                    problems.append(f"cell {i} line {node.lineno}: the test split passed to {name}")
    return problems


def test_no_live_cell_scores_the_test_split():
    assert not split_problems(notebook())


def test_planted_live_test_evaluation_is_found():
    nb = copy.deepcopy(notebook())
    nb["cells"].append({"cell_type": "code", "source": [
        "R.evaluate(student, tokenizer, test, TEMPLATE, greedy=True)"], "outputs": []})  # fmt: skip
    assert split_problems(nb)


# ---------------------------------------------------------------- labels, the adapter, the runs


def label_problems(nb: dict, r: dict) -> list[str]:
    problems = []
    if "uses gold" not in r["arms"]["sft_gold"]["label"]:
        problems.append("the results' sft_gold label must say it uses gold answers")
    if (
        "| `sft_gold` | the same SFT on gold answers: the upper reference, **which uses gold answers** |"
        not in markdown(nb)
    ):
        problems.append("the arms table must say sft_gold uses gold answers")
    if "4-bit (Q4_1) GGUF, dequantized" not in markdown(nb):
        problems.append("the prose must say the weights are quantized to 4 bits")
    return problems


def test_the_gold_arm_and_the_weights_are_labelled():
    assert not label_problems(notebook(), results())


def test_planted_unlabelled_gold_arm_fails():
    nb, r = copy.deepcopy(notebook()), copy.deepcopy(results())
    r["arms"]["sft_gold"]["label"] = "SFT"
    assert label_problems(nb, r)
    for cell in nb["cells"]:
        cell["source"] = "".join(cell["source"]).replace("**which uses gold answers**", "")
    assert label_problems(nb, results())


def test_the_committed_adapter_is_the_one_the_runs_started_from():
    """The float16 copy's absolute sum equals the init_lora_abs_sum the seed-0 runs after SFT
    recorded when they loaded the float32 original (to float16 rounding)."""
    safetensors = pytest.importorskip("safetensors.torch")
    weights = safetensors.load_file(str(ADAPTER / "adapter_model.safetensors"))
    total = sum(float(v.float().abs().sum()) for v in weights.values())
    config = json.loads((ADAPTER / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "models/SmolLM2-135M-Instruct"
    assert len(weights) == 420 and config["r"] == 8
    for arm in ("sft_imperfect_grpo", "sft_imperfect_ei"):
        for path in sorted((RESULTS / "real_lm_verifier_runs").glob(f"{arm}_lr*_seed0.json")):
            record = json.loads(path.read_text())
            assert record["init_adapter"].endswith("sft_imperfect_seed0)")
            assert total == pytest.approx(record["init_lora_abs_sum"], rel=1e-5), path.name


def test_the_results_record_no_machine_folder_and_no_held_out_training():
    r = results()
    text = json.dumps(r)
    assert "/work/" not in text and "/home/" not in text and "/tmp/" not in text
    assert r["splits"]["test_guided_choice"] is None
    assert {run["heldout"] for a in r["arms"].values() for run in a["runs"]} == {0}
    assert {run["reply_tokens"] for a in r["arms"].values() for run in a["runs"]} == {16}


# ---------------------------------------------------------------- the live round's prose


def cell_output(nb: dict, cell_id: str) -> str:
    cell = next(c for c in nb["cells"] if c.get("id") == cell_id)
    return flat("".join("".join(o.get("text", "")) for o in cell.get("outputs", [])))


def live_problems(nb: dict) -> list[str]:
    """Section 7's prose against the stored outputs of its two live rounds (base: cell nb17-23,
    the sft_imperfect student: nb17-25): kept counts, GRPO's tied groups, the rejected kinds."""
    text, problems = markdown(nb), []
    rounds = {}
    for who, cell_id in (("base", "nb17-23"), ("student", "nb17-25")):
        out = cell_output(nb, cell_id)
        kept = re.search(r"the verifier keeps (\d+) of (\d+) sampled replies", out)
        varied = re.search(r"some advantage is not 0\): (\d+) of (\d+)", out)
        ranges = re.search(r"reward range per group (\[.*?\])(?: |$)", out)
        if not (kept and varied and ranges):
            return [
                f"the live round of {cell_id} prints no kept count, tied groups or reward range"
            ]
        rounds[who] = (
            *map(int, kept.groups()),
            *map(int, varied.groups()),
            ast.literal_eval(ranges[1]),
        )
    kept, sampled, varied, groups, ranges = rounds["base"]
    all_zero = all(r == (0.0, 0.0) for r in ranges)
    wanted = [f"{'none' if kept == 0 else kept} of the {sampled} sampled replies"]
    if varied == 0:
        wanted.append(f"({varied} of {groups} groups differ, printed above)")
    else:
        problems.append(f"'GRPO on the same samples has no signal either': {varied} groups differ")
    if kept == 0 and all_zero:
        wanted.append(f"({kept} of {sampled} replies kept, every GRPO reward 0)")
    else:
        problems.append("'What you learned' says 0 kept and every GRPO reward 0 in the base round")
    kept, sampled, varied, groups, _ = rounds["student"]
    wanted.append(f"from an SFT student ({kept} of {sampled} kept here)")
    if varied == groups:
        wanted.append(f"the rewards differ within all {groups} groups")
    else:
        problems.append(f"'the rewards differ within all {groups} groups': {varied} do")
    kinds = re.search(
        r"the rejected replies by kind of mistake: (\{.*?\})", cell_output(nb, "nb17-25")
    )
    kinds = ast.literal_eval(kinds[1]) if kinds else {}
    of_teacher = sum(v for k, v in kinds.items() if k != "other")
    wanted.append(f"{of_teacher} are of the teacher's kinds")
    wanted.append(f"and {kinds.get('other', 0)} are other errors")
    problems += [f"the prose lacks {w!r}" for w in wanted if w not in text]
    return problems


def test_the_live_rounds_prose_matches_their_outputs():
    problems = live_problems(notebook())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "old, new",
    [
        ("the verifier keeps 12 of 32", "the verifier keeps 20 of 32"),  # most kept after all
        ("not 0): 0 of 4", "not 0): 2 of 4"),  # GRPO had a signal on the base's replies
        ("'swapped_pair': 8", "'swapped_pair': 7"),  # a count of the rejected kinds
    ],
)
def test_planted_live_output_change_fails_the_prose(old, new):
    nb = copy.deepcopy(notebook())
    hits = 0
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            if "text" in out and old in "".join(out["text"]):
                out["text"] = "".join(out["text"]).replace(old, new)
                hits += 1
    assert hits == 1, f"{old!r} is in {hits} outputs"
    assert live_problems(nb), f"a changed live output ({old!r} -> {new!r}) went unnoticed"
