"""summary.html of `massgen-mcp eval`: the verdict, the chart, escaping, no network, and a real
browser."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from massgen_mcp.evaluation import cost_chart, report
from massgen_mcp.evaluation.summary import EvalSummary, MethodScore, format_table
from tests.npm_clients import chromium, needs_browser

HOSTILE = ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>']
POINT = re.compile(r'<g class="point"')


def method(name: str, kind: str, accuracy: float, interval: list[float] | None, correct: int,
           calls: float, cost: float | None) -> dict[str, Any]:
    return {"name": name, "kind": kind, "accuracy": accuracy, "interval": interval,
            "correct": correct, "n": 4, "mean_calls": calls, "mean_tokens": 812.5 * calls,
            "cost_usd": None if cost is None else cost * 4,
            "cost_per_question": cost,
            "cost_per_correct": None if cost is None or not correct else cost * 4 / correct,
            "mean_seconds": 1.5 * calls}


def realistic() -> dict[str, Any]:
    names = ["consensus", "alone: a (openai/gpt-4o-mini)", "alone: b (openai/gpt-4.1-nano)",
             "majority of first drafts", "any member right (ceiling)"]
    return {
        "name": "gsm8k-small", "questions": 4, "of": 1319,
        "settings": {"team": "trio", "models": ["openai/gpt-4o-mini", "openai/gpt-4.1-nano"],
                     "dataset": "hf:openai/gsm8k", "seed": 7, "limit": 4, "baselines": True,
                     "decide": None},
        "methods": [
            method(names[0], "consensus", 0.75, [0.25, 1.0], 3, 7.0, 0.0042),
            method(names[1], "member", 0.5, [0.0, 1.0], 2, 1.0, 0.0004),
            method(names[2], "member", 0.25, [0.0, 0.75], 1, 1.0, 0.0001),
            method(names[3], "majority", 0.5, [0.0, 1.0], 2, 2.0, 0.0005),
            method(names[4], "ceiling", 0.75, [0.25, 1.0], 3, 2.0, 0.0005),
        ],
        "best_member": {"name": names[1], "chosen_by": "accuracy on these questions",
                        "warning": "chosen on the same questions it is compared on"},
        "all_wrong": 0.25,
        "comparisons": [
            {"a": names[0], "b": names[1], "a_only": 1, "b_only": 0, "both": 2, "neither": 1,
             "p_value": 1.0},
            {"a": names[0], "b": names[3], "a_only": 1, "b_only": 0, "both": 2, "neither": 1,
             "p_value": 1.0},
        ],
        "items": [
            {"question": f"Question {i}: what is {i} plus {i}? " + "long words " * 40 * (i == 0),
             "expected": str(2 * i), "source": f"test/{i}",
             "correct": {names[0]: i != 3, names[1]: i < 2, names[2]: i == 0,
                         names[3]: i < 2, names[4]: None if i == 2 else i != 3}}
            for i in range(4)],
    }


def unpriced() -> dict[str, Any]:
    summary = realistic()
    for m in summary["methods"]:
        m["cost_usd"] = m["cost_per_question"] = m["cost_per_correct"] = None
    return summary


def single() -> dict[str, Any]:
    summary = realistic()
    summary["methods"] = summary["methods"][:1]
    summary.update(best_member=None, all_wrong=None, comparisons=[])
    for item in summary["items"]:
        item["correct"] = {"consensus": item["correct"]["consensus"]}
    return summary


def hostile() -> dict[str, Any]:
    summary = realistic()
    evil = "".join(HOSTILE)
    renamed = {m["name"]: f"{m['name']} {evil}" for m in summary["methods"]}
    for m in summary["methods"]:
        m["name"] = renamed[m["name"]]
    for c in summary["comparisons"]:
        c["a"], c["b"] = renamed[c["a"]], renamed[c["b"]]
    summary["best_member"]["name"] = renamed[summary["best_member"]["name"]]
    summary["best_member"]["warning"] = evil
    for item in summary["items"]:
        item.update(question=f"Why? {evil}", expected=evil, source=evil,
                    correct={renamed[k]: v for k, v in item["correct"].items()})
    summary["name"] = evil
    summary["settings"] = {evil: evil, "models": [evil, "b"]}
    return summary


def render_eval_summary(summary: dict[str, Any]) -> str:
    """The page of a summary given as summarise's JSON shape (these tests edit it as dicts)."""
    return report.render_eval_summary(EvalSummary.model_validate(summary))


def verdict(summary: dict[str, Any]) -> str:
    return report.verdict(EvalSummary.model_validate(summary))


def svg_of(page: str) -> str:
    match = re.search(r"<svg.*?</svg>", page, re.DOTALL)
    assert match is not None
    return match.group(0)


