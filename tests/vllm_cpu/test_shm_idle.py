"""vLLM's shared-memory message queue on the CPU platform: a reader that waits does not spin.

vLLM's reader busy-loops (sched_yield) for 1 s after every read (shm_broadcast.SpinCondition,
busy_loop_s=1). On a CPU host those cycles come out of the cores that compute; `vllm_cpu.register()`
sets the reader's busy loop to 0 so it waits on the queue's notify socket. This test runs a real
MessageQueue (one writer, one reader thread) and reads the reader thread's own CPU time while it waits
1.5 s for its second message: ~1 s with vLLM's spin, ~0 after register(). Without the spin a notification
zmq drops would leave the reader waiting for ever (a rehearsal's evaluation hung so); the second test drops
one and needs the message read within a second."""

import threading
import time

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
