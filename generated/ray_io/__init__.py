"""Typed models of the ray.io API, generated from crd/ by `make generate`; do not edit."""