def check_page(page: str, summary: dict[str, Any]) -> None:
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "style-src 'unsafe-inline'; img-src data:\">") in page
    assert "http://" not in page and "https://" not in page, "no network needed"
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert re.findall(r'(?:src|href)="([^"]*)"', page) == ["data:,"], "nothing to fetch"
    svg = svg_of(page)
    assert len(POINT.findall(svg)) == len(summary["methods"])
    numbers = re.findall(r'\b(?:x|y|x1|x2|y1|y2|cx|cy|r|width|height|d|transform|viewBox)="'
                         r'([^"]*)"', svg)
    assert numbers and not [n for n in numbers if re.search("nan|inf", n.lower())]
    assert page.count('<tr class="item">') == len(summary["items"])


def test_realistic_page_has_verdict_chart_tables_and_settings() -> None:
    summary = realistic()
    page = render_eval_summary(summary)
    check_page(page, summary)
    assert ("<strong>consensus</strong> 75 % [25–100] vs best member "
            "<strong>alone: a (openai/gpt-4o-mini)</strong> 50 % [0–100]: p = 1.00 "
            "(McNemar, 1 vs 0 discordant): no clear difference") in page
    assert "cost per question (USD)" in page and "$0.0042" in page and "$0.0056" in page
    assert "chosen on the same questions it is compared on" in page and "25 %" in page
    long_question = summary["items"][0]["question"]
    assert f'title="{long_question}"' in page and f">{long_question}<" not in page
    assert '<th class="mark" title="alone: a (openai/gpt-4o-mini)">alone: a</th>' in page
    assert page.count("✓</td>") == 10 and page.count("✗</td>") == 9
    assert page.count('title="not scored">–</td>') == 1
    assert "<dt>models</dt><dd>openai/gpt-4o-mini, openai/gpt-4.1-nano</dd>" in page
    assert "<dt>baselines</dt><dd>yes</dd>" in page and "<dt>decide</dt><dd>–</dd>" in page
    assert page.index("Accuracy and cost") < page.index("Methods") < page.index("Paired tests")
    assert page.index("Best member") < page.index("Questions") < page.index("Settings")


def test_verdict_names_the_better_method_only_when_the_test_says_so() -> None:
    summary = realistic()
    test = summary["comparisons"][0]
    test.update(a_only=12, b_only=2, p_value=0.0129)
    assert verdict(summary).endswith(
        "p = 0.0129 (McNemar, 12 vs 2 discordant): <strong>consensus</strong> is better")
    test.update(a_only=1, b_only=11, p_value=0.0063)
    assert verdict(summary).endswith(
        "<strong>alone: a (openai/gpt-4o-mini)</strong> is better")
    test.update(p_value=0.05)
    assert verdict(summary).endswith("no clear difference")


def test_unknown_costs_put_model_calls_on_the_x_axis() -> None:
    summary = unpriced()
    page = render_eval_summary(summary)
    check_page(page, summary)
    assert "mean model calls per question (no cost known)" in page
    assert "cost per question (USD)" not in page and page.count(">unknown</td>") == 10
    partly = realistic()
    partly["methods"][1]["cost_per_question"] = None  # one unpriced member: its own column
    page = render_eval_summary(partly)
    check_page(page, partly)
    assert "cost per question (USD)" in page and ">unknown</text>" in svg_of(page)


def test_a_single_method_without_comparisons() -> None:
    summary = single()
    page = render_eval_summary(summary)
    check_page(page, summary)
    assert '<p id="verdict" class="card"><strong>consensus</strong> 75 % [25–100].</p>' in page
    assert "No paired tests." in page and "No best member" in page
    assert "every member got wrong: <strong>unknown</strong>" in page


def test_degenerate_numbers_never_reach_the_svg() -> None:
    summary = single()
    summary["methods"][0].update(accuracy=float("nan"), interval=[float("-inf"), float("nan")],
                                 cost_per_question=float("inf"), mean_calls=0.0)
    page = render_eval_summary(summary)
    check_page(page, summary)
    huge = realistic()  # x * 1.05 overflows to infinity
    huge["methods"][0].update(cost_per_question=1e308, interval=[0.9, 0.1])
    check_page(render_eval_summary(huge), huge)
    empty = realistic()
    empty.update(methods=[], comparisons=[], items=[], best_member=None, settings={})
    page = render_eval_summary(empty)
    assert "No method was scored." in page and "<svg" not in page


def test_the_table_and_the_page_write_money_alike() -> None:
    """One money format: the terminal's table once wrote 0.0042 where the page wrote $0.0042."""
    summary = realistic()
    table, page = format_table(EvalSummary.model_validate(summary)), render_eval_summary(summary)
    consensus = table.splitlines()[1]
    assert "$0.0042" in consensus and "$0.0056" in consensus
    assert "$0.0042" in page and "$0.0056" in page
    summary["methods"][0]["cost_per_question"] = 0.0
    assert "        $0 " in format_table(EvalSummary.model_validate(summary)).splitlines()[1]


