"""The supervisor's stop state: the first reason stands (a user's stop is never turned into a hang), a deleted folder
overrides any, only the user's first stop waits for a checkpoint write, and that wait is said once."""

from __future__ import annotations

from gpuwizard.core.kinds import StopReason
from gpuwizard.runner.supervise.stopstate import StopState


def test_the_first_reason_stands_and_a_deleted_folder_overrides_it():
    stop = StopState()
    stop.request()
    stop.stop_for(StopReason.HANG)
    assert stop.reason == StopReason.USER, "a stop the user asked for stays the user's"
    stop.folder_gone()
    assert stop.reason == StopReason.FOLDER_GONE


def test_only_the_users_first_stop_waits_for_a_checkpoint_and_says_so_once():
    stop = StopState()
    stop.stop_for(StopReason.HANG)
    assert not stop.may_wait(), "a hang stop waits for nothing"
    stop = StopState()
    stop.request()
    assert stop.may_wait() and stop.first_wait() and not stop.first_wait()
    stop.request()
    assert not stop.may_wait(), "a second stop stops at once"


def test_a_job_that_ended_before_the_users_stop_reached_it_keeps_its_own_end():
    stop = StopState()
    stop.request()
    stop.ended_first()
    assert stop.reason is None
    stop.stop_for(StopReason.DIVERGED)
    stop.ended_first()
    assert stop.reason == StopReason.DIVERGED


def test_what_last_named_is_read_once_per_checkpoint_write():
    stop, reads = StopState(), []

    def last() -> str:
        reads.append(1)
        return f"step-{len(reads)}"

    for started in (None, 5.0, 5.0, 9.0):
        stop.checkpoint_began(started, last)
    assert len(reads) == 2 and stop.linked_before == "step-2" and stop.checkpoint_seen == 9.0
