"""What the scripted coding agent does for one user task, decided up front.

A plan is a list of steps; each step is one model reply (one or more tool calls, or the
closing text). Steps name tools by role (``write``, ``read``, ``edit``, ``run``, ``ls``,
``compact``); the model maps a role to the tool the request actually offers and to that
tool's argument names, so the plan does not depend on how the tools are spelled.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from hango.simulate.content import NOUNS, PACKAGES, Module, module_source, new_module, test_source

WORKSPACE = "/work"

# A line the scripted agent leaves in a module it writes "with a bug"; the run_command
# tool fails that module's tests while the line is there, and the fix edits it away.
BUG_MARKER = "# FIXME: off-by-one in the running total"
FIXED_LINE = "# The running total starts at zero (fixed)."


@dataclass(frozen=True)
class Call:
    role: str  # write | read | edit | run | ls | compact
    arguments: dict[str, str]


@dataclass(frozen=True)
class Step:
    """One reply: tool calls (possibly several at once), optionally with a short text."""

    text: str
    calls: tuple[Call, ...] = ()


def plan_task(task: str, rng: random.Random) -> list[Step]:
    """The steps for ``task``: explore, write, test, fix, build, report."""
    module = _module_for(task, rng)
    source = module_source(module, rng)
    buggy = rng.random() < 0.6
    if buggy:
        source = source.replace("    return total\n", f"    {BUG_MARKER}\n    return total\n", 1)
    tests = test_source(module, rng)
    package_dir = module.path.rsplit("/", 1)[0]
    steps = [Step("Let me look at the package first.", (Call("ls", {"path": package_dir}),))]
    write_module = Call("write", {"path": module.path, "content": source})
    write_tests = Call("write", {"path": module.test_path, "content": tests})
    if rng.random() < 0.5:
        steps.append(Step(f"Writing `{module.path}` and its tests.", (write_module, write_tests)))
    else:
        steps.append(Step(f"Writing `{module.path}`.", (write_module,)))
        steps.append(Step("Now the tests.", (write_tests,)))
    steps.append(Step("Running the tests.", (Call("run", {"command": _pytest(module)}),)))
    if buggy:
        steps += _fix_steps(module)
    if "make " in task or rng.random() < 0.3:
        target = module.path.split("/")[3]
        steps.append(Step("Checking the build.", (Call("run", {"command": f"make {target}"}),)))
    if rng.random() < 0.2:
        steps.append(Step("Checking for other callers.", (_grep(module),)))
    if rng.random() < 0.08:
        steps.append(
            Step("This task is done; compacting before the next one.", (Call("compact", {}),))
        )
    steps.append(Step(_report(module, buggy, rng)))
    return steps


def _fix_steps(module: Module) -> list[Step]:
    return [
        Step("A test fails; reading the module back.", (Call("read", {"path": module.path}),)),
        Step(
            "Found it: the running total.",
            (Call("edit", {"path": module.path, "old": BUG_MARKER, "new": FIXED_LINE}),),
        ),
        Step("Re-running the tests.", (Call("run", {"command": _pytest(module)}),)),
    ]


def _pytest(module: Module) -> str:
    return f"pytest {module.test_path.removeprefix(WORKSPACE + '/')} -q"


def _grep(module: Module) -> Call:
    package_dir = module.path.rsplit("/", 1)[0].removeprefix(WORKSPACE + "/")
    return Call("run", {"command": f"grep -rn {module.functions[0]} {package_dir}"})


_MENTIONED_MODULE = re.compile(r"`src/(\w+)/(\w+)\.py`")
_MENTIONED_HELPER = re.compile(r"`(\w+)_(\w+)`")
_MENTIONED_PACKAGE = re.compile(r"`make (\w+)`|the (\w+) package|`src/(\w+)`")


def _module_for(task: str, rng: random.Random) -> Module:
    """The module the task names (or a fresh one), under the workspace."""
    module = new_module(rng)
    named = _MENTIONED_MODULE.search(task)
    package, noun = named.groups() if named else (None, None)
    mentioned = _MENTIONED_PACKAGE.search(task)
    if package is None and mentioned:
        package = next(group for group in mentioned.groups() if group)
    helper = _MENTIONED_HELPER.search(task)
    functions = module.functions
    if helper and not named:
        noun = helper.group(2) if helper.group(2) in NOUNS else None
        functions = (helper.group(0).strip("`"), *functions)
    package = package if package in PACKAGES else module.path.split("/")[1]
    noun = noun or module.path.rsplit("/", 1)[-1].removesuffix(".py")
    return Module(
        path=f"{WORKSPACE}/src/{package}/{noun}.py",
        test_path=f"{WORKSPACE}/tests/{package}/test_{noun}.py",
        class_name=module.class_name,
        functions=functions,
    )


def _report(module: Module, fixed: bool, rng: random.Random) -> str:
    names = ", ".join(f"`{name}`" for name in module.functions[:4])
    fix = " One test failed at first (an off-by-one in the running total); fixed." if fixed else ""
    question = rng.choice(
        (
            f" Should I also add a `{module.class_name}.limit` check to {names.split(', ')[0]}?",
            " Do you want the same treatment for the other packages?",
            "",
            "",
        )
    )
    return (
        f"Done: `{module.path}` defines `{module.class_name}` and {names}; tests are in "
        f"`{module.test_path}` and pass.{fix}{question}"
    )
