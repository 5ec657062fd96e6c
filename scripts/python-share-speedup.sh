#!/usr/bin/env bash
# What following its share buys a Python job: the NumPy example (examples/python/train_numpy.py)
# under one real agent offering 2 cores, started beside a one-core task that ends after a few
# seconds, so the job starts with one core and is re-shared to two. With FOLLOW=1 its worker
# pool follows the share through the kit; with FOLLOW=0 it keeps the one worker it started
# with. Prints each run's training time (the job's own measurement, from its fenced result)
# and the worker counts it logged. Needs python3 with NumPy, and writable cgroups for the CPU
# quotas (without them the shares are not enforced and the figure means little).
# Usage: scripts/python-share-speedup.sh [RUNS] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
steps=${2:-1000}
cargo build --release -q -p tapfinger-agent
dir=$(mktemp -d /tmp/tf-speedup.XXXXXX)
printf 'slot_ms = 500\nround_ms = 200\nheartbeat_ms = 200\n[offer]\ncpu = 2\n' > "$dir/agent.toml"
target/release/tapfinger-agent run --config "$dir/agent.toml" --name a --data-dir "$dir/a" \
    --listen /ip4/127.0.0.1/tcp/7790 --api 127.0.0.1:7791 > "$dir/agent.log" 2>&1 &
agent=$!
trap 'kill $agent 2>/dev/null; wait $agent 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do
    curl -sf http://127.0.0.1:7791/v1/node > /dev/null 2>&1 && break
    sleep 0.2
done
PYTHONPATH=python python3 - "$dir" "$runs" "$steps" <<'PY'
import json, os, statistics, sys, time
from tapfinger_task.client import Client

out, runs, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = Client("127.0.0.1:7791")
script = os.path.abspath("examples/python/train_numpy.py")
kit = os.path.abspath("python")
times = {"1": [], "0": []}
for r in range(runs):
    for follow in ("1", "0"):
        ckpt = os.path.join(out, f"run{r}-follow{follow}")
        c.submit({"name": f"blocker-{r}-{follow}", "command": ["sleep", "10"],
                  "min_demand": {"cpu": 1, "mem": 1}, "max_demand": {"cpu": 1}})
        time.sleep(1.5)
        tid = c.submit({
            "name": f"train-{r}-{follow}", "type": "logreg-numpy",
            "command": ["python3", script], "min_demand": {"cpu": 1, "mem": 1},
            "env": {"PYTHONPATH": kit, "TAPFINGER_CHECKPOINT_DIR": ckpt, "STEPS": steps,
                    "FOLLOW": follow, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}})
        with open(os.devnull, "w") as null:
            ended = c.follow(tid, out=null, err=null, every=0.5)
        assert ended["state"] == "succeeded", ended
        with open(os.path.join(ckpt, "results.json")) as f:
            secs = json.load(f)["seconds"]
        workers = [l for l in c.logs(tid)["stdout"].splitlines() if l.startswith("workers=")]
        times[follow].append(secs)
        print(f"run {r} FOLLOW={follow}: {secs:.1f} s, {' '.join(workers)}", flush=True)
        while any(t["state"] in ("pending", "running") for t in c.tasks()):
            time.sleep(0.5)
f, n = statistics.mean(times["1"]), statistics.mean(times["0"])
print(f"mean: following {f:.1f} s, not following {n:.1f} s: {n / f:.2f} times as fast")
PY
