"""``DistributedDataParallel`` of a module on the simulated device, under torchrun: the ranks
start from rank 0's weights, their gradients are averaged, ``no_sync()`` accumulates, and the
device rules still see inside the wrapped model."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.simulate.test_simulate_cuda import SCRIPTS, _check_command, _marked

TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone")


def _torchrun(tmp_path: Path, script: Path, ranks: int = 2):
    return _check_command(tmp_path, *TORCHRUN, "--nproc_per_node", str(ranks), str(script))


def test_ddp_training_runs_to_the_end_with_equal_parameters_on_every_rank(tmp_path) -> None:
    done, report = _torchrun(tmp_path, SCRIPTS / "ddp_train.py")
    assert report["findings"] == [], done.stderr
    assert report["exit"]["status"] == "ok"
    assert "loss " in done.stdout
    # each rank seeded its model differently and trained on its own shard of the data
    # (the ranks' lines may interleave: each print writes its text and its newline apart)
    totals = dict(re.findall(r"rank (\d) parameters (-?[\d.]+)", done.stdout))
    assert sorted(totals) == ["0", "1"], done.stdout
    assert totals["0"] == totals["1"], done.stdout
    assert "no findings (simulated cuda on the CPU)" in done.stderr


def test_a_cpu_tensor_made_in_the_wrapped_forward_is_reported_on_each_rank(tmp_path) -> None:
    script = SCRIPTS / "ddp_seed_forward.py"
    done, report = _torchrun(tmp_path, script)
    found = sorted((f["process"]["rank"], f["rule"], f["line"]) for f in report["findings"])
    line = _marked(script)
    assert found == [(0, "device-mismatch", line), (1, "device-mismatch", line)], done.stderr
    assert f"ddp_seed_forward.py:{line} device-mismatch [rank 0; rank 1]" in done.stderr
    for rank in (0, 1):  # PyTorch's own error, as on a GPU
        assert f"rank {rank}: Expected all tensors to be on the same device" in done.stdout
        assert f"cuda:{rank} and cpu" in done.stdout


def test_no_sync_accumulates_and_the_next_backward_averages(tmp_path) -> None:
    done, report = _torchrun(tmp_path, SCRIPTS / "ddp_no_sync.py")
    assert report["findings"] == [], done.stderr
    for rank in (0, 1):
        assert (
            f"rank {rank}: no_sync grads differ True, synced grad is the mean True, "
            "unused grad None"
        ) in done.stdout, done.stdout + done.stderr


def test_what_the_simulated_ddp_does_not_do_stops_with_one_line(tmp_path: Path) -> None:
    script = tmp_path / "hook.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "dist.init_process_group('nccl')\n"
        "model = DDP(torch.nn.Linear(3, 1).cuda(), device_ids=[0])\n"
        "model.register_comm_hook(None, lambda state, bucket: None)\n"
        "print('not reached')\n"
    )
    done, report = _torchrun(tmp_path, script, ranks=1)
    assert (
        f"tensor-dap --simulate cuda: DistributedDataParallel.register_comm_hook (at {script}:5)"
        " cannot be simulated" in done.stderr
    ), done.stderr
    assert "not reached" not in done.stdout
    assert report["exit"]["status"] != "ok"
