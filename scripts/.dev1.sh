set -x
chmod +x build/bin/* 2>/dev/null
export LD_LIBRARY_PATH=$PWD/build:$PWD/.devlibs
nvidia-smi --query-gpu=index,name --format=csv,noheader
python3 -c "import torch; print(torch.__version__, torch.cuda.device_count())"
cd python && timeout 400 python3 -m pytest -x -q tests/test_pair_cuda.py tests/test_misc.py -k "cuda or torch" -rs 2>&1 | tail -30
