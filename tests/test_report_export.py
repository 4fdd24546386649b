"""Results a newcomer can paste, and a plan whose reasons are never cut: `export md`,
`cockpit results`, `cockpit plan`."""

from __future__ import annotations

import csv
import io
import json
import time

import yaml

from cockpit.core.outcome import FAILED, READY, Diagnosis
from cockpit.core.planner import plan_all, plan_layout
from cockpit.faces.cli import main
from cockpit.reports.comparison import comparison
from cockpit.reports.export import ReportContext, context_from_setup, markdown_report
from cockpit.reports.plan import format_table, plan_table, reason_text, terminal_width
from cockpit.store.journal import BenchPoint, Journal
from cockpit.store.profile import find_profile

CLOCK = 1_800_000_000.0
DATE = time.strftime("%Y-%m-%d %H:%M", time.localtime(CLOCK))
RESULTS = {"tp4": {1: 94.2, 32: 655.0}, "tp8 ep": {1: 77.1, 32: 830.4, 64: 1512.9}}


def journal_results(profile: str = "minimax-m2.5", input_len: int = 1024) -> None:
    """Two layouts benchmarked and one that failed, as `cockpit run` journals them."""
    with Journal() as journal:
        for layout, levels in RESULTS.items():
            exp = journal.start_experiment(
                profile=profile,
                model="MiniMaxAI/MiniMax-M2.5",
                engine="vllm",
                layout=layout,
                argv=[],
                gpus=list(range(8 if layout == "tp8 ep" else 4)),
            )
            journal.set_outcome(exp, READY)
            for c, tok_s in levels.items():
                point = BenchPoint(
                    c,
                    tok_s,
                    requests=8,
                    created=CLOCK,
                    input_len=input_len,
                    output_len=256,
                    ttft_ms_p50=41.5 + c,
                    ttft_ms_p99=1234.0,
                    itl_ms_p50=11.25,
                    itl_ms_p99=None if c == 64 else 25.0,
                )
                journal.add_point(exp, point)
        failed = journal.start_experiment(
            profile=profile, model="MiniMaxAI/MiniMax-M2.5", engine="vllm", layout="tp8", argv=[]
        )
        journal.set_outcome(
            failed, FAILED, diagnosis=Diagnosis("fp8-block", "192 is not a multiple of block_n 128")
        )


def minimax_comparison():
    with Journal() as journal:
        return comparison(journal, "minimax-m2.5")


# -- the report ------------------------------------------------------------------------------


def test_markdown_report_has_title_context_and_latency(minimax_vllm):
    journal_results()
    comp = minimax_comparison()
    text = markdown_report(comp, context_from_setup(minimax_vllm, "minimax-m2.5", comp))
    lines = text.splitlines()
    assert lines[0] == "## MiniMax-M2.5 on 8 × RTX PRO 6000 Blackwell · vLLM"
    assert "- Model: `MiniMaxAI/MiniMax-M2.5` (FP8 block 128x128)" in lines
    assert "- Engine: vLLM" in lines  # no version is journaled, so none is printed
    assert "- GPUs: 8 × RTX PRO 6000 Blackwell (94.97 GiB, PCIe 5)" in lines
    assert "- Request lengths: input 1024 tokens, output 256 tokens" in lines
    assert "- Profile: minimax-m2.5" in lines
    assert f"- Date: {DATE}" in lines
    assert "unknown" not in text
    assert "| Layout | C=1 tok/s | C=32 | C=64 | Peak |" in lines
    assert "| tp8 ep | 77.1 | **830.4** | 1,513 | **1,513 (C=64)** |" in lines
    assert any(line.startswith("| tp8 | failed: 192 is not a multiple") for line in lines)
    assert "### Output tok/s · in=1024 out=256" in lines  # what the table compares, in its heading
    assert "### Latency (ms) · in=1024 out=256" in lines
    assert "| Layout | C | tok/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 |" in lines
    assert "| tp4 | 32 | 655.0 | 73.5 | 1,234 | 11.2 | 25.0 |" in lines
    assert "| tp8 ep | 64 | 1,513 | 105.5 | 1,234 | 11.2 | - |" in lines  # p99 not measured
    assert not any(
        line.startswith("| tp8 |") for line in lines[lines.index("### Latency (ms) · in=1024 out=256") :]
    )


