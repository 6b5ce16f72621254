#!/bin/bash
# HyperPod lifecycle script for EKS-orchestrated nodes, run once when a node is created.
# Keep it idempotent: HyperPod re-runs it when it replaces a node.
set -euo pipefail
echo "[igw] on_create: node $(hostname) joining the EKS-orchestrated HyperPod cluster"
# Local NVMe (p5/g5) as container scratch when present; HyperPod mounts it at /opt/dlami/nvme.
if [ -d /opt/dlami/nvme ]; then
  mkdir -p /opt/dlami/nvme/containerd
fi
echo "[igw] on_create: done"
