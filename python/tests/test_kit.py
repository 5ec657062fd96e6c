"""The kit on its own, with the files and variables an agent gives a task written by hand."""

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import unittest
from contextlib import redirect_stdout
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import tapfinger_task as kit  # noqa: E402


def write_share(path, cpus, generation, **extra):
    body = {"cpus": cpus, "memory_bytes": None, "gpus": [], "gpu_share": None,
            "enforced": "cgroup", "generation": generation}
    body.update(extra)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(body, f)
    os.replace(tmp, path)


class Report(unittest.TestCase):
    def test_lines_the_agent_parses(self):
        out = io.StringIO()
        with redirect_stdout(out):
            kit.report(0.25, loss=1.5)
            kit.report(2, accuracy=0.9)  # progress is held to [0, 1]
            kit.checkpointed()
            kit.checkpointed(0.5)
            kit.done(accuracy=0.95)
        self.assertEqual(
            out.getvalue().splitlines(),
            ["TAPFINGER progress=0.25 loss=1.5", "TAPFINGER progress=1 accuracy=0.9",
             "TAPFINGER progress=1 checkpoint=1", "TAPFINGER progress=1 checkpoint=0.5",
             "TAPFINGER progress=1 accuracy=0.95"],
        )

    def test_refuses_what_the_agent_would_drop(self):
        with self.assertRaises(ValueError):
            kit.report(float("nan"))
        with self.assertRaises(ValueError):
            kit.report(0.1, loss=float("inf"))
        with self.assertRaises(ValueError):
            kit.report(0.1, **{"a b": 1})


