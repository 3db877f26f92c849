# Source this at the start of a device command (see docs/DEVICE.md):
#   source tools/device-setup.sh
# Installs the carried wheels (.whl/) into /tmp/site and puts the checkout on PYTHONPATH,
# because the device machine cannot reach a package registry.
set -e
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
export PATH=/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1
export L2TUI_CACHE_DIR=${L2TUI_CACHE_DIR:-/tmp/l2cache}
set +e
