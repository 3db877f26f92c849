# Source this at the start of a device command (see docs/DEVICE.md):
#   source tools/device-setup.sh
# Installs the carried wheels (.whl/, or $WHL_DIR: e.g. .whl-min with only what the harness
# needs, when the carry is tight) into /tmp/site and puts the checkout on PYTHONPATH,
# because the device machine cannot reach a package registry.
set -e
WHL_DIR=${WHL_DIR:-.whl}
if ls $WHL_DIR/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $WHL_DIR/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
export PATH=/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1
export L2TUI_CACHE_DIR=${L2TUI_CACHE_DIR:-/tmp/l2cache}
set +e
