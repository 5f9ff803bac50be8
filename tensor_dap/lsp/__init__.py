"""The language server: what the last ``tensor-dap check`` or debug run saw, in the editor.

``tensor-dap lsp`` speaks LSP on stdio (:mod:`tensor_dap.lsp.server`). It reads the trace store at
``<workspace root>/.tensor-dap/trace.db`` (``$TENSOR_DAP_TRACE`` overrides) through
:mod:`tensor_dap.lsp.store`; one LSP feature per module: :mod:`~tensor_dap.lsp.inlay_hints`,
:mod:`~tensor_dap.lsp.hover`, :mod:`~tensor_dap.lsp.diagnostics`.
"""
