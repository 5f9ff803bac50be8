"""Train a small MLP and periodically estimate the Hessian trace with Hutchinson's method (PyHessian-style)."""

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)


def group_product(xs, ys):
    return sum([torch.sum(x * y) for (x, y) in zip(xs, ys)])


def hessian_vector_product(gradsH, params, v):
    hv = torch.autograd.grad(gradsH, params, grad_outputs=v, only_inputs=True, retain_graph=True)
    return hv


class hessian:
    def __init__(self, model, criterion, data):
        self.model = model.eval()
        self.criterion = criterion
        self.inputs, self.targets = data
        outputs = self.model(self.inputs)
        loss = self.criterion(outputs, self.targets)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.gradsH = torch.autograd.grad(loss, self.params, create_graph=True)

    def trace(self, maxIter=50, tol=1e-3):
        trace_vhv = []
        trace = 0.0
        for i in range(maxIter):
            self.model.zero_grad()
            v = [torch.randint_like(p, high=2) for p in self.params]
            for v_i in v:
                v_i[v_i == 0] = -1
            Hv = hessian_vector_product(self.gradsH, self.params, v)
            trace_vhv.append(group_product(Hv, v).cpu().item())
            if abs(np.mean(trace_vhv) - trace) / (abs(trace) + 1e-6) < tol:
                return trace_vhv
            else:
                trace = np.mean(trace_vhv)
        return trace_vhv


model = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 1))
criterion = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
X = torch.randn(256, 10)
Y = torch.sin(X.sum(1, keepdim=True))

for step in range(40):
    model.train()
    idx = torch.randint(0, 256, (32,))
    loss = criterion(model(X[idx]), Y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        hessian_comp = hessian(model, criterion, data=(X, Y))
        trace = hessian_comp.trace(maxIter=20)
        print("step %d loss %.4f  hessian trace: %.4f" % (step, loss.item(), np.mean(trace)))
