"""The shape of a Hugging Face Transformers `run_glue_no_trainer.py` loop: outputs.loss,
gradient accumulation, train()/eval() toggled per epoch, evaluation under no_grad, loss
tracked with .detach()/.item()."""

import torch
from torch.nn import CrossEntropyLoss


def train(model, train_dataloader, eval_dataloader, optimizer, lr_scheduler, args, accelerator):
    completed_steps = 0
    for epoch in range(args.num_train_epochs):
        model.train()
        total_loss = 0
        for step, batch in enumerate(train_dataloader):
            outputs = model(**batch)
            loss = outputs.loss
            total_loss += loss.detach().float()
            loss = loss / args.gradient_accumulation_steps
            accelerator.backward(loss)
            if step % args.gradient_accumulation_steps == 0:
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
                completed_steps += 1

        model.eval()
        samples_seen = 0
        for batch in eval_dataloader:
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            samples_seen += predictions.shape[0]
        print(epoch, total_loss.item() / len(train_dataloader), samples_seen)


def trainer_style_step(model, inputs, optimizer, scaler, tr_loss):
    model.train()
    with torch.autocast("cuda"):
        outputs = model(**inputs)
        logits = outputs.logits
        loss = CrossEntropyLoss()(logits.view(-1, logits.size(-1)), inputs["labels"].view(-1))
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    tr_loss += loss.detach()
    return tr_loss


def accumulate_then_backward(model, micro_batches, optimizer, criterion):
    for batch in micro_batches:
        optimizer.zero_grad()
        loss = 0
        for x, y in batch:
            loss = loss + criterion(model(x), y)
        loss.backward()
        optimizer.step()
