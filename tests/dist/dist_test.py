#!/usr/bin/env python3
"""Distributed training on CPU (Gloo) through `kubetune-trainer launch`; each a ctest entry."""
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "train"))
import harness as h  # noqa: E402


def launch(nproc, cfg_path, **kw):
    return ["launch", "--nproc-per-node", nproc, "--master-port", h.free_port(), "--", "train", "--config", cfg_path]


def setup(name, n_examples=48, **model_config):
    w = h.workdir(name)
    model = h.tiny_model(w / "model", **model_config)
    data = h.subset(h.EXAMPLE / "train.jsonl", w / "data.jsonl", n_examples)
    return w, model, data


def same_weights_as_one_process():
    """2 and 3 processes == 1 process with the same global batch of 6, to 1e-5.

    With a tied embedding (the demo model) and an untied one: across processes the embedding's
    gradient is summed over the rows the batch looked up (distributed.sparseEmbeddingGradients),
    and one run checks DDP's dense all-reduce of it too. The optimizer is sharded across processes
    (distributed.sharding optimizer) except in the "allreduce" run; small buckets make some buckets
    that 3 processes cannot split evenly (updated whole) beside ones they can (sharded)."""
    for tied in (True, False):
        w, model, data = setup("ddp-equal-" + ("tied" if tied else "untied"), tie_word_embeddings=tied)
        # name: world, micro-batch, accumulation, sparse embedding, sharded optimizer, bucket MB
        runs = {"1": (1, 2, 3, True, True, 100), "2": (2, 1, 3, True, True, 100),
                "2-allreduce": (2, 1, 3, True, False, 100), "3-small-buckets": (3, 2, 1, True, True, 0.02)}
        if tied:
            runs["2-dense"] = (2, 1, 3, False, True, 100)
        results = {}
        for name, (world, micro, accum, sparse, shard, bucket_mb) in runs.items():
            cfg = h.config(model, data, w / f"out{name}", microBatchSize=micro, gradientAccumulationSteps=accum,
                           maxSteps=4, learningRate=1e-2)
            cfg["distributed"].update(sparseEmbeddingGradients=sparse, sharding="optimizer" if shard else "none",
                                      bucketSizeMb=bucket_mb)
            path = h.write_config(w / f"c{name}.json", cfg)
            args = ["train", "--config", path] if world == 1 else launch(world, path)
            out = h.run(args).stdout
            sharded = re.search(r"optimizer sharded across processes \((\d+) of (\d+) buckets\)", out)
            print(f"tied={tied} world {name}: {sharded.group(0) if sharded else 'optimizer not sharded'}")
            assert bool(sharded) == (world > 1 and shard), out[-2000:]
            if name == "3-small-buckets":  # both kinds of bucket occur
                assert 0 < int(sharded.group(1)) < int(sharded.group(2)), sharded.group(0)
            results[name] = h.weights(w / f"out{name}")
        embedding = "model.embed_tokens.weight"
        moved = (results["1"][embedding] - h.weights(model)[embedding]).abs().max().item()
        assert moved > 1e-3, moved
        for name in runs:
            diff = h.max_abs_diff(results["1"], results[name])
            print(f"tied={tied} world {name}: max |w - w_single| = {diff:.3g}")
            assert diff <= 1e-5, diff


