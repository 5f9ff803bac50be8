"""A two-layer graph convolutional network (Kipf & Welling), modelled on tkipf/pygcn
(``GraphConvolution`` with ``torch.spmm(adj, support)``, symmetric normalisation
``D^-1/2 (A + I) D^-1/2`` as a sparse tensor, full-batch training with a train mask), on a
synthetic two-community graph.

Bug variants (first argument):
- ``adj-on-cpu``: the sparse adjacency is never moved to the device (only features and labels
  are).
- ``no-self-loops``: the self-loops ``A + I`` are left out, so an isolated node has degree 0
  and ``deg.pow(-0.5)`` is ``inf``.
- ``row-norm-broadcast``: the random-walk normalisation ``D^-1 (A + I)`` of pygcn's
  ``normalize`` written ``adj / adj.sum(dim=1)``: the degrees line up with the columns, so
  ``A[i, j]`` is divided by the degree of ``j`` (the sizes are equal: no error).
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""
N = 40


class GraphConvolution(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(out_features))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, input, adj):
        support = torch.mm(input, self.weight)
        output = torch.sparse.mm(adj, support)  # bug[adj-on-cpu]: device-mismatch
        return output + self.bias


class GCN(nn.Module):
    def __init__(self, nfeat: int, nhid: int, nclass: int) -> None:
        super().__init__()
        self.gc1 = GraphConvolution(nfeat, nhid)
        self.gc2 = GraphConvolution(nhid, nclass)

    def forward(self, x, adj):
        x = F.dropout(F.relu(self.gc1(x, adj)), 0.5, training=self.training)
        return F.log_softmax(self.gc2(x, adj), dim=1)


def normalized_adjacency(edge_index: torch.Tensor) -> torch.Tensor:
    values = torch.ones(edge_index.size(1))
    adj = torch.sparse_coo_tensor(edge_index, values, (N, N)).coalesce().to_dense()
    adj = ((adj + adj.t()) > 0).float()
    if BUG != "no-self-loops":
        adj = adj + torch.eye(N)
    if BUG == "row-norm-broadcast":
        return (adj / adj.sum(dim=1)).to_sparse()  # bug[row-norm-broadcast]: broadcast
    deg = adj.sum(dim=1)
    deg_inv_sqrt = deg.pow(-0.5)  # bug[no-self-loops]: nan-inf
    adj = deg_inv_sqrt[:, None] * adj * deg_inv_sqrt[None, :]
    return adj.to_sparse()


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    labels = (torch.arange(N) >= N // 2).long()
    src, dst = torch.randint(0, N, (2, 120))
    keep = (labels[src] == labels[dst]) | (torch.rand(120) < 0.1)
    edge_index = torch.stack([src[keep], dst[keep]])
    edge_index = edge_index[:, (edge_index != N - 1).all(dim=0)]  # node N-1 is isolated
    features = torch.randn(N, 8) + labels[:, None].float()
    adj = normalized_adjacency(edge_index)
    idx_train = torch.arange(0, N, 2)

    model = GCN(8, 16, 2).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    features, labels, idx_train = features.to(device), labels.to(device), idx_train.to(device)
    if BUG != "adj-on-cpu":
        adj = adj.to(device)
    for epoch in range(20):
        model.train()
        optimizer.zero_grad()
        output = model(features, adj)
        loss_train = F.nll_loss(output[idx_train], labels[idx_train])
        loss_train.backward()
        optimizer.step()
        if epoch % 5 == 4:
            acc = (output.argmax(1) == labels).float().mean()
            print(f"epoch {epoch + 1}: loss_train {loss_train.item():.4f} acc {acc.item():.3f}")


if __name__ == "__main__":
    main()
