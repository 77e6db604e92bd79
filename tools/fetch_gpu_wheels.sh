#!/usr/bin/env bash
# Wheels that tools/gpu_check.sh needs on a GPU machine that has torch but no network and no Jupyter stack
# (the lent machines: Python 3.12, x86-64). Run here, where pip reaches the registry; they land in .whl/
# (git-ignored), which the device call carries. About 20 MB. TARGET_PYTHON=3.11 fetches for another Python.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl && mkdir .whl
PIP="${PYTHON:-python3} -m pip"
$PIP download -q --only-binary=:all: --python-version "${TARGET_PYTHON:-3.12}" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl \
    $(grep -E '^(ipykernel|ipywidgets|nbval|nbformat|nbclient)==' requirements.txt)
# already on those machines, and torch's own dependencies among them: keep their versions
for name in attrs coverage iniconfig packaging pluggy psutil pygments pytest python_dateutil typing_extensions tzdata; do
    rm -f .whl/"$name"-*.whl
done
ls .whl | wc -l | xargs echo "wheels:"
du -sh .whl
