#!/usr/bin/env bash
# Fractional GPU shares through the agent on a real NVIDIA GPU: one agent with gpu_step = 0.25,
# two PyTorch tasks at 0.25 and 0.75 of GPU 0 at the same time (MPS clients of the daemon the
# agent starts), then the 0.25 task alone; each reports its bf16 matmul throughput (TFLOP/s) in
# its progress lines, which this script reads from the task logs. Prints the GPU, the date and
# the figures as Markdown.
#
# Needs: an NVIDIA GPU with its driver, nvidia-cuda-mps-control, python3 with torch (CUDA), and
# root (MPS control daemons, cgroups). Usage: sudo scripts/gpu-mps-check.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-40}
for p in nvidia-smi nvidia-cuda-mps-control python3; do
    command -v "$p" >/dev/null || { echo "missing: $p" >&2; exit 2; }
done
python3 -c 'import torch; assert torch.cuda.is_available()' || { echo "torch without CUDA" >&2; exit 2; }
cargo build --release -q -p tapfinger-agent
agent=$PWD/target/release/tapfinger-agent
work=$(mktemp -d /tmp/tf-mps.XXXXXX)
cat > "$work/agent.toml" <<EOF
name = "gpu-box"
data_dir = "$work/data"
listen = ["/ip4/127.0.0.1/tcp/7690"]
api = "127.0.0.1:7691"
slot_ms = 1000
round_ms = 300
policy = "min"
gpu_step = 0.25
EOF
"$agent" run --config "$work/agent.toml" > "$work/agent.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
api=(--api 127.0.0.1:7691)
for _ in $(seq 100); do "$agent" node "${api[@]}" >/dev/null 2>&1 && break; sleep 0.2; done
"$agent" node "${api[@]}" | tee "$work/node.txt"
grep -q "MPS shares" "$work/node.txt" || { echo "the agent does not share GPUs here" >&2; exit 1; }

# A task at `share` of a GPU: bf16 matmuls for $secs seconds, a progress line with its TFLOP/s
# every second.
task() {
    cat > "$work/$1.toml" <<EOF
name = "$1"
command = ["python3", "-c", '''
import time, torch
n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
start = time.time(); last = start; done = 0
while time.time() - start < $secs:
    torch.matmul(a, b); done += 1
    if time.time() - last >= 1:
        torch.cuda.synchronize(); now = time.time()
        print(f"TAPFINGER progress={min(1.0, (now - start) / $secs):.3f} tflops={2 * n**3 * done / (now - last) / 1e12:.1f}", flush=True)
        last = now; done = 0
''']
min_demand = { cpu = 1, gpu = $2, mem = 4 }
EOF
    "$agent" submit "$work/$1.toml" "${api[@]}" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}
# The mean TFLOP/s a task reported, leaving out its first 5 s (start-up).
tflops() {
    grep -o 'tflops=[0-9.]*' "$work/data/logs/$1.stdout" | tail -n +6 | cut -d= -f2 |
        python3 -c 'import sys; v=[float(x) for x in sys.stdin]; print(f"{sum(v)/len(v):.1f}" if v else "-")'
}
wait_done() {
    for id in "$@"; do
        until "$agent" show "$id" "${api[@]}" --json | grep -q '"state": *"\(succeeded\|failed\)"'; do sleep 1; done
    done
}
q=$(task quarter 0.25); r=$(task rest 0.75)
wait_done "$q" "$r"
alone=$(task alone 0.25)
wait_done "$alone"
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
echo
echo "GPU: $gpu; $(date -u +%F); commit $(git rev-parse --short HEAD)"
echo
echo "| task | share | mean TFLOP/s (bf16 matmul, after 5 s) |"
echo "|---|---|---|"
echo "| quarter, beside rest | 0.25 | $(tflops "$q") |"
echo "| rest, beside quarter | 0.75 | $(tflops "$r") |"
echo "| quarter, alone | 0.25 | $(tflops "$alone") |"
grep -c "MPS" "$work/agent.log" >/dev/null || true
echo
echo "(agent log, task logs: $work)"
