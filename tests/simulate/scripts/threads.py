"""Tensors made on "cuda" in a thread the program starts: the simulated device there too, and
a CPU tensor meeting them is found at its line, as on a GPU."""

import threading

import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
results = []


def prefetch(count: int) -> None:
    batch = torch.randn(count, 4, device=device)
    assert batch.is_cuda == (device.type == "cuda"), batch.device
    weights = torch.ones(4)
    try:
        results.append(batch * weights)  # expect: device-mismatch
    except RuntimeError as error:
        results.append(str(error).split(",")[0])


worker = threading.Thread(target=prefetch, args=(8,))
worker.start()
worker.join()
print(results[0] if isinstance(results[0], str) else tuple(results[0].shape))
print("OK")
