"""An evaluation total kept with its graph, then an unrelated error writing the report: the
leak was real; the program's failure after it does not excuse it."""

import torch


def report(path, value):
    with open(path, "w") as out:
        out.write(str(value))


model = torch.nn.Linear(16, 1)
total = 0.0
for _batch in range(20):
    x = torch.randn(32, 16)
    total += model(x).pow(2).mean()  # real leak: eval total with history
print("val loss", total.item() / 20)
report("/nonexistent/dir/val.txt", total.item() / 20)  # unrelated crash
