"""The known causes (causes.toml) are checked the way pattern samples are: every
predicate a cause names is one `suspects` can make, every reference is a public SGLang
issue or PR, and every experiment's `forensics repro` line is one the CLI accepts."""

from __future__ import annotations

import re
import shlex

import pytest
import typer.main

from forensics.analyses.suspects.causes import causes_for, known_causes
from forensics.analyses.suspects.features import declared
from forensics.cli import app


def test_ids_are_unique_and_every_field_is_filled() -> None:
    causes = known_causes()
    assert len(causes) >= 8
    assert len({c.id for c in causes}) == len(causes)
    for c in causes:
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", c.id), c.id
        assert c.title and len(c.what) > 40 and c.points and c.references
        e = c.experiment
        assert e.toggle and e.if_cause and e.if_not, c.id


def test_every_point_is_a_predicate_suspects_can_make() -> None:
    features = {f.name: f for f in declared()}
    for c in known_causes():
        for point in c.points:
            if point.startswith("tag "):  # a run tag or server argument
                assert re.fullmatch(r"tag [\w.]+", point), (c.id, point)
                continue
            name, _, level = point.partition("=")
            assert name in features, (c.id, point)
            if level:  # a level of a categorical, as features.toml spells it
                f = features[name]
                assert f.kind == "level" and level in f.levels, (c.id, point)


def test_references_are_public_issues_of_the_projects_it_reads() -> None:
    projects = "sglang|nixl|llm-d|vllm|vllm-ascend|dynamo|mooncake|aws-do-eks"
    for c in known_causes():
        for ref in c.references:
            assert re.fullmatch(rf"(?:{projects})#\d+", ref), (c.id, ref)


@pytest.mark.parametrize("cause", known_causes(), ids=lambda c: c.id)
def test_the_experiment_is_a_repro_line_the_cli_accepts(cause) -> None:
    argv = shlex.split(cause.experiment.repro)
    assert argv[:2] == ["forensics", "repro"]
    command = typer.main.get_command(app).commands["repro"]
    ctx = command.make_context("repro", argv[2:])  # parses and validates, runs nothing
    assert ctx.params["tag"] and ctx.params["run"] != "repro"  # a tagged run of its own
    assert str(ctx.params["out_file"]).endswith(".jsonl")  # a Path in newer typer
    # the check itself can fail (typer's click: its own copy in newer typer)
    with pytest.raises(Exception, match="No such option"):
        command.make_context("repro", [*argv[2:], "--no-such-option"])


def test_causes_match_on_feature_and_level() -> None:
    assert "cuda-graph-padding" in {c.id for c in causes_for("bs_captured", "false")}
    assert "cuda-graph-padding" not in {c.id for c in causes_for("bs_captured", "true")}
    assert "retract-resume" in {c.id for c in causes_for("num_retractions", "1")}
    assert "overlap-scheduler" in {
        c.id for c in causes_for("tag server.disable_overlap_schedule", "True")
    }


def test_the_experiment_runs_against_the_runs_own_server() -> None:
    from forensics.analyses.suspects.causes import for_run, known_causes

    exp = known_causes()[0].experiment.as_dict()
    got = for_run(exp, {"url": "http://router-7:8000", "sessions": "40", "rounds": "5"})
    assert "forensics repro http://router-7:8000 --sessions 40 --rounds 5 " in got["repro"]
    assert for_run(exp, {}) == exp  # no header: the documented defaults
