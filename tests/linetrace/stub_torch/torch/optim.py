"""``torch.optim.Optimizer`` for ``isinstance`` checks only (see the package's docstring)."""


class Optimizer:
    pass
