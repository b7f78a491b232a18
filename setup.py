"""Maps the design card's top-level component folders to ``qosmos.<component>``.

pyproject.toml holds all metadata; this file only computes the package list so that a
new sub-package inside a component is picked up without editing a list by hand.
There is deliberately no bare ``operator`` package: it would shadow the stdlib.
"""

from setuptools import find_packages, setup

COMPONENTS = {
    "qosmos": "qosmos",
    "qosmos.dev": "dev",
    "qosmos.extender": "extender",
    "qosmos.predictors": "predictors",
    "qosmos.operator": "operator",
    "qosmos.sidecar": "sidecar",
    "qosmos.simulator": "simulator",
    "qosmos.testing": "testing",
}

packages = list(COMPONENTS)
package_dir = dict(COMPONENTS)
for name, folder in COMPONENTS.items():
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir=package_dir)
