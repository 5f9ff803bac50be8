"""``torch.nn.Module`` for ``isinstance`` checks only (see the package's docstring)."""


class Module:
    pass
