"""PINN for viscous Burgers (maziarraissi/PINNs-style, PyTorch port): Adam warmup then L-BFGS with a closure."""

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(1234)
np.random.seed(1234)
nu = 0.01 / np.pi


class DNN(nn.Module):
    def __init__(self, layers):
        super().__init__()
        mods = []
        for i in range(len(layers) - 2):
            mods += [nn.Linear(layers[i], layers[i + 1]), nn.Tanh()]
        mods.append(nn.Linear(layers[-2], layers[-1]))
        self.layers = nn.Sequential(*mods)

    def forward(self, x):
        return self.layers(x)


class PhysicsInformedNN:
    def __init__(self, X_u, u, X_f, layers):
        self.x_u = torch.tensor(X_u[:, 0:1], requires_grad=True).float()
        self.t_u = torch.tensor(X_u[:, 1:2], requires_grad=True).float()
        self.x_f = torch.tensor(X_f[:, 0:1], requires_grad=True).float()
        self.t_f = torch.tensor(X_f[:, 1:2], requires_grad=True).float()
        self.u = torch.tensor(u).float()
        self.dnn = DNN(layers)
        self.optimizer = torch.optim.LBFGS(
            self.dnn.parameters(),
            lr=1.0,
            max_iter=20,
            max_eval=25,
            history_size=50,
            tolerance_grad=1e-5,
            tolerance_change=1.0 * np.finfo(float).eps,
            line_search_fn="strong_wolfe",
        )
        self.optimizer_Adam = torch.optim.Adam(self.dnn.parameters(), lr=1e-3)
        self.iter = 0

    def net_u(self, x, t):
        return self.dnn(torch.cat([x, t], dim=1))

    def net_f(self, x, t):
        u = self.net_u(x, t)
        u_t = torch.autograd.grad(
            u, t, grad_outputs=torch.ones_like(u), retain_graph=True, create_graph=True
        )[0]
        u_x = torch.autograd.grad(
            u, x, grad_outputs=torch.ones_like(u), retain_graph=True, create_graph=True
        )[0]
        u_xx = torch.autograd.grad(
            u_x, x, grad_outputs=torch.ones_like(u_x), retain_graph=True, create_graph=True
        )[0]
        return u_t + u * u_x - nu * u_xx

    def loss_func(self):
        u_pred = self.net_u(self.x_u, self.t_u)
        f_pred = self.net_f(self.x_f, self.t_f)
        loss_u = torch.mean((self.u - u_pred) ** 2)
        loss_f = torch.mean(f_pred**2)
        return loss_u, loss_f

    def closure(self):
        self.optimizer.zero_grad()
        loss_u, loss_f = self.loss_func()
        loss = loss_u + loss_f
        loss.backward()
        self.iter += 1
        if self.iter % 10 == 0:
            print(
                "LBFGS Iter %d, Loss: %.5e, Loss_u: %.5e, Loss_f: %.5e"
                % (self.iter, loss.item(), loss_u.item(), loss_f.item())
            )
        return loss

    def train(self, nIter):
        self.dnn.train()
        for epoch in range(nIter):
            loss_u, loss_f = self.loss_func()
            loss = loss_u + loss_f
            self.optimizer_Adam.zero_grad()
            loss.backward()
            self.optimizer_Adam.step()
            if epoch % 10 == 0:
                print(
                    "Adam It: %d, Loss: %.3e, Loss_u: %.3e, Loss_f: %.3e"
                    % (epoch, loss.item(), loss_u.item(), loss_f.item())
                )
        self.optimizer.step(self.closure)


# boundary / initial data
N_u, N_f = 50, 200
x0 = np.random.uniform(-1, 1, (N_u // 2, 1))
t0 = np.zeros_like(x0)
u0 = -np.sin(np.pi * x0)
tb = np.random.uniform(0, 1, (N_u // 2, 1))
xb = np.where(np.random.rand(N_u // 2, 1) > 0.5, 1.0, -1.0)
ub = np.zeros_like(tb)
X_u_train = np.vstack([np.hstack([x0, t0]), np.hstack([xb, tb])])
u_train = np.vstack([u0, ub])
X_f_train = np.hstack([np.random.uniform(-1, 1, (N_f, 1)), np.random.uniform(0, 1, (N_f, 1))])

layers = [2, 20, 20, 20, 1]
model = PhysicsInformedNN(X_u_train, u_train, X_f_train, layers)
model.train(40)