def killed_rank_stops_the_job():
    """SIGKILL one rank mid-run: the launcher exits non-zero within 30 s, naming rank and signal."""
    w, model, data = setup("ddp-kill", 400)
    cfg = h.config(model, data, w / "out", microBatchSize=2, epochs=50)
    launcher = subprocess.Popen([h.TRAINER, *map(str, launch(2, h.write_config(w / "c.json", cfg)))],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = h.child_pids(launcher.pid, 2)
        h.wait_for_step(w / "out", 2)
        killed_at = time.time()
        os.kill(pids[1], signal.SIGKILL)
        out, err = launcher.communicate(timeout=30)
        elapsed = time.time() - killed_at
    finally:
        if launcher.poll() is None:
            launcher.kill()
    print(err.strip().splitlines()[-3:], f"{elapsed:.1f}s")
    assert launcher.returncode != 0
    assert elapsed < 30
    assert re.search(r"rank 1 \(pid \d+\) was killed by signal 9", err), err[-2000:]


def stalled_rank_times_out():
    """A rank that stops participating (SIGSTOP): the others abort on the collective timeout."""
    w, model, data = setup("ddp-stall", 400)
    cfg = h.config(model, data, w / "out", microBatchSize=2, epochs=50)
    cfg["distributed"]["timeoutSeconds"] = 5
    launcher = subprocess.Popen([h.TRAINER, *map(str, launch(2, h.write_config(w / "c.json", cfg)))],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = h.child_pids(launcher.pid, 2)
        h.wait_for_step(w / "out", 2)
        os.kill(pids[1], signal.SIGSTOP)
        out, err = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    print(err.strip().splitlines()[-4:])
    assert launcher.returncode == 3, (launcher.returncode, err[-2000:])  # 3: collective failure, retryable
    assert re.search(r"rank 0 \(pid \d+\) exited with status 3", err), err[-2000:]


def sigterm_checkpoints_and_resume_matches():
    """SIGTERM (a node drain, an eviction) at an arbitrary step: every rank stops after the same
    step, rank 0 writes a checkpoint of it, the launcher exits 3 (retryable); launched again, the
    run resumes there and ends with the same weights as an uninterrupted run."""
    w, model, data = setup("ddp-resume", 48)
    def cfg_for(out, ckpt):
        # Enough steps that the run cannot finish before SIGTERM lands (a step of this model takes
        # a few ms); no periodic checkpoint, so the one found must be the one SIGTERM asked for.
        c = h.config(model, data, out, microBatchSize=2, gradientAccumulationSteps=1, maxSteps=1500)
        c["checkpoint"] = {"resume": "auto", "dir": str(ckpt), "everySteps": 0}
        return c
    h.run(launch(2, h.write_config(w / "a.json", cfg_for(w / "straight", w / "ck-a"))))
    path = h.write_config(w / "b.json", cfg_for(w / "resumed", w / "ck-b"))
    launcher = subprocess.Popen([h.TRAINER, *map(str, launch(2, path))], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        h.wait_for_step(w / "resumed", random.Random().randint(3, 12))
        launcher.send_signal(signal.SIGTERM)
        out, err = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 3, (launcher.returncode, out[-2000:], err[-2000:])
    stopped = re.search(r"stopping at step=(\d+)/1500 on request", out)
    assert stopped, out[-3000:]
    step = int(stopped.group(1))
    checkpoints = sorted(p.name for p in (w / "ck-b").iterdir())
    assert checkpoints == [f"step-{step:08d}"], checkpoints
    assert not list((w / "resumed").glob("*.safetensors")), "a stopped run wrote its output"
    p = h.run(launch(2, path))
    # The launcher relays its ranks' output (logs included) on its stdout.
    assert f"resuming from {w / 'ck-b'}/step-{step:08d} at step={step}/1500" in p.stdout, p.stdout[-2000:]
    diff = h.max_abs_diff(h.weights(w / "straight"), h.weights(w / "resumed"))
    print(f"stopped at step {step}; max |uninterrupted - resumed| = {diff:.3g}")
    assert diff <= 1e-6, diff


def resume_on_another_world_size_keeps_the_global_batch():
    """A checkpoint of a 2-process run (micro-batch 1 x 3 accumulation) resumed on 3 processes with
    the same config, which alone would make a global batch of 9: the checkpoint's 6 is kept (2
    accumulation steps), so the final weights equal the 2-process run's."""
    w, model, data = setup("ddp-resume-world", 48)

    def cfg_for(out, micro, accum, resume):
        c = h.config(model, data, out, microBatchSize=micro, gradientAccumulationSteps=accum, maxSteps=4,
                     learningRate=1e-2)
        c["checkpoint"] = {"resume": resume, "dir": str(out / "ck"), "everySteps": 2}
        return c

    h.run(launch(2, h.write_config(w / "two.json", cfg_for(w / "two", 1, 3, "never"))))
    halfway = w / "two" / "ck" / "step-00000002"
    assert (halfway / "trainer_state.json").exists(), sorted(p.name for p in (w / "two" / "ck").iterdir())
    p = h.run(launch(3, h.write_config(w / "three.json", cfg_for(w / "three", 1, 3, str(halfway)))))
    assert "resuming from" in p.stdout and "global batch 6 (1 x 2 accumulation x 3 processes)" in p.stdout, \
        p.stdout[-2000:]
    diff = h.max_abs_diff(h.weights(w / "two"), h.weights(w / "three"))
    print(f"max |2 processes - resumed on 3| = {diff:.3g}")
    assert diff <= 1e-5, diff


def out_of_memory_step_is_rerun_smaller():
    """A step that runs out of memory (an allocation failure injected into every forward of more
    than 2 examples: KUBETUNE_TEST_OOM_ABOVE_EXAMPLES, the CPU twin of the GPU test
    tests/gpu/out_of_memory_gpu.sh) is re-run at micro-batch 2 with the global batch of 8 kept, and
    the run ends with the weights of one that used micro-batch 2 from the start. On 1 process
    (the failure in the first of two micro-batches) and on 2, where only rank 1 runs out, in the
    forward of its only micro-batch: rank 0 learns it from the vote and skips the update too."""
    w, model, data = setup("oom", n_examples=32)
    for world, only_rank in ((1, None), (2, 1)):
        outs = {}
        for name, micro in (("reference", 2), ("oom", 4)):
            cfg = h.config(model, data, w / f"{name}{world}", microBatchSize=micro, globalBatchSize=8,
                           maxSteps=3, learningRate=1e-2)
            path = h.write_config(w / f"{name}{world}.json", cfg)
            env = dict(os.environ)
            if name == "oom":
                env["KUBETUNE_TEST_OOM_ABOVE_EXAMPLES"] = "2"
                if only_rank is not None:
                    env["KUBETUNE_TEST_OOM_RANK"] = str(only_rank)
            p = h.run(["train", "--config", path] if world == 1 else launch(world, path), env=env)
            outs[name] = p.stdout + p.stderr
        log = outs["oom"]
        assert "step 1 ran out of GPU memory at micro-batch 4: running it again at micro-batch 2" in log, log[-3000:]
        assert log.count("ran out of GPU memory at micro-batch") == 1, log[-3000:]
        assert "ran out of GPU memory" not in outs["reference"]
        diff = h.max_abs_diff(h.weights(w / f"reference{world}"), h.weights(w / f"oom{world}"))
        moved = h.max_abs_diff(h.weights(model), h.weights(w / f"reference{world}"))
        print(f"world {world}: max |w_oom - w_reference| = {diff:.3g} (weights moved by up to {moved:.3g})")
        assert moved > 1e-3, moved
        assert diff <= 1e-6, diff
    # At micro-batch 1 there is nothing smaller: the run stops, naming what to change.
    cfg = h.config(model, data, w / "tiny", microBatchSize=1, globalBatchSize=2, maxSteps=2)
    p = h.run(["train", "--config", h.write_config(w / "tiny.json", cfg)], check=False,
              env={**os.environ, "KUBETUNE_TEST_OOM_ABOVE_EXAMPLES": "0"})
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "step 1 ran out of GPU memory at micro-batch 1" in p.stderr and "gradientCheckpointing" in p.stderr, p.stderr[-2000:]


def slow_checkpoint_volume_does_not_time_out():
    """Rank 0 writes checkpoints and outputs to a volume far slower than the collective timeout
    (every fsync takes 1.5 s, the timeout is 2 s): the other rank waits for it rather than timing
    out in a collective (issue 48: `sharding: full` on GPUs died in the barrier after its
    checkpoint). Under full sharding, with a checkpoint mid-run, a resume from it, and the final
    evaluation after the outputs; a rank frozen (SIGSTOP) during such a wait still ends the job."""
    w, model, data = setup("ddp-slow-volume", 48)
    valid = h.subset(h.EXAMPLE / "train.jsonl", w / "valid.jsonl", 6)
    env = {**os.environ, "LD_PRELOAD": os.environ["KUBETUNE_SLOW_FSYNC"], "SLOW_FSYNC_RANK": "0",
           "SLOW_FSYNC_SECONDS": "1.5"}

    def cfg_for(name, steps):
        c = h.config(model, data, w / name, microBatchSize=2, maxSteps=steps)
        c["data"]["validation"] = str(valid)
        c["checkpoint"] = {"resume": "auto", "dir": str(w / "ck"), "everySteps": 2}
        c["distributed"].update(sharding="full", timeoutSeconds=2)
        return h.write_config(w / f"{name}.json", c)

    started = time.time()
    h.run(launch(2, cfg_for("first", 2)), env=env, timeout=240)
    second = h.run(launch(2, cfg_for("second", 4)), env=env, timeout=240)
    elapsed = time.time() - started
    assert "resuming from" in second.stdout and "at step=2/4" in second.stdout, second.stdout[-2000:]
    assert list((w / "second").glob("*.safetensors")), "no output written"
    assert sorted(p.name for p in (w / "ck").iterdir()) == ["step-00000002", "step-00000004"]
    print(f"two runs with rank 0's fsyncs at 1.5 s each, collective timeout 2 s: {elapsed:.0f} s")
    assert elapsed > 4 * 2, "the volume was not slow: the test would not show a timeout"


def two_launchers_train_and_resume_as_one():
    """Two launchers of one process each, as two pods of a job run (`--nnodes 2 --node-rank R`),
    meeting over TCP at 127.0.0.1: they end with the weights of one launcher of 2 (sharding full,
    a checkpoint every 25 steps). Then one node's process is killed mid-run: the other node's
    launcher ends within the collective timeout (exit 3, retryable); both started again resume
    from the last checkpoint and end with the uninterrupted weights."""
    w, model, data = setup("two-nodes", 48)

    def cfg_for(name):
        c = h.config(model, data, w / name, microBatchSize=2, maxSteps=400, learningRate=1e-3)
        c["distributed"].update(sharding="full", timeoutSeconds=10)
        c["checkpoint"] = {"resume": "auto", "dir": str(w / f"ck-{name}"), "everySteps": 25}
        return h.write_config(w / f"{name}.json", c)

    def nodes(cfg):
        port = h.free_port()
        return [subprocess.Popen([h.TRAINER, "launch", "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", str(r),
                                  "--master-addr", "127.0.0.1", "--master-port", str(port), "--", "train",
                                  "--config", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for r in (0, 1)]

    def finish(launchers, timeout=300):
        try:
            outputs = [p.communicate(timeout=timeout) for p in launchers]
            return [(p.returncode, *out) for p, out in zip(launchers, outputs)]
        finally:
            for p in launchers:
                if p.poll() is None:
                    p.kill()

    h.run(launch(2, cfg_for("one-launcher")), timeout=300)
    reference = h.weights(w / "one-launcher")
    ends = finish(nodes(cfg_for("two-launchers")))
    assert all(p[0] == 0 for p in ends), [p[2][-1500:] for p in ends]
    diff = h.max_abs_diff(reference, h.weights(w / "two-launchers"))
    print(f"max |one launcher of 2 - two launchers of 1| = {diff:.3g}")
    assert diff <= 1e-6, diff

    cfg = cfg_for("killed")
    launchers = nodes(cfg)
    try:
        node1_rank = h.child_pids(launchers[1].pid, 1)[0]
        h.wait_for_step(w / "killed", 30)
        os.kill(node1_rank, signal.SIGKILL)
        killed_at = time.time()
        launchers[0].wait(timeout=40)
        elapsed = time.time() - killed_at
    finally:
        ends = finish(launchers, timeout=30)
    print(f"node 0's launcher ended {elapsed:.1f} s after node 1's process was killed")
    assert ends[0][0] == 3 and ends[1][0] != 0, [(p[0], p[2][-800:]) for p in ends]
    assert elapsed < 10 + 15, elapsed
    checkpoints = sorted(p.name for p in (w / "ck-killed").iterdir() if not p.name.startswith("."))
    assert checkpoints and checkpoints[-1] != "step-00000400", checkpoints
    ends = finish(nodes(cfg))
    assert all(p[0] == 0 for p in ends), [p[2][-1500:] for p in ends]
    resumed = int(checkpoints[-1].split("-")[1])
    assert f"at step={resumed}/400" in ends[0][1] + ends[0][2], ends[0][2][-2000:]
    diff = h.max_abs_diff(reference, h.weights(w / "killed"))
    print(f"resumed from step {resumed} on two launchers: max |uninterrupted - resumed| = {diff:.3g}")
    assert diff <= 1e-6, diff


if __name__ == "__main__":
    h.main({f.__name__: f for f in [same_weights_as_one_process, out_of_memory_step_is_rerun_smaller, killed_rank_stops_the_job,
                                     stalled_rank_times_out, sigterm_checkpoints_and_resume_matches,
                                     resume_on_another_world_size_keeps_the_global_batch,
                                     slow_checkpoint_volume_does_not_time_out,
                                     two_launchers_train_and_resume_as_one]})
