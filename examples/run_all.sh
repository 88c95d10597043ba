#!/usr/bin/env bash
# Run every example at a small configuration; each one compares max_backend with
# eager PyTorch itself and exits non-zero on a mismatch, which fails this script.
#
#   bash examples/run_all.sh            # small configurations (a few minutes warm)
#   FULL=1 bash examples/run_all.sh     # every example's default configuration
#   DEVICE=cuda bash examples/run_all.sh
set -euo pipefail
cd "$(dirname "$0")"
device="${DEVICE:-cpu}"
failed=()

run() {
    echo "=== $*"
    if ! python "$@" --device "$device"; then
        failed+=("$1")
    fi
    echo
}

if [[ "${FULL:-0}" == 1 ]]; then
    run gpt2.py
    run generate.py
    run generate.py --model gpt2
    run vgg.py
    run resnet.py
    run densenet.py
    run gemma3_decoder.py
    run mnist_train.py
    run custom_op_no_graph_break.py
else
    run gpt2.py --runs 3
    run generate.py --new-tokens 4 --runs 1
    run vgg.py --width 16 --size 32 --runs 3
    run resnet.py --width 8 --size 32 --runs 3
    run densenet.py --layout densenet-shallow --width 8 --size 32 --runs 3
    run gemma3_decoder.py --runs 3
    run mnist_train.py --model mlp --epochs 2 --train-size 1024 --test-size 256
    run custom_op_no_graph_break.py
fi

if ((${#failed[@]})); then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
echo "all examples agree with eager PyTorch"