class Shares(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "7.share.json")

    def test_the_share_in_force_and_outside_an_agent(self):
        write_share(self.path, 2.5, 1, memory_bytes=1 << 30, gpus=[3], gpu_share=0.25)
        with mock.patch.dict(os.environ, {"TAPFINGER_SHARE_FILE": self.path}):
            s = kit.share()
            self.assertEqual((s.cpus, s.threads, s.memory_bytes), (2.5, 2, 1 << 30))
            self.assertEqual(kit.gpus(), ([3], 0.25))
            self.assertEqual(kit.threads(), 2)
        env = {k: v for k, v in os.environ.items() if k != "TAPFINGER_SHARE_FILE"}
        env["CUDA_VISIBLE_DEVICES"] = "0,2"
        with mock.patch.dict(os.environ, env, clear=True):
            s = kit.share()
            self.assertGreaterEqual(s.cpus, 1)
            self.assertEqual((s.gpus, s.memory_bytes, s.generation), ([0, 2], None, 0))

    def test_a_fraction_of_a_core_is_still_one_thread(self):
        write_share(self.path, 0.5, 1)
        self.assertEqual(kit.share(self.path).threads, 1)

    def test_the_watcher_calls_back_on_each_rewrite(self):
        write_share(self.path, 1.0, 1)
        seen = []
        changed = threading.Event()

        def cb(s):
            seen.append(s.cpus)
            changed.set()

        with mock.patch.dict(os.environ, {"TAPFINGER_SHARE_FILE": self.path}):
            w = kit.watch(cb, interval=0.01)
        try:
            write_share(self.path, 4.0, 2, padding="x")  # another size: seen even within one mtime tick
            self.assertTrue(changed.wait(10), "no callback")
            self.assertEqual(seen, [4.0])
        finally:
            w.stop()

    def test_the_computing_thread_runs_the_new_count_after_a_re_share(self):
        """Judged where the count takes effect: OpenMP's (a setting of each thread) and
        OpenBLAS's, read in the thread that computes, as the share goes 4 -> 2 -> 4 cores. Needs
        NumPy and threadpoolctl (.ci/run installs them) and GNU OpenMP (libgomp, with gcc)."""
        import ctypes  # noqa: PLC0415
        import time  # noqa: PLC0415

        import numpy  # noqa: F401, PLC0415 (loads OpenBLAS)
        from threadpoolctl import threadpool_info  # noqa: PLC0415

        gomp = ctypes.CDLL("libgomp.so.1")  # an OpenMP runtime, loaded as a framework loads it
        write_share(self.path, 4.0, 1)
        seen, told = [], []
        ready, stop = threading.Event(), threading.Event()

        def computing():
            w = kit.follow_threads(lambda n: told.append((n, threading.get_ident())), interval=0.01)
            ready.set()
            while not stop.is_set():
                kit.report(0.5)
                blas = {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
                seen.append((gomp.omp_get_max_threads(), blas))
                time.sleep(0.01)
            w.stop()

        def until(omp, what):
            for _ in range(1000):
                if seen and seen[-1] == (omp, {omp}):
                    return
                time.sleep(0.01)
            self.fail(f"the computing thread never ran {what}: {seen[-5:]}")

        out = io.StringIO()
        with mock.patch.dict(os.environ, {"TAPFINGER_SHARE_FILE": self.path}), redirect_stdout(out):
            t = threading.Thread(target=computing)
            t.start()
            try:
                self.assertTrue(ready.wait(10))
                until(4, "4 threads at the start")
                write_share(self.path, 2.0, 2, padding="x")
                until(2, "2 threads after the re-share to 2 cores")
                write_share(self.path, 4.0, 3, padding="xx")
                until(4, "4 threads after the re-share back to 4 cores")
            finally:
                stop.set()
                t.join(10)
                sys.modules["tapfinger_task.share"]._follow.want = None
        # The callback, for pools of the job's own, was told each count once, in that thread.
        self.assertEqual([n for n, _ in told], [4, 2, 4])
        self.assertEqual({who for _, who in told}, {t.ident})


class Fencing(unittest.TestCase):
    def test_a_lower_epoch_is_refused_from_the_higher_one_s_first_write_on(self):
        d = tempfile.mkdtemp()
        p = os.path.join(d, "results", "out.txt")
        old, new = kit.FencedFile(p, my_epoch=(1 << 32) + 5), kit.FencedFile(p, my_epoch=(2 << 32) + 3)
        old.write("old 1")
        old.write("old 2")  # the same epoch writes again
        new.write("new")
        with self.assertRaises(kit.StaleEpoch) as e:
            old.write("old 3")
        self.assertEqual((e.exception.mine, e.exception.highest), ((1 << 32) + 5, (2 << 32) + 3))
        self.assertEqual(old.read(), b"new")
        # Numbers, not strings: 10 > 9.
        q = os.path.join(d, "n")
        kit.FencedFile(q, my_epoch=10).write("10")
        with self.assertRaises(kit.StaleEpoch):
            kit.FencedFile(q, my_epoch=9).write("9")

    def test_another_task_s_file_is_refused_whatever_its_epoch(self):
        d = tempfile.mkdtemp()
        p = os.path.join(d, "results.json")
        kit.FencedFile(p, my_epoch=(1 << 32) + 9, my_task=7).write("task 7")
        # Task 8's first start has a lower epoch than task 7's: the rule for one task's starts
        # would call it stale; it is another task, and says so, at any epoch.
        for e in [(1 << 32) + 1, (5 << 32) + 1]:
            with self.assertRaises(kit.OtherTask) as err:
                kit.FencedFile(p, my_epoch=e, my_task=8).write("task 8")
            self.assertEqual((err.exception.mine, err.exception.owner), (8, 7))
            self.assertIn("belongs to task 7, not to task 8", str(err.exception))
            self.assertIsInstance(err.exception, kit.FenceError)
        self.assertEqual(kit.FencedFile(p, my_task=7).read(), b"task 7")
        with open(p + ".epoch", encoding="ascii") as f:
            self.assertEqual(json.load(f), {"task": 7, "epoch": (1 << 32) + 9})
        # A process outside an agent is no task either.
        with self.assertRaises(kit.OtherTask):
            kit.FencedFile(p, my_epoch=1 << 40, my_task=None).write("local")
        # The task's own next start writes.
        kit.FencedFile(p, my_epoch=(2 << 32) + 1, my_task=7).write("task 7 again")
        self.assertEqual(kit.FencedFile(p, my_task=7).read(), b"task 7 again")

    def test_a_bare_epoch_from_an_older_kit_is_kept_and_its_file_adopted(self):
        d = tempfile.mkdtemp()
        p = os.path.join(d, "out")
        with open(p + ".epoch", "w", encoding="ascii") as f:
            f.write(str((3 << 32) + 1))
        with self.assertRaises(kit.StaleEpoch):
            kit.FencedFile(p, my_epoch=(2 << 32) + 1, my_task=5).write("stale")
        kit.FencedFile(p, my_epoch=(3 << 32) + 1, my_task=5).write("same epoch")
        self.assertEqual(kit.FencedFile(p, my_task=5).owner(), (5, (3 << 32) + 1))

    def test_the_task_and_its_folder_come_from_the_agent(self):
        root = tempfile.mkdtemp()
        for tid in ["11", "12"]:
            env = {"TAPFINGER_TASK_ID": tid, "TAPFINGER_CHECKPOINT_DIR": root}
            with mock.patch.dict(os.environ, env):
                self.assertEqual(kit.FencedFile("x").task, int(tid))
                # Every submission of a spec shares its env: each task gets its own folder.
                self.assertEqual(kit.checkpoint_dir(), os.path.join(root, "task-" + tid))

    def test_the_epoch_comes_from_the_agent(self):
        with mock.patch.dict(os.environ, {"TAPFINGER_EPOCH": str((3 << 32) + 1)}):
            self.assertEqual(kit.epoch(), (3 << 32) + 1)
            self.assertEqual(kit.FencedFile("x").epoch, (3 << 32) + 1)


class Lifecycle(unittest.TestCase):
    def test_resume_checkpoint_dir_and_gang(self):
        d = tempfile.mkdtemp()
        env = {"TAPFINGER_RESUME": "1", "TAPFINGER_TASK_ID": "42"}
        with mock.patch.dict(os.environ, env):
            self.assertTrue(kit.resuming())
            self.assertEqual(kit.checkpoint_dir(d), os.path.join(d, "checkpoints", "task-42"))
            self.assertTrue(os.path.isdir(kit.checkpoint_dir(d)))
            self.assertIsNone(kit.gang())
        env = {"RANK": "1", "WORLD_SIZE": "3", "MASTER_ADDR": "10.0.0.2", "MASTER_PORT": "4000",
               "LOCAL_RANK": "0", "TAPFINGER_GANG_ROLE": "worker"}
        with mock.patch.dict(os.environ, env):
            g = kit.gang()
            self.assertEqual((g.rank, g.world_size, g.init_method), (1, 3, "tcp://10.0.0.2:4000"))

    def test_sigterm_saves_reports_the_checkpoint_and_exits(self):
        d = tempfile.mkdtemp()
        script = (
            "import sys, time; sys.path.insert(0, %r)\n"
            "import tapfinger_task as kit\n"
            "kit.report(0.4)\n"
            "def save():\n"
            "    open(%r, 'w').write('saved')\n"
            "    return 0.3\n"
            "kit.on_preempt(save)\n"
            "print('ready', flush=True)\n"
            "time.sleep(30)\n" % (os.path.dirname(HERE), os.path.join(d, "ckpt"))
        )
        p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        self.assertEqual(p.stdout.readline().split()[-1], "progress=0.4")
        self.assertEqual(p.stdout.readline().strip(), "ready")
        p.send_signal(signal.SIGTERM)
        with p.stdout:
            rest = p.stdout.read()
        self.assertEqual(p.wait(10), 143)
        # The checkpoint holds what `save` said; the progress stays where it was.
        self.assertIn("TAPFINGER progress=0.4 checkpoint=0.3", rest)
        with open(os.path.join(d, "ckpt")) as f:
            self.assertEqual(f.read(), "saved")


class Integrations(unittest.TestCase):
    """The framework callbacks against stand-ins for the frameworks' base classes (neither
    framework is a dependency): what they report, and what a SIGTERM makes them do."""

    def setUp(self):
        import types
        base = type("Callback", (), {"__init__": lambda self: None})
        mods = {
            "lightning": types.ModuleType("lightning"),
            "lightning.pytorch": types.ModuleType("lightning.pytorch"),
            "lightning.pytorch.callbacks": types.ModuleType("lightning.pytorch.callbacks"),
            "transformers": types.ModuleType("transformers"),
        }
        mods["lightning.pytorch.callbacks"].Callback = base
        mods["transformers"].TrainerCallback = type("TrainerCallback", (), {})
        self.patch = mock.patch.dict(sys.modules, mods)
        self.patch.start()

    def tearDown(self):
        self.patch.stop()

    def test_lightning_reports_progress_and_metrics(self):
        from tapfinger_task.integrations import lightning_callback
        trainer = types_ns(estimated_stepping_batches=200, max_steps=-1, global_step=50,
                           callback_metrics={"train/loss": 0.75, "note": "text"})
        cb = lightning_callback(path=os.path.join(tempfile.mkdtemp(), "x.ckpt"))
        out = io.StringIO()
        with redirect_stdout(out):
            cb.on_train_batch_end(trainer, None, None, None, 0)
        self.assertEqual(out.getvalue(), "TAPFINGER progress=0.25 train_loss=0.75\n")

    def test_hugging_face_saves_and_stops_after_sigterm(self):
        from tapfinger_task.integrations import hf_callback
        cb = hf_callback()
        state = types_ns(global_step=30, max_steps=120)
        control = types_ns(should_save=False, should_training_stop=False)
        out = io.StringIO()
        with redirect_stdout(out):
            cb.on_log(None, state, control, logs={"loss": 1.25, "epoch": 0.5})
        self.assertEqual(out.getvalue(), "TAPFINGER progress=0.25 loss=1.25 epoch=0.5\n")
        old = signal.getsignal(signal.SIGTERM)
        try:
            cb.on_train_begin(None, state, control)
            os.kill(os.getpid(), signal.SIGTERM)
            cb.on_step_end(None, state, control)
        finally:
            signal.signal(signal.SIGTERM, old)
        self.assertTrue(control.should_save and control.should_training_stop)
        with mock.patch("os._exit") as exit_, redirect_stdout(io.StringIO()) as out:
            cb.on_save(None, state, control)
        exit_.assert_called_once_with(143)
        self.assertIn("checkpoint=0.25", out.getvalue())


def types_ns(**kw):
    import types
    return types.SimpleNamespace(**kw)


if __name__ == "__main__":
    unittest.main()
