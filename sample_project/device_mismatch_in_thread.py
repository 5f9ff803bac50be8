"""An evaluation thread sums accuracy into a counter that was created on the CPU.

Training runs on the GPU; a background thread scores the model on held-out batches while
the main thread goes on. `correct = torch.zeros(1)` lives on the host, the predictions on the
GPU: `correct + ...` mixes devices inside the thread (a TorchFunctionMode only sees the
thread that pushed it — tensor-dap pushes one in each thread the program starts).
"""

import threading

import torch
import torch.nn as nn

# the usual device line: on a laptop, check it with `tensor-dap check --simulate cuda`

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

model = nn.Linear(8, 3).to(device)
held_out = [(torch.randn(16, 8, device=device), torch.randint(0, 3, (16,), device=device))]
scores: list[float] = []


def evaluate() -> None:
    correct = torch.zeros(1)
    with torch.no_grad():
        for x, y in held_out:
            hits = (model(x).argmax(dim=1) == y).sum()
            correct = correct + hits  # expect: device-mismatch
    scores.append(correct.item() / 16)


worker = threading.Thread(target=evaluate, name="evaluation")
worker.start()
worker.join()
print(f"accuracy: {scores}")
