"""Every option of every command has help, and help that states the option's default where
it has one (issue 17, item 5): the whole parser walked, command by command, as
`aner parallel COMMAND --help` builds it."""

from __future__ import annotations

import argparse

import pytest

from aner_coord.cli.main import COMMANDS, build_parser


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def options_of(command: str) -> list[argparse.Action]:
    parser = build_parser(command)
    group = _subparsers(parser).choices["parallel"]
    own = _subparsers(group).choices[command]
    offered = [a for a in own._actions if a.option_strings and a.help != argparse.SUPPRESS]
    return [a for a in offered if not isinstance(a, argparse._HelpAction)]


def rendered(action: argparse.Action) -> str:
    """The help as argparse prints it (`%(default)s` and the like expanded)."""
    text = action.help or ""
    if "%" in text:
        text = text % {**vars(action), "prog": "aner"}
    return " ".join(text.split())


def stated(default: object, text: str) -> bool:
    """Whether `text` says "default" and the value (as a user would write it)."""
    words = {str(default)}
    if isinstance(default, int):
        words.add(f"{default:,}")
    if isinstance(default, float):
        words.add(f"{default:g}")
    if isinstance(default, (list, tuple)):
        words.add(",".join(map(str, default)))
    return "default" in text.lower() and any(w in text for w in words)


# A flag's default is its absence: `--background` is off unless given.
FLAGS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._StoreConstAction)


CASES = [(command, action) for command in COMMANDS for action in options_of(command)]


@pytest.mark.parametrize(
    ("command", "action"), CASES, ids=[f"{c}:{a.option_strings[-1]}" for c, a in CASES]
)
def test_every_option_has_help_that_states_its_default(
    command: str, action: argparse.Action
) -> None:
    text = rendered(action)
    assert text and action.help != argparse.SUPPRESS, f"{command} {action.option_strings}: no help"
    default = action.default
    if default is None or default is False or default == argparse.SUPPRESS:
        return
    if isinstance(action, FLAGS):
        return
    assert stated(default, text), (
        f"aner parallel {command} {action.option_strings[-1]}: the help does not state the "
        f"default {default!r}: {text!r}"
    )


def test_the_walk_reaches_every_command() -> None:
    assert {c for c, _ in CASES} == set(COMMANDS)
    assert len(CASES) > 80


def test_search_offers_no_chunk_it_would_refuse() -> None:
    # A search hands out whole fits: `--chunk` was advertised (default 1) and always refused.
    listed = {s for a in options_of("search") for s in a.option_strings}
    assert "--chunk" not in listed and "--workers" in listed
    assert "--chunk" not in build_parser("search").format_help()


def test_train_cv_and_search_cut_a_fit_into_chunks_of_one_default() -> None:
    # cv and search used 256 rows where train used 128 (issue 25, item 16).
    from aner_coord.computations.dense.computation import Dense
    from aner_coord.computations.search.request import SearchRequest
    from aner_worker.kernels.dense.params import DEFAULT_CHUNK_ROWS
    from aner_worker.kernels.dense.training import TrainingOptions

    defaults = {a.dest: a for a in options_of("cv")}
    assert f"default {DEFAULT_CHUNK_ROWS}" in rendered(defaults["chunk"])
    assert Dense.default_chunk == SearchRequest(seed=1).chunk == DEFAULT_CHUNK_ROWS
    assert TrainingOptions(seed=1).chunk == DEFAULT_CHUNK_ROWS == 128


def test_every_cv_flag_is_derived_from_the_request_type() -> None:
    # `--folds`, `--group` and `--no-refit` were declared by hand beside the derived flags;
    # now each comes from its SearchRequest field, its help from the field's description.
    import msgspec

    from aner_coord.computations.search.request import SearchRequest

    flags = {s: a for a in options_of("cv") for s in a.option_strings}
    for field in msgspec.structs.fields(SearchRequest):
        if field.name in ("grid", "chunk"):  # no grid for one candidate; --chunk: execution's
            continue
        flag = ("--no-" if field.default is True else "--") + field.name.replace("_", "-")
        assert flag in flags, flag
    assert rendered(flags["--folds"]).endswith("1 uses train's own validation split (default 5)")


@pytest.mark.parametrize(
    ("command", "needed"),
    [
        ("train", ("--seed SEED", "--output DIR")),
        ("cv", ("--seed SEED", "--output DIR")),
        ("run", ("--seed SEED", "--samples SAMPLES", "--output DIR")),
        ("regression", ("--seed SEED", "--steps", "--rate RATE", "--output DIR")),
        ("search", ("--spec FILE.toml", "--output DIR")),
    ],
)
def test_the_usage_line_shows_what_a_command_cannot_run_without_as_required(
    command: str, needed: tuple[str, ...]
) -> None:
    # Issue 25 item 16: --seed and --output were shown in brackets, as if optional.
    parser = build_parser(command)
    own = _subparsers(_subparsers(parser).choices["parallel"]).choices[command]
    usage = " ".join(own.format_usage().split())
    for flag in needed:
        assert f" {flag}" in usage and f"[{flag}" not in usage, (flag, usage)
    assert "[--workers WORKERS]" in usage  # the optional stay optional
    assert all(not a.required for a in own._actions if a.option_strings[:1] != ["--spec"])


@pytest.mark.parametrize("rows", ["1e9", "1_000_000_000", "1000000000"])
def test_teacher_rows_are_read_as_exact_integers(rows: str) -> None:
    from aner_coord.cli.arguments import _sizes

    assert _sizes(3)(f"{rows},4,2") == (1_000_000_000, 4, 2)


@pytest.mark.parametrize("text", ["1.5e3,4,2", "1,000,4,2", "1e99999999,4,2", "-1,4,2", "1e9,4"])
def test_teacher_sizes_that_are_not_three_exact_integers_are_refused(text: str) -> None:
    from aner_coord.cli.arguments import _sizes

    with pytest.raises(argparse.ArgumentTypeError):
        _sizes(3)(text)


@pytest.mark.parametrize("command", ["run", "regression", "train", "cv"])
@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--workers", "-1", "0 for the automatic policy (every effective CPU"),
        ("--seed", "-5", "a seed, a whole number from 0 to 2**64 - 1"),
        ("--chunk", "-3", "a whole number such as 1000000, 1,000,000 or 1e6 (0 or more)"),
    ],
)
def test_a_refused_whole_number_says_what_the_flag_takes(
    command: str, flag: str, value: str, says: str
) -> None:
    # Issue 38, item 6: not "expected a whole number such as 1000000" for every flag.
    action = next(a for a in options_of(command) if flag in a.option_strings)
    assert action.type is not None
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        action.type(value)  # type: ignore[operator]
    assert says in str(refused.value) and repr(value) in str(refused.value)
