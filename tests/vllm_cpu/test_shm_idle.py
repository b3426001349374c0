"""vLLM's shared-memory message queue on the CPU platform: a reader that waits does not spin.

vLLM's reader busy-loops (sched_yield) for 1 s after every read (shm_broadcast.SpinCondition,
busy_loop_s=1). On a CPU host those cycles come out of the cores that compute; `vllm_cpu.register()`
sets the reader's busy loop to 0 so it waits on the queue's notify socket. This test runs a real
MessageQueue (one writer, one reader thread) and reads the reader thread's own CPU time while it waits
1.5 s for its second message: ~1 s with vLLM's spin, ~0 after register(). Without the spin a notification
zmq drops would leave the reader waiting for ever (a rehearsal's evaluation hung so); the second test drops
one and needs the message read within a second. The last test: the shared-memory segments of a TP group lose their
names once every rank has mapped them (`vllm_cpu._unlinked_tp_segments`), so a killed worker leaks none."""

import multiprocessing as mp
import os
import socket
import threading
import time
from types import SimpleNamespace

import pytest


def _reader_cpu_while_waiting(gap_s: float, drop_second_notification: bool = False) -> tuple[float, list, float]:
    """(the reader's CPU seconds while it waits for the second message, the messages, seconds from the second
    write to its read)."""
    from vllm.distributed.device_communicators.shm_broadcast import MessageQueue

    writer = MessageQueue(n_reader=1, n_local_reader=1)
    handle = writer.export_handle()
    got, cpu = [], {}

    def read():
        reader = MessageQueue.create_from_handle(handle, 0)
        reader.wait_until_ready()
        got.append(reader.dequeue(timeout=30))     # first message: starts the busy window
        start = time.thread_time()
        got.append(reader.dequeue(timeout=10))     # second message, gap_s later
        cpu["s"], cpu["read_at"] = time.thread_time() - start, time.monotonic()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    writer.wait_until_ready()
    writer.enqueue("first")
    time.sleep(gap_s)
    if drop_second_notification:  # as zmq's PUB socket may: the write lands, its notification does not
        writer._spin_condition.notify = lambda: None
    written_at = time.monotonic()
    writer.enqueue("second")
    thread.join(timeout=60)
    assert not thread.is_alive() and "read_at" in cpu, f"the reader never got the second message: {got}"
    return cpu["s"], got, cpu["read_at"] - written_at


def test_a_waiting_reader_does_not_spin_after_register():
    from vllm.platforms import current_platform

    from rtpo.verl_ext.cpu_harness import vllm_cpu

    if not current_platform.is_cpu():
        pytest.skip("vllm_cpu.register() changes vLLM's CPU platform only")
    vllm_cpu.register()
    cpu_s, got, _ = _reader_cpu_while_waiting(gap_s=1.5)
    assert got == ["first", "second"]              # same messages, same order
    # vLLM's own reader spends ~1 s of CPU here (its 1 s busy loop); 0.2 s leaves room for a loaded box
    assert cpu_s < 0.2, f"the reader used {cpu_s:.2f} s of CPU waiting 1.5 s for a message: it spins"


def test_a_lost_notification_delays_a_read_by_milliseconds_not_for_ever():
    """The reader waits on the socket only IDLE_POLL_MS at a time, then looks at the queue itself."""
    from vllm.platforms import current_platform

    from rtpo.verl_ext.cpu_harness import vllm_cpu

    if not current_platform.is_cpu():
        pytest.skip("vllm_cpu.register() changes vLLM's CPU platform only")
    vllm_cpu.register()
    cpu_s, got, latency_s = _reader_cpu_while_waiting(gap_s=1.5, drop_second_notification=True)
    assert got == ["first", "second"], got
    assert latency_s < 1.0, f"the second message was read {latency_s:.2f} s after it was written"
    assert cpu_s < 0.2, f"the reader used {cpu_s:.2f} s of CPU waiting 1.5 s for a message"


def _tp_rank(rank: int, port: int, ident: str, patched: bool, q) -> None:
    """One rank of a TP-2 group of vLLM's CPU shared-memory ops (`_CPUSHMDistributed`, as vLLM's CPU worker
    builds it): (its rank, the group's segment names in /dev/shm once built, an all-reduce of rank + 1)."""
    import torch
    import torch.distributed as dist

    os.environ["VLLM_DIST_IDENT"] = ident  # what vLLM's CPU worker sets: its init method's port
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    if patched:
        from rtpo.verl_ext.cpu_harness import vllm_cpu

        vllm_cpu.register()
    import vllm._custom_ops  # noqa: F401  (vLLM's C++ ops, torch.ops._C)
    from vllm.distributed.device_communicators.cpu_communicator import _CPUSHMDistributed

    group = SimpleNamespace(unique_name="tp:0", ranks=[0, 1], world_size=2, rank=rank, device_group=dist.group.WORLD)
    shm = _CPUSHMDistributed(group)
    dist.barrier()
    names = sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"{ident}-"))
    x = torch.full((4,), float(rank + 1))
    shm.all_reduce(x)
    q.put((rank, names, x.tolist()))
    dist.barrier()
    dist.destroy_process_group()


def _tp_group(patched: bool) -> list[tuple]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ident = f"rtpotest{os.getpid()}{int(patched)}"
    procs = [ctx.Process(target=_tp_rank, args=(r, port, ident, patched, q)) for r in (0, 1)]
    for p in procs:
        p.start()
    got = sorted(q.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    left = [n for n in os.listdir("/dev/shm") if n.startswith(f"{ident}-")]
    for n in left:  # vLLM's own segments, left by its unpatched group: not this machine's to keep
        os.unlink(f"/dev/shm/{n}")
    return got


def test_a_tp_groups_shared_memory_keeps_no_name_once_mapped():
    """vLLM names each TP rank's segment after its init port and removes it only on a clean exit: a worker
    that Ray or Slurm kills leaks it (RAM in /dev/shm), and a later group on the same port fails to start
    ("create shm in SHMManager failed. errno: 17": a rehearsal job, 2026-12-07). After register() the names
    are gone once both ranks have mapped the segments, and the group still all-reduces through them."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("vllm_cpu.register() changes vLLM's CPU platform only")
    plain = _tp_group(patched=False)
    assert [len(names) for _, names, _ in plain] == [2, 2], plain  # vLLM's own: both names while it runs
    got = _tp_group(patched=True)
    assert [(rank, names) for rank, names, _ in got] == [(0, []), (1, [])], got
    assert [x for _, _, x in got] == [[3.0] * 4, [3.0] * 4]  # 1 + 2 on both ranks, through the unnamed segments
