"""Command line of the API generator.

Usage: python -m ray_operator.apigen [--check] [--fetch-openapi KUBECONFIG]
       [--fetch-go-layout [--kuberay-source DIR]] [--root DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ray_operator.apigen import render, stale_files, write
from ray_operator.apigen.go_layout import fetch_go_layout
from ray_operator.apigen.kubernetes import fetch_documents


def main(argv: list[str] | None = None) -> int:
    """Regenerate (or with --check, verify) crd/ and generated/ under --root."""
    parser = argparse.ArgumentParser(prog="python -m ray_operator.apigen", description=__doc__)
    parser.add_argument(
        "--root",
        type=Path,
        default=Path.cwd(),
        help="repository root (default: the current directory)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if the committed output is stale",
    )
    parser.add_argument(
        "--fetch-openapi",
        metavar="KUBECONFIG",
        type=Path,
        help="first refresh the saved Kubernetes OpenAPI documents from this API server",
    )
    parser.add_argument(
        "--fetch-go-layout",
        action="store_true",
        help="first refresh the saved Go JSON layout of KubeRay's types (needs Go)",
    )
    parser.add_argument(
        "--kuberay-source",
        metavar="DIR",
        type=Path,
        help="with --fetch-go-layout: a local ray-operator directory of the pinned KubeRay release",
    )
    args = parser.parse_args(argv)
    if args.fetch_openapi:
        for path in fetch_documents(args.fetch_openapi):
            print(f"saved {path}")
    if args.fetch_go_layout:
        print(f"saved {fetch_go_layout(args.kuberay_source)}")
    files = render()
    if args.check:
        stale = stale_files(args.root, files)
        for path in stale:
            print(f"stale: {path}", file=sys.stderr)
        return 1 if stale else 0
    write(args.root, files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
