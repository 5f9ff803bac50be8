"""``torch.nn.Module`` and ``torch.nn.Parameter`` for ``isinstance`` and type checks only (see the
package's docstring)."""

from torch import Tensor


class Module:
    pass


class Parameter(Tensor):
    pass
