"""The launch's typed records: what the engine logged and what the planner predicted, written and
read by the same classes; old journals' JSON still reads, a value of the wrong type is refused in
one line (or, read back from a hand-edited journal, reads as unknown)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from cockpit.core.records import BadRecord, LaunchFacts, LaunchPrediction, PredictedMemory
from cockpit.store.journal import Journal

FACTS = {
    "weights_gib": 53.63,
    "weights_seconds": 78.1142,
    "graph_gib": -0.02,  # the engine's own figure: a capture may free a little
    "kv_memory_gib": 29.1,
    "kv_tokens": 492117,
    "max_concurrency": 2.5,
    "weights_ranks": 1,
    "max_concurrency_len": 196608,
    "engine_version": "0.33.0",
}

# As cockpit journaled it before the records: MemoryEstimate.to_json at launch, a bench's tok/s merged in.
OLD_PREDICTED = {
    "memory": {
        "capacity_gib": 95.0,
        "weights_gib": 53.63,
        "weights_by_group_gib": {"attention": 3.1, "experts": 48.0},
        "reserve_gib": 4.2,
        "budget_gib": 85.5,
        "kv_budget_gib": 27.67,
        "kv_bytes_per_token": 61440,
        "kv_tokens": 492117,
        "max_concurrency": 2.5,
        "busiest_gpu": 0,
        "expert_layer_bytes": 805306368,
        "activation_gib": 1.2,
        "graph_gib": 0.71,
        "non_torch_gib": 0.5,
    },
    "learned_runs": 3,
    "tok_s": {"1024/1024": {"1": 26.0, "32": 570.0}, "256/128": {"1": 30.0}},
}


def test_launch_facts_round_trip_and_say_whether_anything_was_logged():
    facts = LaunchFacts.from_json(FACTS)
    assert (facts.weights_gib, facts.kv_tokens, facts.engine_version) == (53.63, 492117, "0.33.0")
    assert facts.to_json() == FACTS and LaunchFacts.from_json(facts.to_json()) == facts
    assert facts and not LaunchFacts() and LaunchFacts().to_json() == {}


def test_a_prediction_round_trips_to_the_json_cockpit_always_wrote():
    prediction = LaunchPrediction.from_json(OLD_PREDICTED)
    assert prediction.memory is not None
    assert (prediction.memory.weights_gib, prediction.memory.kv_tokens, prediction.learned_runs) == (
        53.63,
        492117,
        3,
    )
    assert prediction.tok_s_at(1024, 1024, 32) == 570.0 and prediction.tok_s_at(1024, 1024, 64) is None
    assert prediction.to_json() == OLD_PREDICTED
    assert json.dumps(prediction.to_json()) == json.dumps(OLD_PREDICTED)  # key for key, number for number


def test_the_memory_journaled_at_launch_is_the_planners_estimate_as_it_wrote_it(minimax_vllm):
    from cockpit.core.planner import plan_layout
    from cockpit.runner.experiment import predicted_at_launch

    verdict = plan_layout(minimax_vllm, "tp4")
    assert verdict.memory is not None
    written = predicted_at_launch(minimax_vllm, verdict).to_json()
    assert written == {
        "memory": verdict.memory.to_json(),
        "learned_runs": minimax_vllm.learned.runs,
        "speed": "analytic model",  # the fixture's setup has no measured kernels
    }
    assert json.dumps(written["memory"]) == json.dumps(verdict.memory.to_json())


@pytest.mark.parametrize(
    "old",
    [
        {},  # a launch journaled before predictions were
        {"memory": None, "learned_runs": 0},  # the planner had no estimate
        {"memory": {"weights_gib": 53.63, "kv_tokens": 492117}, "learned_runs": 3},  # before graph_gib
        {"tok_s": {"64/16": {"1": 30.5}}, "learned_runs": 0},  # a bench's part alone
        {"memory": {"weights_gib": 1.0}, "some_newer_key": [1, 2]},  # a newer cockpit's: passed over
    ],
)
def test_old_and_partial_predictions_read(old):
    prediction = LaunchPrediction.from_json(old)
    assert LaunchPrediction.sound(old) == prediction
    kept = {key: value for key, value in old.items() if key != "some_newer_key"}
    assert {k: v for k, v in prediction.to_json().items() if k in kept} == kept


@pytest.mark.parametrize(
    ("record", "data", "words"),
    [
        (LaunchFacts, {"kv_tokens": "431204"}, "the launch facts: kv_tokens is '431204', not a whole number"),
        (LaunchFacts, {"weights_gib": True}, "the launch facts: weights_gib is True, not a number"),
        (LaunchFacts, {"kv_tokens": 1.5}, "kv_tokens is 1.5, not a whole number"),
        (LaunchFacts, {"engine_version": 33}, "engine_version is 33, not a text"),
        (LaunchFacts, [1, 2], "the launch facts is [1, 2], not a JSON object"),
        (LaunchPrediction, {"learned_runs": "3"}, "learned_runs is '3', not a whole number"),
        (LaunchPrediction, {"memory": 53.6}, "the predicted memory is 53.6, not a JSON object"),
        (LaunchPrediction, {"memory": {"kv_tokens": "many"}}, "the predicted memory: kv_tokens is 'many'"),
        (LaunchPrediction, {"tok_s": {"1024": {"1": 26.0}}}, "'1024' is not <input>/<output> tokens"),
        (LaunchPrediction, {"tok_s": {"1024/1024": {"one": 26.0}}}, "'one' is not a concurrency"),
        (LaunchPrediction, {"tok_s": {"1024/1024": {"1": "fast"}}}, "'1' is 'fast', not a number"),
        (PredictedMemory, {"weights_by_group_gib": {"experts": None}}, "'experts' is None, not a number"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_in_one_line(record, data, words):
    with pytest.raises(BadRecord) as refused:
        record.from_json(data)
    assert words in str(refused.value) and "\n" not in str(refused.value)
    assert isinstance(record.sound(data), record)  # read back from a journal: made sound instead


def test_a_hand_edited_value_reads_as_unknown_and_the_rest_of_the_row_reads(tmp_path):
    path = tmp_path / "journal.sqlite"
    with Journal(path) as journal:
        exp = journal.start_experiment(
            profile="p",
            model="m",
            engine="vllm",
            layout="tp4",
            argv=["vllm", "serve", "m"],
            predicted=LaunchPrediction.from_json(OLD_PREDICTED),
        )
        journal.set_facts(exp, LaunchFacts.from_json(FACTS))
    broken_facts = {**FACTS, "kv_tokens": "lots", "weights_gib": None}
    broken_prediction = {
        **OLD_PREDICTED,
        "learned_runs": "three",
        "tok_s": {"1024/1024": {"1": "x", "32": 570.0}},
    }
    sqlite3.connect(path, isolation_level=None).execute(
        "UPDATE experiments SET facts = ?, predicted = ?",
        (json.dumps(broken_facts), json.dumps(broken_prediction)),
    )
    with Journal(path) as journal:
        got = journal.experiment(exp)
    assert got is not None
    assert (got.launch_facts.kv_tokens, got.launch_facts.weights_gib, got.launch_facts.kv_memory_gib) == (
        None,
        None,
        29.1,
    )
    assert got.prediction.learned_runs is None
    assert got.prediction.tok_s == {(1024, 1024): {32: 570.0}}
    assert got.prediction.memory == LaunchPrediction.from_json(OLD_PREDICTED).memory


def test_the_journal_checks_what_it_is_given_to_write(tmp_path):
    with Journal(tmp_path / "journal.sqlite") as journal:
        exp = journal.start_experiment(profile="p", model="m", engine="vllm", layout="tp4", argv=["vllm"])
        with pytest.raises(BadRecord, match="kv_tokens is 'lots'"):
            journal.set_facts(exp, {"kv_tokens": "lots"})
        with pytest.raises(BadRecord, match="not a concurrency"):
            journal.merge_predicted(exp, {"tok_s": {"64/16": {"all": 1.0}}})
        with pytest.raises(BadRecord, match="learned_runs"):
            journal.update_experiment(exp, predicted={"learned_runs": -0.5})
        journal.set_facts(exp, {"kv_tokens": 1000})  # JSON of the right types: written as given
        assert journal.experiment(exp).launch_facts == LaunchFacts(kv_tokens=1000)


# -- a layout's knobs ----------------------------------------------------------------------------


def test_knobs_read_back_as_they_were_written_with_secrets_blanked():
    from cockpit.core.errors import CockpitError
    from cockpit.core.knobs import Knobs
    from cockpit.core.layout import parse_layout

    layout = parse_layout("tp4 ep2 --max-num-seqs 512 --api-key sk-secret --served-model-name 'a b'")
    assert isinstance(layout.knobs, Knobs)
    assert layout.knobs == ("--max-num-seqs", "512", "--api-key", "sk-secret", "--served-model-name", "a b")
    stored = str(layout)  # what the journal, the registry and the screen hold
    assert stored == "tp4 ep2 --max-num-seqs 512 --api-key *** --served-model-name 'a b'"
    assert "sk-secret" not in stored + repr(layout) + repr(layout.knobs)
    read_back = parse_layout(stored, stored=True)
    assert read_back.knobs.blanked() == ("--api-key",) and str(read_back) == stored
    with pytest.raises(CockpitError, match="the value of --api-key was not stored"):
        parse_layout(stored)  # typed again, `***` would reach the engine as its key
    assert parse_layout(layout.unredacted()) == layout  # the launch's words, secret included
    with pytest.raises(CockpitError, match="close the quote"):
        parse_layout("tp4 --served-model-name 'a b")


def test_a_layout_given_knobs_as_plain_words_holds_them_typed():
    from dataclasses import replace

    from cockpit.core.knobs import Knobs
    from cockpit.core.layout import parse_layout

    layout = replace(parse_layout("tp8 ep"), knobs=("--max-num-seqs", "512"))
    assert isinstance(layout.knobs, Knobs) and layout == parse_layout("tp8 ep --max-num-seqs 512")
    assert layout.parallel.knobs == Knobs() and str(layout.parallel) == "tp8 ep"
