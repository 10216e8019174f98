#!/usr/bin/env bash
# Installs the Debian packages dtrain needs to build, test and benchmark.
# Idempotent: it asks apt only for what is missing, so `make` can call it cheaply.
# Why each package is here: docs/DEPENDENCIES.md.
set -euo pipefail

BUILD_PKGS=(gcc make pkg-config libopenblas-dev zlib1g-dev libjansson-dev libyaml-dev libsodium-dev libssl-dev libjpeg62-turbo-dev libpng-dev libgif-dev libhdf5-dev libarchive-dev)
DATA_PKGS=(dataset-fashion-mnist)
TEST_PKGS=(clang libclang-rt-14-dev time procps iproute2 slurmctld slurmd slurm-client munge python3-protobuf protobuf-compiler python3-pil python3-h5py diatheke sword-text-kjv sword-text-sparv)
BENCH_PKGS=(python3-torch python3-torchvision python3-pil python3-numpy libopenmpi-dev openmpi-bin)

want=("${BUILD_PKGS[@]}" "${DATA_PKGS[@]}" "${TEST_PKGS[@]}")
case "${1:-}" in
  --bench) want+=("${BENCH_PKGS[@]}") ;;
  --all) want+=("${BENCH_PKGS[@]}") ;;
  "") ;;
  *) echo "usage: $0 [--bench|--all]" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
