import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.ones(3, device=device)
stream = torch.cuda.Stream()
print("not reached")
