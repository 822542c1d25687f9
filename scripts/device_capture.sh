#!/usr/bin/env bash
# Capture real fixtures on a GPU machine (used once on an H200 through the device tool; see tests/data/real_cases/README.md).
# Every part has its own time limit, and the results are packed after each part so a hang loses only that part.
set -u
CAP=${CAP:-/tmp/cap}; OUTDIR=${OUT:-/tmp/out}
mkdir -p "$CAP" "$OUTDIR"
pack() { tar czf "$OUTDIR/capture.tar.gz" -C "$CAP" . ; }
export PYTHONUNBUFFERED=1
{ nvidia-smi; which nsys ncu dcgmi dcgm-exporter; ls /opt/nvidia /opt/nvidia/* /usr/local/cuda/bin; python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"; } > "$CAP/tools.txt" 2>&1
nvidia-smi -q > "$CAP/nvidia-smi-q.txt" 2>&1
nvidia-smi dmon -s pucvmet -o DT > "$CAP/nvidia-smi-dmon.txt" 2>&1 & DMON=$!
nvidia-smi --query-gpu=timestamp,index,name,pci.bus_id,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,utilization.memory,clocks_event_reasons.active --format=csv -lms 500 > "$CAP/nvidia-smi-query.csv" 2>&1 & QRY=$!
if timeout 60 python3 -c "
import os, torch, torch.distributed as dist
os.environ['MASTER_ADDR']='127.0.0.1'; os.environ['MASTER_PORT']='29533'
dist.init_process_group('nccl', rank=0, world_size=1, device_id=torch.device('cuda:0'))
t=torch.ones(1024, device='cuda'); dist.all_reduce(t); torch.cuda.synchronize(); print('nccl ok', t[0].item())
dist.destroy_process_group()" > "$CAP/nccl_smoke.log" 2>&1; then export PERFSLEUTH_DIST=1; fi
timeout 250 python3 scripts/capture_real_cases.py "$CAP/torch" > "$CAP/torch.log" 2>&1; echo "torch rc=$?" >> "$CAP/torch.log"
kill $DMON $QRY 2>/dev/null; pack
timeout 60 python3 scripts/capture_jax.py "$CAP/jax" > "$CAP/jax.log" 2>&1; echo "jax rc=$?" >> "$CAP/jax.log"; pack
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  timeout 45 "$NCU" --csv --page raw --clock-control none --launch-count 6 python3 scripts/ncu_target.py > "$CAP/ncu_raw.csv" 2> "$CAP/ncu_raw.err"; pack
  timeout 45 "$NCU" --csv --page details --clock-control none --launch-count 6 python3 scripts/ncu_target.py > "$CAP/ncu_details.csv" 2> "$CAP/ncu_details.err"; pack
fi
NSYS=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -1)
if [ -n "$NSYS" ]; then
  timeout 60 "$NSYS" profile -t cuda,nvtx -o /tmp/nsys_rep --force-overwrite true --export sqlite python3 scripts/ncu_target.py > "$CAP/nsys.log" 2>&1
  ls -la /tmp/nsys_rep* >> "$CAP/nsys.log" 2>&1; cp /tmp/nsys_rep.sqlite "$CAP/" 2>/dev/null; pack
fi
ls -laR "$CAP" | head -80
