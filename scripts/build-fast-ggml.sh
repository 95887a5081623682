#!/usr/bin/env bash
# Rebuild ggml from the libggml-python sdist with code for this CPU (AVX2 on x86-64, else
# -march=native), -fno-math-errno, llamafile sgemm and OpenBLAS, replacing the prebuilt (portable,
# no BLAS) wheel in the current Python env.
#
#   bash scripts/build-fast-ggml.sh            # uses `python3` (or $PYTHON) on PATH
#   PYTHON=/path/to/venv/bin/python bash scripts/build-fast-ggml.sh
#
# Afterwards `python -c "import ggmlgrad as gg; print(gg.info())"` reports
# "accelerators": ["BLAS"] and "build": "fast (BLAS)". The build is tuned to this CPU:
# don't copy it to another machine. Undo with:
#   pip install --force-reinstall --no-deps libggml-python==0.20.2.post1
set -euo pipefail

PYTHON="${PYTHON:-python3}"
GGML_VERSION="0.20.2.post1"

need_apt=()
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
if command -v dpkg >/dev/null 2>&1; then
    dpkg -s libopenblas-dev >/dev/null 2>&1 || need_apt+=(libopenblas-dev)   # headers, not just the runtime
else
    found=""
    for h in /usr/include/cblas.h /usr/include/*/cblas.h /usr/include/openblas/cblas.h; do
        [ -e "$h" ] && found="$h"
    done
    [ -n "$found" ] || need_apt+=(libopenblas-dev)
fi
if [ "${#need_apt[@]}" -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "build-fast-ggml: missing ${need_apt[*]} and no apt-get here; install them (OpenBLAS with headers) and rerun" >&2
        exit 1
    fi
    echo "build-fast-ggml: installing ${need_apt[*]} (apt-get)"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

echo "build-fast-ggml: building libggml-python==${GGML_VERSION} from source (a few minutes)"
# -fno-math-errno: without it gcc keeps sqrtf scalar (errno), so no loop calling it vectorises;
# with it ggml's AdamW step (784x256 parameters) ran 7.5x faster. Results are unchanged.
# x86-64 with AVX2: ggml's own kernels are built for AVX2 (+FMA, F16C, BMI2), not -march=native.
# On AVX-512 CPUs native code runs ggml's softmax in 16-lane chunks, so rows shorter than 16
# (class logits) go scalar; the AVX2 build computed a 64-64-64-8 training step's graph about 15%
# faster. Matmuls go to OpenBLAS, which picks its kernels at run time either way.
CPU_ARGS="-DGGML_NATIVE=ON"
if [ "$(uname -m)" = "x86_64" ] && grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
    CPU_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF"
fi
CMAKE_ARGS="${CPU_ARGS} -DGGML_LLAMAFILE=ON -DGGML_BLAS=ON -DGGML_BLAS_VENDOR=OpenBLAS \
-DCMAKE_C_FLAGS=-fno-math-errno -DCMAKE_CXX_FLAGS=-fno-math-errno" \
    "$PYTHON" -m pip install --force-reinstall --no-deps --no-cache-dir --no-binary libggml-python \
    "libggml-python==${GGML_VERSION}"

"$PYTHON" - <<'EOF'
import importlib.util, pathlib
root = pathlib.Path(next(iter(importlib.util.find_spec("libggml").submodule_search_locations)))
blas = sorted(p.name for p in root.rglob("*ggml-blas.*") if p.suffix in (".so", ".dylib", ".dll"))
if not blas:
    raise SystemExit(f"build-fast-ggml: no ggml-blas library under {root} (was OpenBLAS found by cmake?)")
try:
    import ggmlgrad as gg
except ImportError:
    print("build-fast-ggml: built", blas[0], "under", root)
else:
    info = gg.info()
    print("build-fast-ggml:", info["build"], "| accelerators:", info["accelerators"], "|", info["library_dir"])
EOF