def test_report_lists_differing_lengths_and_leaves_out_what_is_unknown():
    journal_results()
    comp = minimax_comparison()
    context = ReportContext(
        model="/models/Foo-7B/config.json",
        engine="SGLang",
        gpu_count=4,
        input_lens=(512, 1024),
        output_lens=(256,),
        date="2027-01-01 10:00",
    )
    lines = markdown_report(comp, context).splitlines()
    assert lines[0] == "## Foo-7B on 4 GPUs · SGLang"
    assert "- Request lengths: input 512 and 1024 tokens, output 256 tokens" in lines
    assert "- GPUs: 4 GPUs" in lines and not any(line.startswith("- Profile") for line in lines)


def test_export_md_writes_the_report(tmp_path):
    from cockpit.faces.tui.session import Session

    journal_results()
    session = Session.open("minimax-m2.5", sim=True)
    try:
        path = session.export("md", folder=tmp_path, now=CLOCK)
        text = path.read_text()
        csv_text = session.export("csv", folder=tmp_path / "csv", now=CLOCK).read_text()
    finally:
        session.close()
    assert path.suffix == ".md" and text.startswith("## MiniMax-M2.5 on 8 × RTX PRO 6000 Blackwell · vLLM\n")
    for line in [
        "- Model: `MiniMaxAI/MiniMax-M2.5` (FP8 block 128x128)",
        "- Engine: vLLM",
        "- GPUs: 8 × RTX PRO 6000 Blackwell (94.97 GiB, PCIe 5)",
        "- Request lengths: input 1024 tokens, output 256 tokens",
        f"- Date: {DATE}",
    ]:
        assert line in text.splitlines()
    assert "TTFT p50 | TTFT p99 | ITL p50 | ITL p99" in text
    assert csv_text.startswith("layout,engine,experiment")  # csv stays as it was


def test_export_md_without_results_dates_the_export(tmp_path):
    from cockpit.faces.tui.session import Session

    session = Session.open("minimax-m2.5", sim=True)
    try:
        text = session.export("md", folder=tmp_path, now=CLOCK).read_text()
    finally:
        session.close()
    assert text.startswith("## MiniMax-M2.5 on 8 × RTX PRO 6000") and f"- Date: {DATE}" in text
    assert "No benchmark results yet." in text


# -- cockpit results -----------------------------------------------------------------------------


