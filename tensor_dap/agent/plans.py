"""Per-function plans: which rule hooks run for one torch function, worked out once.

The per-op path (:mod:`tensor_dap.agent.mode`, and its C twin) looks the function up in the
watch's plan dict and runs only what the plan lists, so asking each rule whether it applies
(``applies``/``applies_before``, see :mod:`tensor_dap.agent.rules.hooks`) happens once per
function, not once per op. A plan is

- :data:`PASS`: no rule looks at this function (metadata reads such as ``t.grad`` or
  ``t.shape``): the op runs untouched, nothing is sampled;
- or a tuple ``(info, before, after, observers)`` with ``before`` of ``(rule id, check,
  screen)``, ``after`` and ``observers`` of ``(rule id, hook)``;
- or, for the program's replacement of a torch method (:mod:`replaced_methods`), that tuple
  planned for torch's original, followed by the original: the op runs it instead.

The C path reads these tuples by position (``_fastpath.c``: ``run_op``, ``run_before``): keep
the layout.

A plan depends on nothing but the function, the rules and whether an accelerator was seen, so
watches share them: a watch started per call (``@tensor_dap.snoop`` on a function called in a
loop) plans each op once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from tensor_dap.agent import accelerators, replaced_methods
from tensor_dap.agent.op_kinds import classify

if TYPE_CHECKING:
    from tensor_dap.agent.engine import Watch

#: the plan of a function no rule looks at
PASS = object()

#: (rule ids planned for, accelerator seen, their hooks) -> {function: plan}
SHARED_PLANS: dict[tuple[Any, ...], dict[Any, Any]] = {}
#: key of each shared dict's (rule ids, accelerator seen): what its plans are made for
_PLANNED_FOR = object()

#: the hooks a plan is made of (a test may patch one: they are part of the shared key)
_PLANNED_HOOKS = (
    "applies",
    "applies_before",
    "applies_passthrough",
    "before",
    "after",
    "observe",
    "SCREEN",
)


def shared_plans(
    active: Iterable[str], accelerator_seen: bool, modules: dict[str, Any]
) -> dict[Any, Any]:
    """The plan dict for the rules ``active`` (ids of ``modules``) now."""
    ids = tuple(sorted(active))
    hooks = tuple(
        getattr(modules[rule_id], hook, None) for rule_id in ids for hook in _PLANNED_HOOKS
    )
    key = (ids, accelerator_seen, hooks)
    plans = SHARED_PLANS.get(key)
    if plans is None:
        plans = SHARED_PLANS[key] = {_PLANNED_FOR: (ids, accelerator_seen)}
    return plans


def make_plan(watch: Watch, func: Any) -> Any:
    """Plan ``func`` for ``watch`` and keep the plan (``Watch._plan``: the per-op path calls it
    for a function not planned yet)."""
    # planned for the rules of the dict it goes in, read once: set_enabled (the debugger's
    # thread) may switch watch._plans meanwhile, and a shared dict must hold its own plans
    if not watch.accelerator_seen and accelerators.in_use():  # a backend came up unseen
        watch._saw_accelerator()
    plans = watch._plans
    active, accelerator_seen = plans[_PLANNED_FOR]
    original = replaced_methods.original_of(func)
    if original is not None:  # (planned as torch's, with the original to run)
        planned = make_plan(watch, original)
        if planned is PASS:
            planned = (classify(original), (), (), ())
        redirect = plans[func] = (*planned, original)
        return redirect
    info = classify(func)
    modules = {**watch._modules, **watch.hooks} if watch.hooks else watch._modules
    if info.passthrough:
        plan: Any = _passthrough_plan(info, active, modules)
    else:
        before = []
        after = []
        observers = []
        for rule_id in active:
            module = modules[rule_id]
            if module.RULE.needs_accelerator and not accelerator_seen:
                continue
            if hasattr(module, "observe"):  # sampled, so it sees every kind of op
                observers.append((rule_id, module.observe))
            applies = getattr(module, "applies", None)
            applies_before = getattr(module, "applies_before", applies)
            if hasattr(module, "before") and (applies_before is None or applies_before(info)):
                screen = getattr(module, "screen", None)  # (per op, else the module's)
                screened = screen(info) if screen is not None else getattr(module, "SCREEN", None)
                before.append((rule_id, module.before, screened))
            if hasattr(module, "after") and (applies is None or applies(info)):
                after.append((rule_id, module.after))
        plan = (info, tuple(before), tuple(after), tuple(observers))
    plans[func] = plan
    return plan


def _passthrough_plan(info: Any, active: Iterable[str], modules: dict[str, Any]) -> Any:
    """A metadata function's plan: :data:`PASS`, unless a module asks to see it
    (``applies_passthrough``: the data breakpoints see ``t.data = x``)."""
    wanted = []
    for rule_id in active:
        module = modules[rule_id]
        applies = getattr(module, "applies_passthrough", None)
        if applies is not None and applies(info):
            wanted.append((rule_id, module))
    if not wanted:
        return PASS
    before = tuple((rule_id, m.before, None) for rule_id, m in wanted if hasattr(m, "before"))
    after = tuple((rule_id, m.after) for rule_id, m in wanted if hasattr(m, "after"))
    return (info, before, after, ())