def test_hostile_strings_are_escaped_everywhere() -> None:
    summary = hostile()
    page = render_eval_summary(summary)
    check_page(page, summary)
    assert "<script>" not in page and '"><img' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" \
        in page
    assert page.count("&lt;script&gt;") > 20  # title, verdict, chart, tables, settings


@needs_browser
def test_summary_renders_in_a_real_browser_and_fetches_nothing(tmp_path: Path) -> None:
    for label, summary in (("realistic", realistic()), ("hostile", hostile())):
        path = tmp_path / f"{label}.html"
        path.write_text(render_eval_summary(summary), encoding="utf-8")
        # Every request the page would make (a blocked one too) is a CSP report on the console.
        dom = chromium("--dump-dom", "--enable-logging=stderr", "--v=0", path.as_uri(),
                       tmp=tmp_path)
        assert dom.returncode == 0, dom.stderr[-2000:]
        assert "Refused to" not in dom.stderr and "Content Security Policy" not in dom.stderr
        assert "<svg" in dom.stdout and "<script" not in dom.stdout.lower()
        assert len(POINT.findall(dom.stdout)) == len(summary["methods"])
        assert dom.stdout.count('<tr class="item">') == 4
        assert "<img" not in dom.stdout
        assert ("alert(1)" in dom.stdout) is (label == "hostile")  # shown as text, not run
        links = re.findall(r'\b(?:src|href|xlink:href)="([^"]*)"', dom.stdout)
        assert all(link.startswith(("#", "data:")) for link in links), links
    shot = tmp_path / "summary.png"  # kept as this test run's artifact
    picture = chromium(f"--screenshot={shot}", "--window-size=1200,1800",
                       (tmp_path / "realistic.html").as_uri(), tmp=tmp_path)
    assert picture.returncode == 0 and shot.stat().st_size > 10_000


MARK = re.compile(r'class="mark[^"]*" (?:cx="([\d.]+)" cy="([\d.]+)"|d="M([\d.]+) ([\d.]+)'
                  r'|x="([\d.]+)" y="([\d.]+)")')
LABEL = re.compile(r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="\w+">([^<]*)</text></g>')


def pairs(svg: str) -> list[tuple[str, tuple[float, float], tuple[float, float]]]:
    """(label, its marker's centre, where the label meets the eye: its anchor) per point."""
    found = []
    for group in re.findall(r'<g class="point".*?</g>', svg):
        mark, label = MARK.search(group), LABEL.search(group)
        assert mark and label, group
        cx, cy, px, py, rx, ry = mark.groups()
        centre = ((float(cx), float(cy)) if cx else (float(px), float(py) + 6) if px
                  else (float(rx) + 4.5, float(ry) + 4.5))  # circle, triangle/diamond, square
        found.append((label.group(3), centre, (float(label.group(1)),
                                                float(label.group(2)) - 4)))
    return found


def test_each_label_sits_nearest_its_own_point_when_points_coincide() -> None:
    """The team consensus, the self-consistency baseline and the ceiling often land on the
    same accuracy and calls: their markers sit 7 px apart, and a label put beside one of them
    on the far side of another was read as the other's (the dot carried 'self-consistency',
    the triangle 'consensus')."""
    ok, bar = 0.8, [0.4, 1.0]  # the same accuracy and interval
    cases = [
        [method("consensus", "consensus", ok, bar, 4, 7, None),
         method("alone: agent_a (openai/a)", "member", 0.6, [0.2, 1.0], 3, 1, None),
         method("majority of first drafts", "majority", 0.2, [0.0, 0.6], 1, 3, None),
         method("self-consistency: agent_a ×7", "self_consistency", ok, bar, 4, 7, None),
         method("any member right (ceiling)", "ceiling", ok, bar, 4, 7, None)],
        [method("consensus", "consensus", ok, bar, 4, 3, 0.002),
         method("self-consistency: b ×3", "self_consistency", ok, bar, 4, 3, 0.002),
         method("alone: b (openai/b)", "member", 0.5, [0.1, 0.9], 2, 1, 0.0007)],
        [method("consensus", "consensus", ok, bar, 4, 1, None),
         method("self-consistency: a ×1", "self_consistency", ok, bar, 4, 1, None)],
    ]
    for methods in cases:
        found = pairs(cost_chart.chart([MethodScore.model_validate(m) for m in methods]))
        assert len(found) == len(methods)
        for label, centre, anchor in found:
            own = math.dist(centre, anchor)
            others = [math.dist(c, anchor) for name, c, _ in found if name != label]
            assert all(own < other for other in others), (label, centre, anchor, found)
