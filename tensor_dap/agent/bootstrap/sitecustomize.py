"""tensor-dap's bootstrap: arms the agent in every Python process of a watched run.

This folder is put at the front of ``PYTHONPATH`` by ``tensor-dap check`` and the debug adapter
(see ``tensor_dap/agent/spread.py``), so Python imports this module at start-up in each child
process (torchrun ranks, spawned DataLoader workers). It imports nothing heavy: the agent starts
when the program itself imports torch. Then it runs the ``sitecustomize`` this one hides, if
there is one, so a user's or a distribution's start-up code keeps working.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _arm() -> None:
    try:
        from tensor_dap.agent import child
    except ImportError:
        home = os.environ.get("TENSOR_DAP_HOME")
        if not home or home in sys.path:
            return
        sys.path.append(home)  # last: never shadow the program's own modules
        try:
            from tensor_dap.agent import child
        except ImportError:
            return
    try:
        child.arm()
    except Exception as error:  # the program must start whatever happens here
        sys.stderr.write(f"tensor-dap: the agent could not start in this process: {error}\n")


def _chain() -> None:
    """Run the next ``sitecustomize`` on the path, as Python would have without us."""
    import importlib.machinery
    import importlib.util

    here = os.path.normcase(_HERE)
    path = [p for p in sys.path if os.path.normcase(os.path.abspath(p or ".")) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_arm()
_chain()
