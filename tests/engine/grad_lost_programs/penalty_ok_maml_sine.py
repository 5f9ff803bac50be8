"""Second-order MAML on sinusoid regression with functional weights (dragen1860/MAML-Pytorch style)."""

import math

import torch
import torch.nn.functional as F

torch.manual_seed(0)

n_way_tasks = 4  # meta batch size
k_shot = 10
k_query = 10
update_lr = 0.01
meta_lr = 1e-3
update_step = 3
meta_iters = 25


def init_params():
    def lin(i, o):
        w = torch.empty(o, i)
        torch.nn.init.kaiming_normal_(w)
        return [w.requires_grad_(), torch.zeros(o, requires_grad=True)]

    return lin(1, 40) + lin(40, 40) + lin(40, 1)


def forward(x, vars):
    x = F.relu(F.linear(x, vars[0], vars[1]))
    x = F.relu(F.linear(x, vars[2], vars[3]))
    return F.linear(x, vars[4], vars[5])


def sample_task():
    amp = torch.empty(1).uniform_(0.1, 5.0)
    phase = torch.empty(1).uniform_(0, math.pi)

    def f(n):
        x = torch.empty(n, 1).uniform_(-5, 5)
        return x, amp * torch.sin(x + phase)

    return f


vars = init_params()
meta_optim = torch.optim.Adam(vars, lr=meta_lr)

for step in range(meta_iters):
    losses_q = [0 for _ in range(update_step + 1)]
    for _ in range(n_way_tasks):
        task = sample_task()
        x_spt, y_spt = task(k_shot)
        x_qry, y_qry = task(k_query)

        logits = forward(x_spt, vars)
        loss = F.mse_loss(logits, y_spt)
        grad = torch.autograd.grad(loss, vars, create_graph=True)
        fast_weights = list(map(lambda p: p[1] - update_lr * p[0], zip(grad, vars)))

        with torch.no_grad():
            losses_q[0] += F.mse_loss(forward(x_qry, vars), y_qry).item()

        for k in range(1, update_step):
            logits = forward(x_spt, fast_weights)
            loss = F.mse_loss(logits, y_spt)
            grad = torch.autograd.grad(loss, fast_weights, create_graph=True)
            fast_weights = list(map(lambda p: p[1] - update_lr * p[0], zip(grad, fast_weights)))

        logits_q = forward(x_qry, fast_weights)
        loss_q = F.mse_loss(logits_q, y_qry)
        losses_q[-1] = losses_q[-1] + loss_q

    loss_q = losses_q[-1] / n_way_tasks
    meta_optim.zero_grad()
    loss_q.backward()
    meta_optim.step()

    if step % 5 == 0:
        print(
            "step:",
            step,
            "\tpre-adapt loss:",
            round(losses_q[0] / n_way_tasks, 4),
            "\tpost-adapt loss:",
            round(loss_q.item(), 4),
        )
