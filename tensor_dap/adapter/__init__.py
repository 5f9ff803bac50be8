"""The debug adapter: a DAP proxy in front of debugpy's own adapter.

debugpy does the debugging; this package adds tensor awareness on the wire: the rule
checkboxes (``exceptionBreakpointFilters``), the agent injected into ``launch``, tensor stops
turned into exception stops named after their rule, and an ``exceptionInfo`` that names the
tensors involved.
"""
