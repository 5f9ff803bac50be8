"""The one thing pyproject.toml cannot say: the engine's optional C fast path.

``tensor_dap/agent/_fastpath.c`` is built on Python 3.11+ when a C compiler is there; when the
build fails (no compiler, an older or newer C API) the install still succeeds and the engine
runs its Python path (``tensor_dap/agent/native.py``).
"""

import sys

from setuptools import Extension, setup

extensions = []
if sys.version_info >= (3, 11) and sys.implementation.name == "cpython":
    extensions.append(
        Extension(
            "tensor_dap.agent._fastpath",
            ["tensor_dap/agent/_fastpath.c"],
            optional=True,
        )
    )

setup(ext_modules=extensions)
