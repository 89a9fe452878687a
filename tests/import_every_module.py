"""Import every module of the operator's packages (`python -m tests.import_every_module`).

`make pythons` runs it on each Python that requires-python admits besides the image's, in a
virtualenv with the runtime, test and typecheck dependencies only: a module that uses syntax or a
standard-library name that Python lacks, or imports a package that is not a runtime dependency at
module level (Ray, a dev tool), fails here before it fails a user. `__main__` modules are left
out: importing one runs its command (the benchmark would start a control plane).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback

PACKAGES = ("ray_operator", "ray_operator_io")


def module_names(package_name: str) -> list[str]:
    """The package and every module under it, `__main__` modules excepted."""
    package = importlib.import_module(package_name)
    names = [package_name]
    for module in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}."):
        if module.name.rpartition(".")[2] != "__main__":
            names.append(module.name)
    return names


def main() -> int:
    failed = 0
    imported = 0
    for package_name in PACKAGES:
        for name in module_names(package_name):
            try:
                importlib.import_module(name)
            except Exception:
                failed += 1
                print(f"cannot import {name}:", file=sys.stderr)
                traceback.print_exc()
            else:
                imported += 1
    version = ".".join(map(str, sys.version_info[:3]))
    print(f"Python {version}: {imported} modules imported, {failed} failed")
    return 1 if failed or not imported else 0


if __name__ == "__main__":
    sys.exit(main())
