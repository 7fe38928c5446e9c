"""The one rule for a job's environment variables, for those a request declares and for its team's
secrets (teams.services.set_team_secret): what a name may be, which names the node agent keeps for
itself, what a value may hold. Each check answers in words a user can act on."""

import re

from teams.constants import (
    ENV_NAME_MAX_CHARS,
    ENV_NAME_PATTERN,
    ENV_VALUE_MAX_CHARS,
    MAX_ENV_VARIABLES_PER_REQUEST,
    RESERVED_ENV_NAMES,
    RESERVED_ENV_PREFIXES,
)

_NAME = re.compile(ENV_NAME_PATTERN)
_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str, only a lone one: a valid pair is one code point
RESERVED = ", ".join([*(f"{p}*" for p in RESERVED_ENV_PREFIXES), *sorted(RESERVED_ENV_NAMES)])


def name_problem(name) -> str:
    """What is wrong with `name` as a job's variable name; '' when nothing is."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        shown = repr(name) if len(repr(name)) <= 40 else repr(name)[:39] + "…"
        return f"{shown} is not a variable name: use letters, digits and _, and do not start with a digit."
    if len(name) > ENV_NAME_MAX_CHARS:
        return f"{name[:20]}…: a variable name has at most {ENV_NAME_MAX_CHARS} characters."
    if name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIXES):
        return f"{name} is reserved: the node agent sets it for every job ({RESERVED})."
    return ""


def value_problem(value) -> str:
    """What is wrong with `value` as a variable's value; '' when nothing is."""
    if not isinstance(value, str):
        return "a value must be a string."
    if len(value) > ENV_VALUE_MAX_CHARS:
        return f"a value has at most {ENV_VALUE_MAX_CHARS} characters (this one has {len(value)})."
    if "\x00" in value:
        return "a value cannot hold NUL characters."
    if _SURROGATE.search(value):
        return "a value cannot hold lone surrogates (text that is not valid Unicode)."
    return ""


def environment_problems(environment) -> list[str]:
    """What is wrong with the variables a request declares ({NAME: value}), one message each."""
    if not isinstance(environment, dict):
        return ["Give the environment as an object of NAME: value strings."]
    if len(environment) > MAX_ENV_VARIABLES_PER_REQUEST:
        return [f"At most {MAX_ENV_VARIABLES_PER_REQUEST} variables; this has {len(environment)}."]
    problems = []
    for name, value in environment.items():
        if problem := name_problem(name):
            problems.append(problem)
        elif problem := value_problem(value):
            problems.append(f"{name}: {problem}")
    return problems