def test_results_without_profile_names_the_one_it_shows(capsys):
    journal_results()
    assert main(["results"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "profile minimax-m2.5 (the newest experiment's; --profile NAME picks another)"
    assert out[1] == "in=1024 out=256" and out[2].startswith("layout")


def test_results_csv_and_json_keep_stdout_machine_readable(capsys):
    journal_results()
    assert main(["results", "--format", "csv"]) == 0
    captured = capsys.readouterr()
    assert "profile minimax-m2.5 (the newest experiment's" in captured.err
    assert list(csv.DictReader(io.StringIO(captured.out)))[0]["layout"] == "tp4"
    assert main(["results", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert "profile minimax-m2.5" in captured.err and json.loads(captured.out)[0]["layout"] == "tp4"


def test_results_markdown_is_the_export_report(capsys):
    journal_results()
    assert main(["results", "--format", "markdown"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0] == "## MiniMax-M2.5 on 8 × RTX PRO 6000 Blackwell · vLLM"
    assert "- Profile: minimax-m2.5 (the newest experiment's)" in lines
    assert "| Layout | C | tok/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 |" in lines
    assert "--profile NAME picks another" in captured.err


def test_results_named_profile_says_nothing_extra(capsys):
    journal_results()
    assert main(["results", "--profile", "minimax-m2.5"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("in=1024 out=256\nlayout") and captured.err == ""


def test_results_takes_the_yaml_path_run_took(capsys, tmp_path):
    data = yaml.safe_load(find_profile("minimax-m2.5").read_text())
    data["hardware"]["gpu"] = "h200"
    path = tmp_path / "my-box.yaml"
    path.write_text(yaml.safe_dump(data))
    journal_results(profile="my-box")  # what `cockpit run --profile my-box.yaml` journals
    journal_results(profile="other")  # newer, so a bare `results` would show this one
    assert main(["results", "--profile", str(path), "--format", "markdown"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "## MiniMax-M2.5 on 8 × H200 SXM 141GB · vLLM" and "- Profile: my-box" in out

    data["name"] = "named-inside"
    path.write_text(yaml.safe_dump(data))
    journal_results(profile="named-inside")
    assert main(["results", "--profile", str(path)]) == 0
    assert capsys.readouterr().out.startswith("in=1024 out=256\nlayout")


def test_results_of_a_deleted_profile_uses_the_journal(capsys):
    journal_results(profile="gone", input_len=2048)
    assert main(["results", "--profile", "gone", "--format", "markdown"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "## MiniMax-M2.5 on 8 GPUs · vLLM"
    assert "- Model: `MiniMaxAI/MiniMax-M2.5`" in lines and "- Profile: gone" in lines
    assert "- Request lengths: input 2048 tokens, output 256 tokens" in lines


def test_results_with_an_empty_journal_gives_the_hint(capsys):
    assert main(["results", "--format", "markdown"]) == 0
    assert capsys.readouterr().out.startswith("no benchmark results yet")


# -- cockpit plan --------------------------------------------------------------------------------


def test_kimi_tp4_ep2_shows_the_engines_oom_text(kimi_sglang):
    verdict = plan_layout(kimi_sglang, "tp4 ep2")
    short = reason_text(verdict.reasons[0])
    assert short.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ")
    assert short.endswith("MiB (weights need 139.9 GiB per GPU on 4 GPUs, each GPU has 94.97 GiB)")
    full = reason_text(verdict.reasons[0], full=True)
    assert "of which" in full and "Including non-PyTorch memory" in full


def test_plan_piped_keeps_a_long_reason_whole(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # a narrow terminal's setting must not cut a pipe's lines
    assert main(["plan", "--profile", "kimi-k2.6", "--layout", "tp4 ep2"]) == 0
    out = capsys.readouterr().out
    [row] = [line for line in out.splitlines() if line.startswith("tp4 ep2")]
    assert "…" not in out
    assert "CUDA out of memory. Tried to allocate 1512.00 MiB. GPU 0 has a total capacity of 94.97 GiB" in row
    assert row.endswith("memory in use. (weights need 139.9 GiB per GPU on 4 GPUs, each GPU has 94.97 GiB)")


def test_plan_of_one_layout_shows_every_reason(capsys):
    assert main(["plan", "--profile", "minimax-m2.5", "--layout", "tp7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("tp7 "))
    column = lines[1].index("reason")
    reasons = [lines[start][column:], *(line[column:] for line in lines[start + 1 : -1])]
    assert all(not line[:column].strip() for line in lines[start + 1 : -1])  # under the reason column
    assert len(reasons) == 4 and reasons[0].startswith("Value error, Total number of attention heads (48)")
    assert any("(attention o_proj: 6144 / 7 = 877" in r for r in reasons)


def test_plan_wraps_reasons_to_the_terminal_width(kimi_sglang):
    verdicts = plan_all(kimi_sglang, ["tp8", "tp4 ep2", "tp7"])
    text = plan_table(verdicts, (1, 32), width=110)
    lines = text.splitlines()
    column = lines[0].index("reason")
    assert all(len(line) <= 110 for line in lines)
    start = next(i for i, line in enumerate(lines) if line.startswith("tp4 ep2"))
    block = [lines[start]] + [line for line in lines[start + 1 :] if not line[:column].strip()][:20]
    end = next(
        (i for i, line in enumerate(lines[start + 1 :], start + 1) if line[:column].strip()), len(lines)
    )
    joined = " ".join(line[column:].strip() for line in lines[start:end])
    assert len(block) > 1 and end - start > 1
    assert joined == reason_text(plan_layout(kimi_sglang, "tp4 ep2").reasons[0])


def test_format_table_wraps_only_with_a_width():
    rows = [["a", "one two three four five six seven eight nine ten eleven twelve"], ["bb", "short"]]
    whole = format_table(["x", "reason"], rows).splitlines()
    assert whole[2] == "a   one two three four five six seven eight nine ten eleven twelve"
    wrapped = format_table(["x", "reason"], rows, width=24).splitlines()
    assert wrapped[2:] == [
        "a   one two three four",
        "    five six seven eight",
        "    nine ten eleven",
        "    twelve",
        "bb  short",
    ]
    several = format_table(
        ["x", "reason"], [["a", "first reason is long enough\nsecond"]], width=24
    ).splitlines()
    assert several[2:] == ["a  first reason is long", "     enough", "   second"]  # continuations hang


def test_terminal_width_only_for_a_terminal(monkeypatch):
    import sys

    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    assert terminal_width() is None
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setenv("COLUMNS", "123")
    assert terminal_width() == 123


# -- predicted beside measured in the exported table ---------------------------------------------


def predict_at_launch(
    layout: str, predicted: dict[int, float], input_len: int = 1024, speed: str = ""
) -> None:
    """Journal what the planner predicted when `layout` was launched, as the launcher does."""
    with Journal() as journal:
        [exp] = [e for e in journal.experiments("minimax-m2.5") if e.layout == layout]
        tok_s = {f"{input_len}/256": {str(c): v for c, v in predicted.items()}}
        record: dict = {"tok_s": tok_s, "learned_runs": 0}
        if speed:
            record["speed"] = speed
        journal.update_experiment(exp.id, predicted=record)


def test_exported_table_shows_predicted_tok_s_only_when_asked(minimax_vllm):
    journal_results()
    comp = minimax_comparison()
    plain = markdown_report(comp, context_from_setup(minimax_vllm, "minimax-m2.5", comp))
    predict_at_launch("tp4", {1: 90.0, 32: 700.0})
    predict_at_launch("tp8 ep", {32: 790.0})
    comp = minimax_comparison()
    context = context_from_setup(minimax_vllm, "minimax-m2.5", comp)
    assert markdown_report(comp, context) == plain  # off by default: the table as it always was
    lines = markdown_report(comp, context, predicted=True).splitlines()
    assert "| Layout | C=1 tok/s | C=32 | C=64 | Peak |" in lines
    assert "| tp4 | **94.2 (90.0)** | 655.0 (700.0) | - | 655.0 (C=32) |" in lines
    assert "| tp8 ep | 77.1 | **830.4 (790.0)** | 1,513 | **1,513 (C=64)** |" in lines  # none at C=1, 64
    assert "_In parentheses: the tok/s predicted for that level when the layout was launched._" in lines


KERNELS_LABEL = "measured kernels (AIConfigurator 0.12.0, h200_sxm, vllm 0.24.0)"


def test_exports_say_which_source_predicted_each_layout(minimax_vllm, capsys):
    journal_results()
    predict_at_launch("tp4", {1: 90.0, 32: 700.0}, speed="analytic model")
    predict_at_launch("tp8 ep", {32: 790.0}, speed=KERNELS_LABEL)
    comp = minimax_comparison()
    lines = markdown_report(comp, context_from_setup(minimax_vllm, "minimax-m2.5", comp), predicted=True)
    assert "_Predicted by analytic model: tp4._" in lines.splitlines()
    assert f"_Predicted by {KERNELS_LABEL}: tp8 ep._" in lines.splitlines()
    assert main(["results", "--format", "csv", "--predicted"]) == 0
    rows = {(r["layout"], r["concurrency"]): r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert rows["tp4", "32"]["predicted_by"] == "analytic model"
    assert rows["tp8 ep", "32"]["predicted_by"] == KERNELS_LABEL
    assert rows["tp8 ep", "1"]["predicted_by"] == ""  # nothing predicted at that level


def test_results_csv_and_table_take_the_predicted_option(capsys):
    journal_results()
    predict_at_launch("tp4", {1: 90.0, 32: 700.0})
    assert main(["results", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(",best")  # unchanged without the option
    assert main(["results", "--format", "csv", "--predicted"]) == 0
    rows = {(r["layout"], r["concurrency"]): r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert rows["tp4", "32"]["predicted_tok_s"] == "700.0"
    assert rows["tp4", "32"]["measured_over_predicted"] == "0.936"
    assert rows["tp8 ep", "32"]["predicted_tok_s"] == "" and rows["tp8", ""]["predicted_tok_s"] == ""
    assert main(["results", "--profile", "minimax-m2.5", "--predicted"]) == 0
    out = capsys.readouterr().out.splitlines()
    [tp4] = [line for line in out if line.startswith("tp4 ")]
    assert "94.2 (90.0)" in tp4 and "655.0 (700.0)" in tp4
    assert out[-1] == "In parentheses: the tok/s predicted for that level when the layout was launched."


def test_report_names_the_engine_version_the_launches_ran(minimax_vllm):
    journal_results()
    with Journal() as journal:
        for exp in journal.experiments("minimax-m2.5"):
            journal.update_experiment(exp.id, engine_version="0.33.0")  # as cockpit knew it at launch
    comp = minimax_comparison()
    lines = markdown_report(comp, context_from_setup(minimax_vllm, "minimax-m2.5", comp)).splitlines()
    assert lines[0] == "## MiniMax-M2.5 on 8 × RTX PRO 6000 Blackwell · vLLM 0.33.0"
    assert "- Engine: vLLM 0.33.0" in lines
    with Journal() as journal:
        [tp4] = [e for e in journal.experiments("minimax-m2.5") if e.layout == "tp4"]
        journal.update_experiment(tp4.id, facts={"engine_version": "0.32.1"})  # what its engine logged
    comp = minimax_comparison()
    assert "- Engine: vLLM 0.32.1, 0.33.0" in markdown_report(
        comp, context_from_setup(minimax_vllm, "minimax-m2.5", comp)
    )
