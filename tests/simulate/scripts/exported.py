import torch

model = torch.nn.Linear(8, 4).cuda()
program = torch.export.export(model, (torch.ones(1, 8, device="cuda"),))
print("not reached")
