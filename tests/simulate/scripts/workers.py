"""DataLoader workers feeding a CUDA model (the workers make CPU batches, as on a GPU box)."""

import torch
from torch.utils.data import DataLoader, Dataset

device = "cuda" if torch.cuda.is_available() else "cpu"


class Squares(Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int):
        x = torch.full((3,), float(i))
        return x, x.pow(2).sum()


model = torch.nn.Linear(3, 1).to(device)
loader = DataLoader(Squares(), batch_size=4, num_workers=2, pin_memory=True)
for x, y in loader:
    x, y = x.to(device, non_blocking=True), y.to(device)
    loss = (model(x).squeeze(1) - y).pow(2).mean()
    loss.backward()
print("OK")
